"""ROS-free control logic: controller, safety state machine, robot I/O, tick schedule."""
