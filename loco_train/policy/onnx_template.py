"""A policy graph traced once, re-exported with new weights in milliseconds.

torch.onnx's tracer takes seconds (7 s on one core, 25 s on a loaded one) and is not safe beside
autograd on another thread. A fine-tuning learner exports a candidate of the same architecture
every minute with only the weights changed: it traces the first one, then copies that graph and
overwrites its initializers. An initializer is either a parameter or buffer of the policy (same
name), a normaliser's folded sqrt(var + eps), or a scalar constant of the graph (clip bounds).
Each copy is checked against the module with onnxruntime; a mismatch or an initializer of
unknown origin re-traces, so a template never writes a policy that differs from its module.
"""

import copy

import numpy as np
import torch

from loco_policy import spec
from loco_train.policy.normalizer import EmpiricalNormalizer

TOLERANCE = 1e-5
"""Largest |onnxruntime - torch| action difference a copy may show (rad)."""


def _derived(policy):
    """{module path + '.std': sqrt(var + eps)} of every normaliser in policy (numpy arrays)."""
    out = {}
    for name, module in policy.named_modules():
        if isinstance(module, EmpiricalNormalizer):
            std = torch.sqrt(module.var + module.eps).detach().cpu().numpy()
            out[f'{name}.std' if name else 'std'] = std
    return out


def _sources(policy):
    """Every tensor an initializer may come from: state_dict entries and derived ones (numpy)."""
    state = {k: v.detach().cpu().numpy() for k, v in policy.state_dict().items()}
    state.update(_derived(policy))
    return state


class OnnxTemplate:
    """Export policies of one architecture by swapping their weights into one traced graph."""

    def __init__(self):
        """Empty: the first model_for() traces."""
        self.model = None  # onnx.ModelProto traced from the first policy
        self.origin = {}  # initializer name -> source key (state_dict or derived name)
        self.traces = 0

    def _trace(self, policy):
        """Trace policy and map its initializers to their sources; None when one is unknown."""
        from onnx import numpy_helper

        from loco_train.policy.export import to_onnx_model

        model = to_onnx_model(policy)
        self.traces += 1
        sources, origin = _sources(policy), {}
        for init in model.graph.initializer:
            value = numpy_helper.to_array(init)
            if value.ndim == 0:
                continue  # a constant of the graph (clip bounds), the same for every copy
            if init.name in sources and sources[init.name].shape == value.shape:
                origin[init.name] = init.name
                continue
            match = [
                k
                for k, v in sources.items()
                if v.shape == value.shape and np.allclose(v, value, rtol=1e-6, atol=0)
            ]
            if len(match) == 1:
                origin[init.name] = match[0]
            else:
                self.model, self.origin = None, {}
                return model
        self.model, self.origin = model, origin
        return model

    def model_for(self, policy):
        """An onnx.ModelProto computing policy (a DeployedPolicy): swapped in, else traced."""
        from onnx import numpy_helper

        if self.model is None:
            return copy.deepcopy(self._trace(policy))
        sources = _sources(policy)
        model = copy.deepcopy(self.model)
        for init in model.graph.initializer:
            key = self.origin.get(init.name)
            if key is None:
                continue  # a scalar constant of the graph
            value = sources.get(key)
            if value is None or value.shape != tuple(init.dims):
                return copy.deepcopy(self._trace(policy))  # another architecture
            init.CopyFrom(numpy_helper.from_array(value.astype(np.float32), init.name))
        if not _matches(model, policy):
            return copy.deepcopy(self._trace(policy))
        return model


def _matches(model, policy, samples=32, seed=0):
    """True when onnxruntime on model and policy's forward agree on random observations."""
    import onnxruntime

    from loco_policy.policy_file import session_options

    obs = np.random.default_rng(seed).normal(0.0, 1.0, (samples, spec.OBS_DIM)).astype(np.float32)
    # One thread, no spinning: a default session pins a thread pool to CPUs of its own choice
    # (CPU 1 on two cores, whatever the process's affinity), which in the fine-tuning sidecar
    # could land beside the control loop.
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), sess_options=session_options(),
        providers=['CPUExecutionProvider'],
    )  # fmt: skip
    ours = session.run(None, {'obs': obs})[0]
    with torch.no_grad():
        theirs = policy(torch.from_numpy(obs)).cpu().numpy()
    return bool(np.max(np.abs(ours - theirs)) <= TOLERANCE)
