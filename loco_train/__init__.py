"""loco_train: differentiable simulation, learners, export and benchmarks (warp, torch, mujoco)."""
