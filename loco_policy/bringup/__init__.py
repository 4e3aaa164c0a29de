"""The launch graph shared by launch/anymal.launch.py and the embedded launcher."""
