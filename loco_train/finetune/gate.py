"""The nominal gate: a candidate must still walk the unperturbed simulated robot.

Fine-tuning on a perturbed robot trades nominal behaviour for the perturbation's (a policy that
compensates 30 ms of latency over-leads on a robot without it). Before a candidate reaches the
robot it walks `seeds` episodes of `loco-train eval` (the 20 s command schedule, sensor noise)
on the nominal MuJoCo model; it passes with no fall and a tracking error within `margin` of the
reference policy's (the one fine-tuning started from) on the same episodes.
"""

import numpy as np

FIRST_SEED = 100
"""Gate episodes use seeds 100.., distinct from the evaluation's 0.."""


class GateRefused(Exception):
    """A candidate failed the nominal gate; the message says why."""


class NominalGate:
    """Screens policy files on the nominal simulated robot against a reference policy."""

    def __init__(
        self, seeds, margin, reference_path, stop=None, sensor_noise=True, phase_jitter=0.0
    ):
        """Score the reference policy once (seeds episodes, a few seconds each).

        stop: a callable; when it returns True a scoring ends after the episode under way
        (GateRefused), so a node shutting down does not wait for a whole gate. sensor_noise,
        phase_jitter (s): as `loco-train eval`'s (ValueError out of range).
        """
        from loco_policy.sim.backends import make_backend, Perturbation
        from loco_train.experiments.evaluate import EvalConfig, NO_NOISE

        if seeds < 1:
            raise ValueError(f'gate seeds {seeds}: at least 1')
        noise = {} if sensor_noise else NO_NOISE
        self.config = EvalConfig(seeds=seeds, phase_jitter=float(phase_jitter), **noise)
        self.backend = make_backend('mujoco', Perturbation())
        self.seeds, self.margin = int(seeds), float(margin)
        self.stop = stop or (lambda: False)
        self.reference_path = str(reference_path)
        self.reference, falls = self.score(reference_path)
        if falls:  # a reference that falls makes every comparison meaningless
            raise GateRefused(
                f'reference {reference_path} fell in {falls} of {seeds} nominal episodes'
            )

    def score(self, path):
        """(mean tracking error (m/s + rad/s) over moving segments, falls) of a policy file."""
        from loco_policy.policy_file import OnnxPolicy
        from loco_train.experiments.evaluate import run_episode, seed_schedule, segment_errors

        policy, errors, falls = OnnxPolicy(path), [], 0
        for seed in range(FIRST_SEED, FIRST_SEED + self.seeds):
            if self.stop():
                raise GateRefused('stopped before the gate ended')
            schedule = seed_schedule(seed, self.config.phase_jitter)
            trace = run_episode(policy, self.backend, self.config, seed, None, schedule)
            falls += int(trace['fell'])
            moving = [
                e for e in segment_errors(trace, schedule).values() if not np.isnan(e['lin'])
            ]
            errors.append(np.mean([e['lin'] + e['yaw'] for e in moving]) if moving else np.inf)
        return float(np.mean(errors)), falls

    def check(self, path):
        """Return the candidate's nominal tracking error; raise GateRefused with the reason."""
        error, falls = self.score(path)
        if falls:
            raise GateRefused(f'fell in {falls} of {self.seeds} nominal episodes')
        limit = self.reference * (1.0 + self.margin)
        if not error <= limit:  # NaN fails too
            raise GateRefused(
                f'nominal tracking error {error:.3f} above {limit:.3f} (reference '
                f'{self.reference:.3f} + {self.margin:.0%})'
            )
        return error
