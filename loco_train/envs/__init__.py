"""The ANYmal velocity-tracking task: observations, rewards, commands, randomisation."""


def env_overrides(args):
    """make_env keyword options from the trainers' --reward, --command, --randomize, --actuator."""
    pairs = (
        ('reward_overrides', getattr(args, 'reward', None)),
        ('command_overrides', getattr(args, 'command', None)),
        ('randomization_overrides', getattr(args, 'randomize', None)),
        ('actuator', getattr(args, 'actuator', None)),  # --actuator FILE.yaml
    )
    return {name: value for name, value in pairs if value}
