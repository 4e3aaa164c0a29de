"""Online SAC fine-tuning: ROS-free stream ingest, robot reward, crash-safe store (numpy only)."""
