"""The ANYmal velocity-tracking task: observations, rewards, commands, randomisation."""


def env_overrides(args):
    """make_env keyword options from the trainers' environment options (the ones given)."""
    pairs = (
        ('reward_overrides', getattr(args, 'reward', None)),
        ('command_overrides', getattr(args, 'command', None)),
        ('randomization_overrides', getattr(args, 'randomize', None)),
        ('actuator', getattr(args, 'actuator', None)),  # --actuator FILE.yaml
        ('observation', getattr(args, 'observation', None)),  # --observation gait_clock
        ('privileged', getattr(args, 'privileged', None)),  # --privileged dynamics (SHAC)
    )
    return {name: value for name, value in pairs if value}


def add_observation_argument(parser):
    """Add the trainers' `--observation LAYOUT` option (spec.LAYOUTS; the anymal env only)."""
    from loco_policy import spec

    parser.add_argument(
        '--observation',
        default=None,
        choices=sorted(spec.LAYOUTS),
        help='observation layout of the anymal env (default velocity, 48 terms; gait_clock adds '
        'the sin and cos of the gait clock, for the foot_height reward)',
    )
