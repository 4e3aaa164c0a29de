"""The policy file: read an ONNX policy's contract metadata, check it against the spec, run it.

A policy file is one ONNX model with input ``obs`` [batch, 48] (or 50 with the gait clock) and
output ``actions`` [batch, 12] whose ``metadata_props`` (each value a JSON string) carry the
deployment contract. The keys are listed in METADATA_KEYS and described in ARCHITECTURE.md; other
tools read them, so they are stable. A file whose observation ends in the gait clock also holds
``gait_period`` (s). This module needs only onnxruntime (never onnx, torch or warp).
"""

from dataclasses import dataclass
import functools
import hashlib
import json
import os

import numpy as np

from loco_policy import spec
from loco_policy.weights_digest import external_initializers, weights_sha256, WireError

LOCO_FORMAT = 1
"""The metadata format version this deployment side reads."""

METADATA_KEYS = (
    'loco_format',
    'joint_names',
    'default_joint_pos',
    'action_scale',
    'action_bounds',
    'kp',
    'kd',
    'torque_limit',
    'control_dt',
    'observation',
    'command_ranges',
    'provenance',
)
"""Every key a policy file's metadata_props must hold."""

PROVENANCE_KEYS = (
    'algorithm',
    'iterations',
    'return',
    'code_revision',
    'created',
    'weights_sha256',
)
"""Keys of the provenance object."""

INPUT_NAME = 'obs'
OUTPUT_NAME = 'actions'
ATOL = 1e-6
"""Absolute tolerance when comparing float figures of the file with the spec."""


class PolicyFileError(ValueError):
    """A policy file that cannot be read or whose contract does not match the robot."""


@dataclass(frozen=True)
class PolicyContract:
    """The deployment contract read from a policy file's metadata."""

    path: str
    """Absolute path of the file."""
    file_sha256: str
    """sha256 of the whole file (hex)."""
    joint_names: tuple
    """The 12 joint names in robot order."""
    default_joint_pos: np.ndarray
    """(12,) rad."""
    action_scale: float
    """q* = default + action_scale * a (rad per unit action)."""
    action_low: np.ndarray
    """(12,) lower bound of an action; the robot clips actions to [action_low, action_high]."""
    action_high: np.ndarray
    """(12,) upper bound of an action."""
    kp: np.ndarray
    """(12,) N m/rad."""
    kd: np.ndarray
    """(12,) N m s/rad."""
    torque_limit: np.ndarray
    """(12,) N m."""
    control_dt: float
    """Policy period (s)."""
    observation: tuple
    """((name, dim, scale tuple), ...) in observation order."""
    gait_period: float
    """Seconds per gait-clock cycle (0 for a layout without the clock)."""
    command_ranges: dict
    """{'vx': (low, high), 'vy': ..., 'wz': ...}; m/s and rad/s."""
    provenance: dict
    """{algorithm, iterations, return, code_revision, created, weights_sha256}."""

    @property
    def version(self):
        """Short version string: the first 12 hex digits of the file's sha256."""
        return self.file_sha256[:12]

    @property
    def obs_dim(self):
        """Entries of the observation the policy takes."""
        return sum(dim for _, dim, _ in self.observation)

    @property
    def layout(self):
        """The spec.LAYOUTS name whose terms and sizes the observation has, or None."""
        ours = [(n, d) for n, d, _ in self.observation]
        for name, terms in spec.LAYOUTS.items():
            if ours == [(t.name, t.dim) for t in terms]:
                return name
        return None

    @functools.cached_property
    def gait_clock(self):
        """Whether the policy takes the gait clock (the control loop counts its periods)."""
        return self.layout == 'gait_clock'


def _json(meta, key):
    """Decode one metadata value, naming the key when it is missing or not JSON."""
    if key not in meta:
        raise PolicyFileError(
            f'policy metadata lacks key {key!r} (needs {", ".join(METADATA_KEYS)})'
        )
    try:
        return json.loads(meta[key])
    except (TypeError, ValueError) as error:
        raise PolicyFileError(f'policy metadata {key!r} is not JSON: {error}') from None


def _floats(meta, key, size):
    """Decode a metadata value as a finite float array of the given size."""
    value = _json(meta, key)
    try:
        array = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise PolicyFileError(f'policy metadata {key!r} is not a list of numbers') from None
    if array.size != size or not np.all(np.isfinite(array)):
        raise PolicyFileError(f'policy metadata {key!r} needs {size} finite numbers, got {value}')
    return array


def parse_metadata(meta, path='<memory>', file_sha256=''):
    """Build a PolicyContract from a metadata dict of JSON strings; raise PolicyFileError."""
    fmt = _json(meta, 'loco_format')
    if fmt != LOCO_FORMAT:
        raise PolicyFileError(
            f'policy loco_format is {fmt!r}, this deployment reads {LOCO_FORMAT}'
        )
    names = _json(meta, 'joint_names')
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise PolicyFileError('policy metadata joint_names must be a list of strings')
    observation = _json(meta, 'observation')
    try:
        observation = tuple(
            (str(t['name']), int(t['dim']), tuple(float(s) for s in t['scale']))
            for t in observation
        )
    except (TypeError, KeyError, ValueError):
        message = 'policy metadata observation must be a list of {name, dim, scale}'
        raise PolicyFileError(message) from None
    ranges = _json(meta, 'command_ranges')
    try:
        ranges = {k: (float(ranges[k][0]), float(ranges[k][1])) for k in ('vx', 'vy', 'wz')}
    except (TypeError, KeyError, ValueError, IndexError):
        message = 'policy metadata command_ranges needs vx, vy, wz: [low, high]'
        raise PolicyFileError(message) from None
    gait_period = 0.0
    if 'gait_period' in meta:
        gait_period = float(_floats(meta, 'gait_period', 1)[0])
    provenance = _json(meta, 'provenance')
    if not isinstance(provenance, dict) or any(k not in provenance for k in PROVENANCE_KEYS):
        raise PolicyFileError(
            f'policy metadata provenance needs keys {", ".join(PROVENANCE_KEYS)}'
        )
    n = len(names)
    bounds = _json(meta, 'action_bounds')
    if not isinstance(bounds, dict) or set(bounds) != {'low', 'high'}:
        raise PolicyFileError('policy metadata action_bounds needs {low: [...], high: [...]}')
    bounds = {k: json.dumps(v) for k, v in bounds.items()}
    action_low, action_high = _floats(bounds, 'low', n), _floats(bounds, 'high', n)
    if not np.all(action_low < action_high):
        raise PolicyFileError('policy metadata action_bounds: every low must be below its high')
    return PolicyContract(
        path=path,
        file_sha256=file_sha256,
        joint_names=tuple(names),
        default_joint_pos=_floats(meta, 'default_joint_pos', n),
        action_scale=float(_floats(meta, 'action_scale', 1)[0]),
        action_low=action_low,
        action_high=action_high,
        kp=_floats(meta, 'kp', n),
        kd=_floats(meta, 'kd', n),
        torque_limit=_floats(meta, 'torque_limit', n),
        control_dt=float(_floats(meta, 'control_dt', 1)[0]),
        observation=observation,
        gait_period=gait_period,
        command_ranges=ranges,
        provenance=provenance,
    )


def contract_mismatches(contract):
    """List, in words, every way a contract differs from the robot spec (empty when it matches)."""
    problems = []
    if contract.joint_names != spec.JOINT_NAMES:
        problems.append(
            f'joint order {list(contract.joint_names)} differs from the robot '
            f'{list(spec.JOINT_NAMES)}'
        )
    else:
        for key, ours in (
            ('default_joint_pos', spec.DEFAULT_JOINT_POS),
            ('action_low', spec.ACTION_LOW),
            ('action_high', spec.ACTION_HIGH),
            ('kp', spec.KP),
            ('kd', spec.KD),
            ('torque_limit', spec.TORQUE_LIMIT),
        ):
            theirs = getattr(contract, key)
            if not np.allclose(theirs, ours, rtol=0.0, atol=ATOL):
                problems.append(f'{key} {theirs.tolist()} differs from the robot {ours.tolist()}')
    if abs(contract.action_scale - spec.ACTION_SCALE) > ATOL:
        problems.append(f'action_scale {contract.action_scale} differs from {spec.ACTION_SCALE}')
    if abs(contract.control_dt - spec.CONTROL_DT) > ATOL:
        problems.append(f'control_dt {contract.control_dt} s differs from {spec.CONTROL_DT} s')
    theirs, layout = contract.observation, contract.layout
    if layout is None:
        known = ', '.join(
            f'{name} {[(t.name, t.dim) for t in terms][-1:]} ({sum(t.dim for t in terms)})'
            for name, terms in spec.LAYOUTS.items()
        )
        problems.append(
            f'observation layout {[(n, d) for n, d, _ in theirs]} ({contract.obs_dim} entries) '
            f'is none the robot serves (spec.LAYOUTS, last term and size: {known})'
        )
    else:
        ours = spec.LAYOUTS[layout]
        if not all(np.allclose(a[2], b.scale, rtol=0, atol=ATOL) for a, b in zip(theirs, ours)):
            problems.append(f"observation scales differ from the spec's {layout} layout")
        period = spec.GAIT_PERIOD if layout == 'gait_clock' else 0.0
        if abs(contract.gait_period - period) > ATOL:
            problems.append(f'gait_period {contract.gait_period} s differs from {period} s')
    for key, (low, high) in contract.command_ranges.items():
        s_low, s_high = spec.COMMAND_RANGES[key]
        if not (s_low - ATOL <= low <= high <= s_high + ATOL):
            problems.append(f'command range {key} [{low}, {high}] is outside [{s_low}, {s_high}]')
        elif not low <= 0.0 <= high:  # clipping a stop command would make the robot move
            problems.append(f'command range {key} [{low}, {high}] does not hold 0 (stop)')
    return problems


def file_sha256(path):
    """Return the sha256 hex digest of a file's bytes."""
    with open(path, 'rb') as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def session_options():
    """Return onnxruntime options: 1 intra-op and 1 inter-op thread, spinning off."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry('session.intra_op.allow_spinning', '0')
    options.add_session_config_entry('session.inter_op.allow_spinning', '0')
    options.log_severity_level = 3
    return options


class OnnxPolicy:
    """A checked policy file in an onnxruntime session: obs (48,) or (50,) -> actions (12,)."""

    def __init__(self, path, warmup=100, blob=None):
        """Load, verify the contract and weights digest, build the session and warm it up.

        blob: the file's bytes when already read (and verified) by the caller; path then only
        names it.
        """
        import onnxruntime as ort

        path = os.path.abspath(path)
        if blob is None:
            if not os.path.isfile(path):
                raise PolicyFileError(f'policy file {path} does not exist')
            with open(path, 'rb') as handle:
                blob = handle.read()
        self.blob = bytes(blob)  # kept: a validator builds its own session from it
        try:
            external = external_initializers(self.blob)
        except WireError as error:
            raise PolicyFileError(
                f'policy file {path} is not a loadable ONNX model: {error}'
            ) from None
        if external:  # weights in a side file: outside the sha256, signature and digest
            raise PolicyFileError(
                f'policy file {path} refused: initializers stored in external files '
                f'({", ".join(external[:4])}); the weights must be inside the file'
            )
        try:
            self.session = ort.InferenceSession(
                blob, sess_options=session_options(), providers=['CPUExecutionProvider']
            )
        except Exception as error:  # onnxruntime raises its own exception types
            first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            message = f'policy file {path} is not a loadable ONNX model: {first}'
            raise PolicyFileError(message) from None
        meta = dict(self.session.get_modelmeta().custom_metadata_map)
        self.contract = parse_metadata(meta, path, hashlib.sha256(blob).hexdigest())
        problems = contract_mismatches(self.contract)
        problems += self._io_mismatches()
        try:
            digest = weights_sha256(blob)
        except Exception as error:  # a graph whose initializers cannot be read
            raise PolicyFileError(
                f'policy file {path} refused: weights unreadable: {error}'
            ) from None
        claimed = str(self.contract.provenance.get('weights_sha256', ''))
        if digest != claimed:
            problems.append(f'weights sha256 {digest[:16]}... differs from provenance {claimed!r}')
        if problems:
            raise PolicyFileError(f'policy file {path} refused: ' + '; '.join(problems))
        self._obs = np.zeros((1, self.contract.obs_dim), dtype=np.float32)  # reused input
        try:
            self.warm_up(warmup)
        except PolicyFileError:
            raise
        except Exception as error:  # onnxruntime fails to run it: refused like any bad file
            first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise PolicyFileError(f'policy file {path} fails to run: {first}') from None

    def _io_mismatches(self):
        """Check the graph's input and output names and widths against the spec."""
        problems = []
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        if len(inputs) != 1 or inputs[0].name != INPUT_NAME:
            problems.append(f'inputs {[i.name for i in inputs]} must be exactly [{INPUT_NAME!r}]')
        elif inputs[0].type != 'tensor(float)' or len(inputs[0].shape) != 2:
            problems.append(f'input obs is {inputs[0].type} of rank {len(inputs[0].shape)}, '
                            'not a rank-2 tensor(float)')  # fmt: skip
        elif inputs[0].shape[-1] != self.contract.obs_dim:
            width, size = inputs[0].shape[-1], self.contract.obs_dim
            problems.append(f'input obs width {width} is not {size} (the size of its layout)')
        if not outputs or outputs[0].name != OUTPUT_NAME:
            problems.append(f'outputs {[o.name for o in outputs]} must start with {OUTPUT_NAME!r}')
        elif outputs[0].shape[-1] != spec.ACTION_DIM:
            problems.append(
                f'output actions width {outputs[0].shape[-1]} is not {spec.ACTION_DIM}'
            )
        return problems

    def warm_up(self, runs):
        """Run the session on zero observations; raise PolicyFileError on non-finite output."""
        self._obs[:] = 0.0
        for _ in range(max(1, runs)):
            out = self.session.run([OUTPUT_NAME], {INPUT_NAME: self._obs})[0]
        if out.shape != (1, spec.ACTION_DIM) or not np.all(np.isfinite(out)):
            raise PolicyFileError(
                f'policy file {self.contract.path} gives {out.shape} non-finite or misshapen '
                'actions on a zero observation'
            )

    def act(self, obs):
        """Return actions (12,) float64 for one observation (obs_dim,); may be non-finite."""
        self._obs[0] = obs
        return self.session.run([OUTPUT_NAME], {INPUT_NAME: self._obs})[0][0].astype(np.float64)

    def describe(self):
        """Return a JSON-ready summary: path, version, observation layout, the provenance."""
        return {
            'path': self.contract.path,
            'version': self.contract.version,
            'observation': self.contract.layout,
            'provenance': self.contract.provenance,
        }
