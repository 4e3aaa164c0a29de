"""Gradient updates in a worker thread while the caller steps the environments.

Torch kernels (and Warp's, and MuJoCo's step) release the GIL, so a learner thread and the
collecting thread keep two cores busy. The runner submits a round of updates on the replay
buffer as it stands, steps the environments, then waits for the round before it writes the new
transitions, so the learner never reads a row that is being written and nothing reads the actor
while it is being stepped.
"""

from concurrent.futures import Future, ThreadPoolExecutor

import torch


class BackgroundUpdates:
    """One worker thread running submitted update rounds, one round at a time."""

    def __init__(self, threads: int | None = None):
        """threads: torch (OpenMP) threads of the worker; None takes the caller's setting."""
        # OpenMP's thread count is per thread: a new thread would otherwise use every core.
        threads = torch.get_num_threads() if threads is None else threads
        self._pool = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix='sac-learner',
            initializer=torch.set_num_threads,
            initargs=(threads,),
        )
        self._round: Future | None = None

    def submit(self, fn, *args) -> None:
        """Start fn(*args) in the worker; the previous round must have been waited for."""
        if self._round is not None:
            raise RuntimeError('wait() for the running round before submitting another')
        self._round = self._pool.submit(fn, *args)

    def wait(self):
        """Return the running round's result (None if none runs); re-raises its exception."""
        future, self._round = self._round, None
        return None if future is None else future.result()

    def close(self) -> None:
        """Finish the running round and stop the worker."""
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)
