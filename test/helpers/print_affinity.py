"""Print the CPUs this process started on, before importing anything else (launcher tests)."""

import os

print('cpus', *sorted(os.sched_getaffinity(0)), flush=True)
