"""The policy artifact: normaliser, export to the ONNX contract, checks, atomic files."""
