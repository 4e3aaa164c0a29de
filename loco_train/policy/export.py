"""Export an actor as the self-describing ONNX policy file of ARCHITECTURE.md.

The graph is obs [batch, 48] -> normaliser -> deterministic actor -> actions [batch, 12]; the
deployment contract (spec.contract_metadata) and provenance go into metadata_props as JSON
strings. The file is written to a temporary name and renamed, so a killed export never leaves a
half-written policy behind.
"""

import datetime
import json
import os
import subprocess
import warnings

import torch
from torch import nn

from loco_policy import spec
from loco_policy.weights_digest import weights_sha256
from loco_train.policy.atomic_io import atomic_write, torch_load

POLICY_KEY = 'policy'
"""Checkpoint key of the exportable policy (see policy_payload)."""


class DeployedPolicy(nn.Module):
    """obs (B, 48) -> actions (B, 12): the normaliser followed by the deterministic actor."""

    def __init__(self, normalizer, actor):
        """Wrap a normaliser module and an actor whose forward is the deterministic action."""
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor

    def forward(self, obs):
        """Return the deterministic action for raw (scaled, unnormalised) observations."""
        return self.actor(self.normalizer(obs))


def policy_payload(
    actor,
    actor_kwargs,
    normalizer,
    algorithm,
    iterations,
    mean_return,
    command_ranges=None,
    provenance=None,
    observation_layout='velocity',
):
    """Return the checkpoint entry the exporter reads: actor class, arguments and weights.

    command_ranges: the env's {vx, vy, wz: [low, high]} (None: the spec's, e.g. gymnasium envs).
    provenance: the env's keys for the exported provenance (e.g. the actuator file's sha256).
    observation_layout: the env's spec.LAYOUTS name (the policy file's observation contract).
    """
    cls = type(actor)
    return {
        'command_ranges': command_ranges,
        'actor_class': f'{cls.__module__}:{cls.__qualname__}',
        'actor_kwargs': dict(actor_kwargs),
        'actor_state': actor.state_dict(),
        'normalizer_kwargs': {'dim': int(normalizer.mean.shape[0])},
        'normalizer_state': normalizer.state_dict(),
        'algorithm': str(algorithm),
        'iterations': int(iterations),
        'return': float(mean_return),
        'provenance': dict(provenance or {}),
        'observation_layout': str(observation_layout),
    }


def load_policy(checkpoint_path):
    """Rebuild DeployedPolicy and its provenance stub from a checkpoint holding POLICY_KEY."""
    import importlib

    from loco_train.policy import rsl_rl_policy
    from loco_train.policy.normalizer import EmpiricalNormalizer

    checkpoint = torch_load(checkpoint_path, map_location='cpu')  # tensors and containers only
    if rsl_rl_policy.is_rsl_rl_checkpoint(checkpoint):  # loco-train ppo's model_<iter>.pt
        actor, info = rsl_rl_policy.actor_from_checkpoint(checkpoint)
        info['command_ranges'] = rsl_rl_policy.run_command_ranges(checkpoint_path)
        provenance = rsl_rl_policy.run_provenance(checkpoint_path)  # the env's keys
        if provenance:
            info['provenance'] = provenance
        return DeployedPolicy(nn.Identity(), actor).eval(), info
    if POLICY_KEY not in checkpoint:
        raise ValueError(f'{checkpoint_path}: no {POLICY_KEY!r} entry; not a policy checkpoint')
    payload = checkpoint[POLICY_KEY]
    module_name, _, class_name = payload['actor_class'].partition(':')
    actor = getattr(importlib.import_module(module_name), class_name)(**payload['actor_kwargs'])
    actor.load_state_dict(payload['actor_state'])
    normalizer = EmpiricalNormalizer(**payload['normalizer_kwargs'])
    normalizer.load_state_dict(payload['normalizer_state'])
    info = {key: payload[key] for key in ('algorithm', 'iterations', 'return')}
    info['command_ranges'] = payload.get('command_ranges')  # absent in older checkpoints
    info['observation_layout'] = payload.get('observation_layout', 'velocity')
    if payload.get('provenance'):  # the env's keys (e.g. the actuator file's sha256)
        info['provenance'] = dict(payload['provenance'])
    return DeployedPolicy(normalizer, actor).eval(), info


def code_revision():
    """Return the git commit of this checkout (with '-dirty' when modified), or 'unknown'."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(
            ['git', 'rev-parse', 'HEAD'],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ['git', 'status', '--porcelain', '--untracked-files=no'],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 'unknown'
    return commit + ('-dirty' if dirty.strip() else '')


def to_onnx_model(policy, obs_dim=spec.OBS_DIM):
    """Trace a DeployedPolicy (obs (B, obs_dim)) into an onnx.ModelProto, dynamic batch axis."""
    example = torch.zeros(2, obs_dim)
    batch = torch.export.Dim('batch')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        program = torch.onnx.export(
            policy.eval(),
            (example,),
            None,
            input_names=['obs'],
            output_names=['actions'],
            dynamic_shapes={'obs': {0: batch}},
            dynamo=True,
            verbose=False,
        )
    return program.model_proto


def export_policy(
    policy,
    path,
    algorithm,
    iterations,
    mean_return,
    command_ranges=None,
    extra_provenance=None,
    template=None,
    layout='velocity',
):
    """Write policy (obs -> actions) to `path` as a ONNX file; return metadata.

    command_ranges: the training's {vx, vy, wz: [low, high]} for the contract (None: the spec's).
    extra_provenance: more provenance keys (e.g. a fine-tuned policy's parent and updates).
    template: an OnnxTemplate that supplies the graph (weights swapped in) instead of a trace.
    layout: the observation's spec.LAYOUTS name.
    """
    import onnx

    obs_dim = sum(term.dim for term in spec.layout_named(layout))
    model = to_onnx_model(policy, obs_dim) if template is None else template.model_for(policy)
    blob = model.SerializeToString()
    provenance = {
        'algorithm': str(algorithm),
        'iterations': int(iterations),
        'return': float(mean_return),
        'code_revision': code_revision(),
        'created': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
        'weights_sha256': weights_sha256(blob),
    }
    provenance.update(extra_provenance or {})
    metadata = spec.contract_metadata(provenance, command_ranges, layout)
    del model.metadata_props[:]
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    onnx.checker.check_model(model)
    blob = model.SerializeToString()
    atomic_write(path, lambda handle: handle.write(blob))
    return metadata


def add_arguments(parser):
    """`loco-train export CHECKPOINT -o FILE.onnx`."""
    parser.add_argument('checkpoint', help='training checkpoint (.pt) with a policy entry')
    parser.add_argument('-o', '--output', required=True, help='policy file to write (.onnx)')
    parser.add_argument(
        '--mean-return',
        type=float,
        default=None,
        help="training return to record in the provenance (default: the checkpoint's)",
    )


def run(args):
    """Export the checkpoint's policy and print the written contract."""
    policy, info = load_policy(args.checkpoint)
    if getattr(args, 'mean_return', None) is not None:
        info['return'] = args.mean_return
    metadata = export_policy(
        policy,
        args.output,
        info['algorithm'],
        info['iterations'],
        info['return'],
        info.get('command_ranges'),
        info.get('provenance'),
        layout=info.get('observation_layout', 'velocity'),
    )
    print(
        json.dumps(
            {
                'exported': os.path.abspath(args.output),
                'command_ranges': metadata['command_ranges'],
                'provenance': metadata['provenance'],
            }
        )
    )
    return 0
