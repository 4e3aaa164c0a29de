"""Environment for ROS 2 test processes: an isolated DDS domain on localhost only."""

import os
import zlib


def isolated_ros_env(test_name, base=None):
    """Return os.environ plus a ROS_DOMAIN_ID derived from `test_name` and localhost discovery."""
    env = dict(os.environ if base is None else base)
    # Domain ids base..base+49 (base 100 unless LOCO_TEST_DOMAIN_BASE says otherwise, so that two
    # suites can share a machine): stable per test name, distinct from the default domain 0.
    base_id = int(os.environ.get('LOCO_TEST_DOMAIN_BASE', '100'))
    if not 0 <= base_id <= 232 - 49:  # Fast DDS derives ports from the id: 232 is its last
        raise ValueError(f'LOCO_TEST_DOMAIN_BASE {base_id} must be in [0, 183]')
    env['ROS_DOMAIN_ID'] = str(base_id + zlib.crc32(test_name.encode()) % 50)
    env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    env['RMW_IMPLEMENTATION'] = 'rmw_fastrtps_cpp'
    env.pop('ROS_STATIC_PEERS', None)
    return env
