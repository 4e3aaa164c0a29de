"""The deployment node graph (ROS-free), shared by launch/anymal.launch.py and `loco-launch`.

Arguments (``name:=value``), all strings as on a ``ros2 launch`` command line:

    use_sim     true | false   start sim_robot (the simulated robot) — default true
    description auto | true | false   start robot_description (URDF + TF without sim_robot);
                               auto: when use_sim is false (on the robot PC)
    backend     mujoco | warp  sim_robot's simulator — default mujoco
    policy      PATH | '' | shipped   policy file; '' runs without one (WALK refused)
    record      true | false   start the recorder — default false
    bag         PATH           recorder output root ('' = bags/anymal_<date>_<time>)
    command     '' | demo | SCHEDULE   start command_source with that /cmd_vel schedule
    stats_file  PATH           policy_node writes its run summary JSON there at shutdown
    finetune    true | false   start sac_finetune, the online SAC learner — default false
    update_key  PATH           HMAC key file of /policy/update, given to policy_node and
                               sac_finetune ('' = policy_node refuses every update)
    store       PATH           sac_finetune's transition store ('' = its config's)
    finetune_config PATH       sac_finetune's parameter file ('' = config/sac_finetune.yaml)
    exploration X              policy_node's exploration_std (action noise in WALK) — default 0
    payload     KG             mass added to sim_robot's base — default 0
    gain_scale  X              sim_robot's multiplier on kp, kd (weaker drives < 1) — default 1
    latency     S              sim_robot's delay from a command's arrival to its use — default 0
    actuator    PATH           sim_robot's drives from an actuator model YAML (fit-actuator's
                               layout, e.g. a robot's fit or a perturbed truth) — default ''
    applied     true | false   sim_robot publishes /joint_command/applied — default false
"""

from dataclasses import dataclass, field
import os
import sys

from loco_policy.tools import command_schedule

PACKAGE = 'loco_policy'

TRAINING_NODES = {'sac_finetune': 'loco_train.nodes.sac_finetune'}
"""Nodes whose module is on the training side (they import torch), by name."""

ARGUMENTS = {
    'use_sim': ('true', 'start sim_robot, the simulated ANYmal'),
    'description': (
        'auto',
        'publish /robot_description (and /tf) without sim_robot: auto = when use_sim is false',
    ),
    'backend': ('mujoco', "sim_robot's simulator: mujoco or warp"),
    'policy': ('shipped', "policy file path; '' for none; shipped = the package's file"),
    'record': ('false', 'start the recorder (rosbag2 MCAP)'),
    'bag': ('', "recorder output root ('' = bags/anymal_<date>_<time>)"),
    'command': ('', "'' none, demo, or a schedule 'name:seconds:vx,vy,wz;...'"),
    'stats_file': ('', 'policy_node run summary JSON path (written at shutdown)'),
    'finetune': ('false', 'start sac_finetune, the online SAC learner (needs the train group)'),
    'update_key': ('', 'HMAC key file of /policy/update for policy_node and sac_finetune'),
    'store': ('', "sac_finetune's transition store directory ('' = config/sac_finetune.yaml's)"),
    'finetune_config': ('', "sac_finetune's parameter file ('' = config/sac_finetune.yaml)"),
    'exploration': ('0', "policy_node's exploration_std: action noise in WALK (0 = off)"),
    'payload': ('0', "kg added to sim_robot's base (a perturbation)"),
    'gain_scale': ('1', "sim_robot's multiplier on kp and kd (weaker drives below 1)"),
    'latency': ('0', "s from a command's arrival at sim_robot to its use by the drives"),
    'actuator': ('', "sim_robot's drives from an actuator model YAML ('' = the ideal PD)"),
    'applied': ('false', "sim_robot publishes its drives' commands on /joint_command/applied"),
}
"""name -> (default, description) of every launch argument."""

TRUE, FALSE = ('true', '1', 'yes', 'on'), ('false', '0', 'no', 'off')


@dataclass
class NodeSpec:
    """One node of the graph: executable, parameter file and parameter overrides."""

    name: str
    """Node name and console-script executable."""
    params_file: str
    """config/<name>.yaml in `node: ros__parameters:` form."""
    overrides: dict = field(default_factory=dict)
    """Parameters set on top of the file (launch arguments)."""

    @property
    def module(self):
        """Python module of the node (python -m)."""
        return TRAINING_NODES.get(self.name, f'{PACKAGE}.nodes.{self.name}')


def config_dir():
    """The config/ directory: the source tree's, else an install prefix's share/loco_policy/config.

    Install prefixes searched: those above this package (a colcon or pip install), then
    AMENT_PREFIX_PATH, then sys.prefix.
    """
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # loco_policy/
    candidates = [os.path.join(os.path.dirname(package), 'config')]
    parent = package
    while os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
        candidates.append(os.path.join(parent, 'share', PACKAGE, 'config'))
    prefixes = os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep) + [sys.prefix]
    candidates += [os.path.join(p, 'share', PACKAGE, 'config') for p in prefixes if p]
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, 'policy_node.yaml')):
            return candidate
    raise FileNotFoundError(f'loco_policy config/ not found; looked in {candidates}')


def parse_args(argv):
    """Parse ['name:=value', ...] into a full argument dict; raise ValueError on unknown names."""
    args = {name: default for name, (default, _) in ARGUMENTS.items()}
    for item in argv:
        name, sep, value = item.partition(':=')
        if not sep:
            raise ValueError(f'argument {item!r} is not name:=value')
        if name not in ARGUMENTS:
            raise ValueError(f'unknown argument {name!r}; known: {", ".join(ARGUMENTS)}')
        args[name] = value.strip('\'"') if value in ("''", '""') else value
    return args


def flag(args, name):
    """Read a boolean argument; raise ValueError when it is neither true nor false."""
    value = str(args[name]).lower()
    if value not in TRUE + FALSE:
        raise ValueError(f'argument {name}:={args[name]} must be true or false')
    return value in TRUE


def node_graph(args, config=None):
    """Return the NodeSpecs the arguments select, in start order (robot first)."""
    config = config or config_dir()
    nodes = []

    def add(name, params_file=None, **overrides):
        params_file = params_file or os.path.join(config, f'{name}.yaml')
        nodes.append(NodeSpec(name, params_file, overrides))

    if args['backend'] not in ('mujoco', 'warp'):
        raise ValueError(f'argument backend:={args["backend"]} must be mujoco or warp')
    use_sim = flag(args, 'use_sim')
    if str(args['description']).lower() == 'auto':
        describe = not use_sim
    elif str(args['description']).lower() in TRUE + FALSE:
        describe = flag(args, 'description')
    else:
        raise ValueError(
            f'argument description:={args["description"]} must be auto, true or false'
        )
    perturbation = {}
    for name in ('payload', 'gain_scale', 'latency'):
        try:
            value = float(args[name])
        except ValueError:
            raise ValueError(f'argument {name}:={args[name]} must be a number') from None
        if value != float(ARGUMENTS[name][0]):
            perturbation[name] = value
    if args['actuator']:
        if args['backend'] != 'mujoco':
            raise ValueError('argument actuator:= needs backend:=mujoco (Warp: the ideal PD only)')
        if not os.path.isfile(args['actuator']):
            raise FileNotFoundError(f'argument actuator:={args["actuator"]}: no such file')
        perturbation['actuator_file'] = os.path.abspath(args['actuator'])
    if use_sim:  # one publisher of the description: robot_description when it runs
        add(
            'sim_robot',
            backend=args['backend'],
            **({'publish_description': False} if describe else {}),
            **({'publish_applied': True} if flag(args, 'applied') else {}),
            **perturbation,
        )
    if describe:
        add('robot_description')
    policy = {} if args['policy'] == 'shipped' else {'policy': args['policy']}
    if args['stats_file']:
        policy['stats_file'] = args['stats_file']
    if args['update_key']:
        policy['update_key_file'] = args['update_key']
    try:
        exploration = float(args['exploration'])
    except ValueError:
        raise ValueError(f'argument exploration:={args["exploration"]} must be a number') from None
    if exploration:
        policy['exploration_std'] = exploration
    add('policy_node', **policy)
    if flag(args, 'finetune'):
        learner = {'update_key_file': args['update_key']} if args['update_key'] else {}
        if args['store']:
            learner['store'] = args['store']
        add('sac_finetune', params_file=args['finetune_config'] or None, **learner)
    if flag(args, 'record'):
        add('recorder', **({'output': args['bag']} if args['bag'] else {}))
    if args['command']:
        schedule = command_schedule.DEMO if args['command'] == 'demo' else None
        text = command_schedule.format_schedule(schedule) if schedule else args['command']
        command_schedule.parse(text)  # fail here, not in the node, on a bad schedule
        add('command_source', schedule=text)
    return nodes
