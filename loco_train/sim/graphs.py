"""Launch sequences captured once and replayed without Python: CPU (Warp's APIC) and CUDA graphs.

A control step is ~25 kernel launches, each costing ~0.1 ms of Python on a CPU; replaying a
captured graph costs none of that (N = 1: 3k -> 90k env-substeps/s). A graph holds the pointers
and scalar arguments of its launches, so it is valid only while the same arrays are passed with
the same values: callers copy inputs into fixed arrays and key the graph on everything else.
Capturing does not run the launches (Warp's semantics on CPU and CUDA alike).
"""

import warp as wp


class GraphCache:
    """Captured launch sequences on one device, by key."""

    def __init__(self, device, enabled=True):
        """`enabled` False runs every sequence directly (no capture)."""
        self.device = wp.get_device(device)
        self.enabled = enabled
        self._graphs = {}

    def run(self, key, launches):
        """Replay the graph of `key`, capturing `launches()` (a function that launches) first.

        Returns what `launches()` returned when it was captured (the arrays it wrote).
        """
        if not self.enabled:
            return launches()
        entry = self._graphs.get(key)
        if entry is None:
            with wp.ScopedCapture(device=self.device, force_module_load=False) as capture:
                result = launches()
            entry = self._graphs[key] = (capture.graph, result)
        wp.capture_launch(entry[0])
        return entry[1]

    def __contains__(self, key):
        return key in self._graphs

    def clear(self):
        """Forget every graph (after the arrays or values they hold changed)."""
        self._graphs.clear()
