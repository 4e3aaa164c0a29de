"""`loco-train check-policy FILE`: print a policy file's contract; fail naming any mismatch."""

import json

from loco_policy.policy_file import OnnxPolicy, PolicyFileError


def add_arguments(parser):
    """One positional argument: the policy file."""
    parser.add_argument('policy', help='ONNX policy file')


def run(args):
    """Load the file as the robot would; print its contract as JSON, or the refusal."""
    try:
        policy = OnnxPolicy(args.policy, warmup=1)
    except PolicyFileError as error:
        print(json.dumps({'policy': args.policy, 'ok': False, 'error': str(error)}))
        return 1
    contract = policy.contract
    print(
        json.dumps(
            {
                'policy': contract.path,
                'ok': True,
                'version': contract.version,
                'joint_names': list(contract.joint_names),
                'action_scale': contract.action_scale,
                'control_dt': contract.control_dt,
                'observation': [{'name': n, 'dim': d} for n, d, _ in contract.observation],
                'command_ranges': contract.command_ranges,
                'provenance': contract.provenance,
            }
        )
    )
    return 0
