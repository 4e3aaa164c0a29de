"""SAC's update replayed from CUDA graphs: one launch per update instead of hundreds.

On a GPU the eager update is bound by the host: it submits about 330 kernels, 11 ms of host
time on the H200 machine's CPU, for under 1 ms of device work (docs/benchmarks.md). Captured
once, those kernels replay from a single call. There are two graphs, the critic step alone and
the critic step with the actor and temperature steps (the delayed actor's calls). Each batch is
copied into fixed input tensors, so a graph serves one batch size; a batch of another size, or a
rank's part of a global batch, runs eagerly. The first `warmup` calls of each kind run eagerly
on a side stream (optimiser state, library handles); the next one is captured, then replayed.
What a graph holds is fixed at its capture: learning rates, tau, the target entropy and the
clip norm are read then, so changing them later needs a new SAC (or load_state_dict). A capture
that fails raises: the update does not silently continue another way.
"""

import torch

from loco_train.sac.batch import Batch


class GraphedUpdate:
    """Runs SAC._update_body from captured CUDA graphs (see the module docstring)."""

    def __init__(self, sac, warmup: int = 3):
        """Check that `sac` can be captured and make its optimisers capturable."""
        if sac.device.type != 'cuda':
            raise ValueError(f'cuda_graphs needs a CUDA device, not {sac.device}')
        if sac.cfg.compile:
            raise ValueError('cuda_graphs and compile exclude each other')
        if sac.matmul_dtype != torch.float32:
            raise ValueError('cuda_graphs needs float32 products (autocast caches casts)')
        for optim in (sac.actor_optim, sac.critic_optim, sac.alpha_optim):
            if not all(group.get('fused') for group in optim.param_groups):
                raise ValueError('cuda_graphs needs the fused Adam kernel (no host read to skip)')
            for group in optim.param_groups:
                group['capturable'] = True
        self.sac = sac
        self.warmup = warmup
        self.stream = torch.cuda.Stream(sac.device)  # warm-up and capture run on it
        self.static: Batch | None = None  # fixed input tensors, the size of the first batch
        self.generator = None  # the generator the graphs draw from (None: the default one)
        self.graphs = {}  # with_actor -> (graph, metric names, (K,) metric values it writes)
        self.eager_calls = {False: 0, True: 0}

    def __call__(self, batch: Batch, generator, with_actor: bool) -> dict:
        """One update on `batch`: replayed where possible; metrics as SAC.update returns them."""
        sac = self.sac
        batch = batch.to(sac.device)
        if batch.part is not None or sac.grad_sync is not None:
            return sac._update_body(batch, generator, with_actor)
        if self.static is None:
            self.static = Batch(**{n: getattr(batch, n).clone() for n in Batch.tensor_fields()})
            self.generator = generator
        if len(batch) != len(self.static):
            return sac._update_body(batch, generator, with_actor)
        if generator is not self.generator:
            raise ValueError('cuda_graphs: every update must draw from the same generator')
        with torch.cuda.device(sac.device):  # graphs and streams of this device, from any thread
            for name in Batch.tensor_fields():
                getattr(self.static, name).copy_(getattr(batch, name))
            if with_actor not in self.graphs:
                if self.eager_calls[with_actor] < self.warmup:
                    self.eager_calls[with_actor] += 1
                    return self._side_stream(generator, with_actor)
                self._capture(generator, with_actor)
            graph, names, values = self.graphs[with_actor]
            graph.replay()
            return dict(zip(names, values.clone().unbind()))  # the next replay overwrites values

    def _side_stream(self, generator, with_actor: bool) -> dict:
        """An eager update on the side stream, ordered with the current stream both ways."""
        current = torch.cuda.current_stream(self.sac.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            metrics = self.sac._update_body(self.static, generator, with_actor)
        current.wait_stream(self.stream)
        return metrics

    def _capture(self, generator, with_actor: bool) -> None:
        """Capture one update into a graph (nothing runs yet); raise if the device refuses."""
        graph = torch.cuda.CUDAGraph()
        if generator is not None:
            graph.register_generator_state(generator)
        torch.cuda.synchronize(self.sac.device)
        try:
            mode = 'thread_local'  # other threads (the runner's collector) may use the device
            capture = torch.cuda.graph(graph, stream=self.stream, capture_error_mode=mode)
            with torch.cuda.stream(self.stream):  # restored even when the capture fails
                with capture:
                    metrics = self.sac._update_body(self.static, generator, with_actor)
                    names = list(metrics)
                    values = torch.stack([metrics[n].float().reshape(()) for n in names])
        except Exception as error:
            self.sac.critic.requires_grad_(True)  # if it stopped inside the actor step
            raise RuntimeError(
                f'CUDA graph capture of the SAC update failed ({error}); '
                'run without cuda_graphs (--cuda-graphs)'
            ) from error
        self.graphs[with_actor] = (graph, names, values)
