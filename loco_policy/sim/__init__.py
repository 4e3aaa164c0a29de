"""The simulated robot's physics backends (MuJoCo, Warp) behind sim_robot."""
