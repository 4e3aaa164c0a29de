"""On-robot regression guard: each policy version's tracking on the robot, and the best one.

Every fine-tuning run measured here improved tracking for some minutes and then drifted into
gaits that track worse or fall, on the very robot it learns from. The rows of
/replay/transitions say how each version did: the guard scores every version by its tracking
error on the robot (planar m/s plus yaw rate rad/s, from s' of each transition), compared
command by command with the reference (the first version seen: the policy before fine-tuning),
so versions that saw different parts of a command schedule compare fairly. A version judged
worse than the best one by `margin`, or falling more often, is a regression: the learner goes
back to the best version's actor and exports it again.

change(v) = sum_rows (e_row - ref(c_row)) / sum_rows ref(c_row), over rows whose command c has a
reference error ref(c) (the reference's mean error at c); negative is better, 0 for the
reference itself.
"""

from dataclasses import dataclass

import numpy as np

from loco_policy import spec

_SLICES = spec.observation_slices()
_SCALE = np.asarray(spec.observation_scale(), dtype=np.float64)
_LIN, _ANG, _CMD = (_SLICES[name] for name in ('base_lin_vel', 'base_ang_vel', 'command'))


def tracking_errors(obs):
    """Commands (K, 3) (m/s, rad/s) and tracking errors (K,) of observations (K, OBS_DIM).

    The error is |v_xy - cmd_xy| + |w_z - cmd_wz|, from the spec-scaled observation.
    """
    raw = np.asarray(obs, dtype=np.float64)[:, : len(_SCALE)] / _SCALE
    command = raw[:, _CMD]
    lin = np.linalg.norm(raw[:, _LIN][:, :2] - command[:, :2], axis=1)
    yaw = np.abs(raw[:, _ANG][:, 2] - command[:, 2])
    return command, lin + yaw


UNJUDGED_AFTER = 4
"""A version without a verdict after this many times `rows` rows stops holding candidates."""


@dataclass
class Verdict:
    """A judged version: its change against the reference, rows, falls, and what it means."""

    version: int
    change: float
    rows: int
    falls: int
    best_version: int
    best_change: float
    regressed: bool
    reason: str = ''


class RegressionGuard:
    """Per-version tracking on the robot, by command, against the reference version."""

    def __init__(self, rows=1500, margin=0.1, resolution=0.1, reference=None):
        """Set the judging thresholds.

        rows: matched rows (1500: 30 s at 50 Hz) before a version is judged; margin: a change
        this much above the best version's is a regression; resolution: command bucket width
        (m/s, rad/s); reference: the reference version (None: the version of the first rows).
        """
        if rows <= 0 or resolution <= 0:
            raise ValueError(f'guard rows {rows} and resolution {resolution} must be positive')
        self.rows, self.margin, self.resolution = int(rows), float(margin), float(resolution)
        self.reference = reference
        self.buckets = {}  # version -> {bucket: [error sum, rows]}
        self.falls = {}  # version -> terminated transitions
        self.best = None  # (version, change, fall rate) of the best judged version
        self.resets = 0  # regressions found
        self.last = None  # the last Verdict

    def add(self, versions, obs_next, terminated):
        """Score transitions: versions (K,) that chose a, s' (K, OBS_DIM), terminated (K,)."""
        versions = np.asarray(versions, dtype=np.int64)
        obs_next = np.asarray(obs_next, dtype=np.float64)
        finite = np.all(np.isfinite(obs_next), axis=1)  # a NaN row would poison its bucket
        versions, obs_next = versions[finite], obs_next[finite]
        terminated = np.asarray(terminated, dtype=bool)[finite]
        if not len(versions):
            return
        if self.reference is None:
            self.reference = int(versions[0])
        commands, errors = tracking_errors(obs_next)
        keys = np.round(commands / self.resolution).astype(np.int64)
        for version, key, error, ended in zip(versions, keys, errors, terminated):
            version = int(version)
            table = self.buckets.setdefault(version, {})
            cell = table.setdefault(tuple(key), [0.0, 0])
            cell[0] += float(error)
            cell[1] += 1
            self.falls[version] = self.falls.get(version, 0) + int(bool(ended))

    def change(self, version):
        """(change against the reference, matched rows) of a version.

        (0, rows) for the reference itself, (nan, 0) with no matched rows.
        """
        reference = self.buckets.get(self.reference, {})
        own = self.buckets.get(version, {})
        if version == self.reference:
            return 0.0, sum(n for _, n in own.values())
        excess = expected = 0.0
        rows = 0
        for key, (total, n) in own.items():
            ref = reference.get(key)
            if ref is None or ref[1] == 0:
                continue  # a command the reference never ran: nothing to compare with
            mean = ref[0] / ref[1]
            excess += total - n * mean
            expected += n * mean
            rows += n
        return (excess / expected if expected > 0 else float('nan')), rows

    def rows_of(self, version):
        """All rows of a version, matched to the reference's commands or not."""
        return sum(n for _, n in self.buckets.get(version, {}).values())

    def settled(self, version):
        """True when `version` will never get a verdict worth waiting for.

        It ran UNJUDGED_AFTER x `rows` rows without one: commands the reference never ran, or a
        reference that ran too briefly. The next candidate need not wait for it.
        """
        return self.rows_of(version) >= UNJUDGED_AFTER * self.rows

    def fall_rate(self, version):
        """Terminated transitions per row of a version (all its rows)."""
        rows = sum(n for _, n in self.buckets.get(version, {}).values())
        return self.falls.get(version, 0) / rows if rows else 0.0

    def judge(self, version):
        """The Verdict on `version`, or None before it and the reference have `rows` rows.

        A version that is not a regression and beats the best becomes the best.
        """
        if self.reference is None:
            return None
        ref_change, ref_rows = self.change(self.reference)
        change, rows = self.change(version)
        if ref_rows < self.rows or rows < self.rows or not np.isfinite(change):
            return None
        if self.best is None:
            self.best = (self.reference, ref_change, self.fall_rate(self.reference))
        best_version, best_change, _ = self.best
        falls = self.fall_rate(version)
        allowed = self.fall_rate(self.reference) + 1.0 / self.rows  # a fixed bar: no creep
        reason = ''
        if change > best_change + self.margin:
            reason = (
                f'tracking {change:+.1%} against the reference, best {best_change:+.1%} '
                f'(version {best_version})'
            )
        elif falls > allowed:
            reason = f'{self.falls.get(version, 0)} falls in {rows} rows'
        regressed = bool(reason) and version != best_version
        self.resets += regressed
        if not regressed and change < best_change and falls <= allowed:
            self.best = (version, change, falls)
        self.last = Verdict(
            version,
            change,
            rows,
            self.falls.get(version, 0),
            self.best[0],
            self.best[1],
            regressed,
            reason if regressed else '',
        )
        return self.last
