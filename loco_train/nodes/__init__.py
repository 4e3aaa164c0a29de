"""ROS nodes of the training side: the only modules that import both rclpy and torch."""
