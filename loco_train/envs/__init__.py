"""The ANYmal velocity-tracking task: observations, rewards, commands, randomisation."""
