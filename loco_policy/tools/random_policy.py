"""Random-weight policy files with the full contract, for timing and tests only (never walk).

Builds a tanh MLP obs -> actions with the `onnx` helper API (the training dependency group; the
robot never needs it) and writes the spec's metadata with a correct weights digest, so the file
passes the deployment checks. Its provenance algorithm says what it is.
"""

import json

import numpy as np

from loco_policy import spec
from loco_policy.weights_digest import weights_sha256

ALGORITHM = 'random-mlp (timing and tests only, does not walk)'


def random_policy_model(hidden=(64, 64), obs_dim=None, act_dim=None, seed=0, weight_scale=0.1,
                        nan=False):  # fmt: skip
    """Return an onnx ModelProto: obs [batch, obs_dim] -> Gemm/Tanh layers -> actions."""
    from onnx import helper, numpy_helper, TensorProto

    obs_dim = spec.OBS_DIM if obs_dim is None else obs_dim
    act_dim = spec.ACTION_DIM if act_dim is None else act_dim
    rng = np.random.default_rng(seed)
    sizes = (obs_dim, *hidden, act_dim)
    nodes, inits, last = [], [], 'obs'
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        final = i == len(sizes) - 2
        w = (rng.standard_normal((n_in, n_out)) * weight_scale).astype(np.float32)
        b = np.zeros(n_out, dtype=np.float32)
        if nan and final:
            b[0] = np.nan  # a broken export: non-finite actions
        inits += [numpy_helper.from_array(w, f'w{i}'), numpy_helper.from_array(b, f'b{i}')]
        out = 'actions' if final else f'h{i}'
        nodes.append(
            helper.make_node('Gemm', [last, f'w{i}', f'b{i}'], [out if final else f'z{i}'])
        )
        if not final:
            nodes.append(helper.make_node('Tanh', [f'z{i}'], [out]))
        last = out
    graph = helper.make_graph(
        nodes,
        'policy',
        [helper.make_tensor_value_info('obs', TensorProto.FLOAT, ['batch', obs_dim])],
        [helper.make_tensor_value_info('actions', TensorProto.FLOAT, ['batch', act_dim])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 9
    return model


def write_random_policy(path, hidden=(64, 64), obs_dim=None, act_dim=None, seed=0,
                        weight_scale=0.1, nan=False, layout='velocity', **metadata):  # fmt: skip
    """Write a random policy file with the spec's contract (keys overridable); return the path.

    layout: the spec.LAYOUTS observation ('gait_clock': 50 inputs, the clock last).
    """
    import onnx

    if obs_dim is None:
        obs_dim = sum(term.dim for term in spec.layout_named(layout))
    model = random_policy_model(hidden, obs_dim, act_dim, seed, weight_scale, nan)
    provenance = {
        'algorithm': ALGORITHM,
        'iterations': 0,
        'return': 0.0,
        'code_revision': 'none',
        'created': '1970-01-01T00:00:00Z',
        'weights_sha256': weights_sha256(model.SerializeToString()),
    }
    values = spec.contract_metadata(provenance, layout=layout)
    values.update(metadata)
    for key, value in values.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    onnx.save(model, str(path))
    return str(path)
