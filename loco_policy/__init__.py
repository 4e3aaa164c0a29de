"""loco_policy: deployment side of the ANYmal locomotion stack (numpy, onnxruntime, rclpy)."""
