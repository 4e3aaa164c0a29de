"""Actuator identification: the actuator parameters, their MuJoCo model, excitation, bag fitting.

numpy, mujoco and rosbags only (never torch or warp): the fit runs where the bags are.
"""
