"""`loco-train` sets OpenMP's passive wait policy before torch loads, unless the user set one."""

import os
import subprocess
import sys

PROBE = (
    'import os, sys\n'
    'from loco_train import cli\n'
    'assert "torch" not in sys.modules\n'
    'try:\n'
    '    cli.main(["compare", "--help"])\n'
    'except SystemExit:\n'
    '    pass\n'
    'print(os.environ.get("OMP_WAIT_POLICY"))\n'
)


def probe(**env):
    base = {k: v for k, v in os.environ.items() if k != 'OMP_WAIT_POLICY'}
    done = subprocess.run(
        [sys.executable, '-c', PROBE], env=base | env, capture_output=True, text=True, check=True
    )
    return done.stdout.split()[-1]


def test_passive_unless_the_environment_says_otherwise():
    assert probe() == 'PASSIVE'
    assert probe(OMP_WAIT_POLICY='ACTIVE') == 'ACTIVE'
