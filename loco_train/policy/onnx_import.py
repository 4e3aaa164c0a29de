"""An exported policy file back into torch: the SquashedGaussianActor and its normaliser.

`loco-train shac` and `loco-train sac` export the actor's mean path after the observation
normaliser (loco_train.policy.export); this reads the weights back by their module names, takes
the hidden sizes and activation from the graph, and checks the rebuilt modules against the file
with onnxruntime. Used to warm-start the fine-tuning sidecar and `loco-train shac --init-policy`.
"""

import numpy as np
import torch

from loco_train.policy.export import DeployedPolicy
from loco_train.policy.normalizer import EmpiricalNormalizer
from loco_train.sac.actor import SquashedGaussianActor


class PolicyImportError(ValueError):
    """A file that is not an exported squashed-Gaussian policy; the message says why."""


def initializers(path):
    """Name -> numpy array of every initializer of an ONNX file."""
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(path)
    except Exception as error:  # protobuf decode errors have no common base class
        raise PolicyImportError(
            f'{path}: not an ONNX file ({type(error).__name__}: {error})'
        ) from None
    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}


def actor_from_onnx(path, sigma0=0.3):
    """(SquashedGaussianActor, EmpiricalNormalizer) with the weights of an exported policy file.

    The exporter writes the actor's parameters under their module names (actor.trunk.<i>.*,
    actor.head.*, actor.b, actor.c) and the normaliser as its mean and sqrt(var + eps); hidden
    sizes and the activation are read from the graph, and a trunk whose weights include vectors
    has a LayerNorm after each activation.
    """
    import onnx

    weights = initializers(path)
    in_trunk = sorted(
        (int(name.split('.')[2]), name)
        for name in weights
        if name.startswith('actor.trunk.') and name.endswith('.weight')
    )
    trunk = [(i, name) for i, name in in_trunk if weights[name].ndim == 2]  # the Linear layers
    layer_norm = len(trunk) < len(in_trunk)  # LayerNorm weights are vectors (width,)
    needed = ('actor.head.weight', 'actor.head.bias', 'actor.b', 'actor.c', 'normalizer.mean')
    if not trunk or any(name not in weights for name in needed):
        raise PolicyImportError(
            f'{path}: not a squashed-Gaussian actor as loco-train shac/sac export it '
            f'(initializers {sorted(weights)[:6]}...)'
        )
    activation = _trunk_activation(onnx.load(path).graph, trunk[0][1])
    if activation is None:
        raise PolicyImportError(f'{path}: the first trunk layer is not followed by Elu/Tanh/Relu')
    hidden = tuple(int(weights[name].shape[0]) for _, name in trunk)
    b, c = weights['actor.b'].copy(), weights['actor.c'].copy()
    actor = SquashedGaussianActor(
        int(weights[trunk[0][1]].shape[1]),
        b,
        c,
        hidden=hidden,
        activation=activation,
        sigma0=sigma0,
        layer_norm=layer_norm,
    )
    state = {
        key: torch.as_tensor(np.array(weights[f'actor.{key}']))
        for key in [n[len('actor.') :] for n in weights if n.startswith('actor.')]
    }
    actor.load_state_dict(state)
    normalizer = EmpiricalNormalizer(actor.trunk[0].in_features)
    # the exporter folds sqrt(var + eps) into one constant; its name is torch's ('sqrt')
    scale = weights.get('sqrt')
    if scale is None or scale.shape != weights['normalizer.mean'].shape:
        shape = weights['normalizer.mean'].shape
        scale = next(
            (
                v
                for n, v in weights.items()
                if v.shape == shape and not n.startswith(('actor.', 'normalizer.'))
            ),
            None,
        )
    if scale is None:
        raise PolicyImportError(f'{path}: the normaliser scale is not in the graph')
    with torch.no_grad():
        normalizer.mean.copy_(torch.as_tensor(weights['normalizer.mean'].copy()))
        var = torch.as_tensor(scale.copy(), dtype=torch.float64) ** 2 - normalizer.eps
        normalizer.var.copy_(var.clamp_min(0.0).float())
        normalizer.count.fill_(1.0)
    _check_against_onnx(path, actor, normalizer)
    return actor, normalizer


def _trunk_activation(graph, first_weight):
    """The activation name of the op that consumes the first trunk Gemm's output, or None."""
    names = {'Elu': 'elu', 'Tanh': 'tanh', 'Relu': 'relu'}
    gemm = next((n for n in graph.node if n.op_type == 'Gemm' and first_weight in n.input), None)
    if gemm is None:
        return None
    follower = next((n for n in graph.node if gemm.output[0] in n.input), None)
    return names.get(follower.op_type) if follower is not None else None


def _check_against_onnx(path, actor, normalizer, samples=64, tolerance=1e-4):
    """Raise PolicyImportError unless the rebuilt actor's mean action equals the file's."""
    from loco_policy.policy_file import OnnxPolicy

    generator = torch.Generator().manual_seed(1)
    std = torch.sqrt(normalizer.var + normalizer.eps)
    obs = normalizer.mean + std * torch.randn(
        samples, normalizer.mean.shape[0], generator=generator
    )
    with torch.no_grad():
        ours = DeployedPolicy(normalizer, actor).eval()(obs).numpy()
    policy = OnnxPolicy(path, warmup=0)
    theirs = np.array([policy.act(row) for row in obs.numpy().astype(np.float64)])
    error = float(np.abs(ours - theirs).max())
    if not error < tolerance:
        raise PolicyImportError(
            f'{path}: the rebuilt actor differs from the file by {error:.3g} (over {tolerance}); '
            "its layout is not the exporter's"
        )
