"""Training loops (SHAC, SAC, rsl-rl PPO): logging, checkpoints, resume."""
