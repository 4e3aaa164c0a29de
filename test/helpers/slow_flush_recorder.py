"""The recorder node with every MCAP chunk close followed by a pause, so a stop lands mid-flush.

Run as ``python -m test.helpers.slow_flush_recorder --ros-args ...``. The pause (SLOW_FLUSH_S
seconds, 0.08 unless set) comes after rosbags has listed the chunk and before the flush writes
it: the window in which an exception raised by Ctrl-C in the writing thread leaves a chunk index
pointing at bytes never written.
"""

import os
import sys
import time

from rosbags.rosbag2.storage_mcap import McapWriter

PAUSE = float(os.environ.get('SLOW_FLUSH_S', '0.08'))  # s
_close_chunk = McapWriter.close_chunk


def slow_close_chunk(self):
    """rosbags' close_chunk, then a pause."""
    _close_chunk(self)
    time.sleep(PAUSE)


McapWriter.close_chunk = slow_close_chunk

if __name__ == '__main__':
    from loco_policy.nodes.recorder import main

    sys.exit(main())
