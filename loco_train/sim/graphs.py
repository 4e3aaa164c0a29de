"""Launch sequences captured once and replayed without Python: CPU (Warp's APIC) and CUDA graphs.

A substep is ~18 kernel launches, each costing ~0.1 ms of Python on a CPU; replaying a
captured graph costs none of that (N = 1: 3k -> 27k env-substeps/s through step()). A graph holds
the pointers and scalar arguments of its launches, so it is valid only while the same arrays are
passed with the same values: callers copy inputs into fixed arrays and pass everything else that
the launches hold as `values`. Capturing costs ~0.5 ms per launch, so a sequence is captured on
its second run with the same values (the first launches directly) and one graph is kept per tag.
Capturing does not run the launches (Warp's semantics on CPU and CUDA alike).
"""

import warnings

import warp as wp


class GraphCache:
    """Captured launch sequences on one device, one per tag."""

    def __init__(self, device, enabled=True):
        """`enabled` False runs every sequence directly (no capture)."""
        self.device = wp.get_device(device)
        self.enabled = enabled
        self._graphs = {}  # tag -> (values, graph or None until the second run, result)

    def run(self, tag, launches, values=()):
        """Run `launches()` (a function that launches kernels): replayed from its graph.

        values: what the launches hold besides fixed arrays; a change captures them afresh.
        Returns what `launches()` returned when it last ran (the arrays it wrote).
        """
        if not self.enabled:
            return launches()
        entry = self._graphs.get(tag)
        if entry is None or entry[0] != values:
            self._graphs[tag] = (values, None, None)
            return launches()
        if entry[1] is None:
            try:
                with wp.ScopedCapture(device=self.device, force_module_load=False) as capture:
                    result = launches()
            except Exception as error:  # a device or driver that cannot capture: no graphs
                warnings.warn(
                    f'graph capture on {self.device} failed ({error}); launching directly',
                    RuntimeWarning,
                    stacklevel=2,
                )
                self.enabled = False
                self._graphs.clear()
                return launches()
            entry = self._graphs[tag] = (values, capture.graph, result)
        wp.capture_launch(entry[1])
        return entry[2]

    def captured(self):
        """Tags that hold a captured graph."""
        return [tag for tag, entry in self._graphs.items() if entry[1] is not None]

    def clear(self):
        """Forget every graph."""
        self._graphs.clear()
