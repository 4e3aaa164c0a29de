"""The recovery proof over ROS: sim_robot hanging with known drives, the excitation node and the
recorder over real DDS, then `loco-train fit-actuator` on the bag."""

import numpy as np
import pytest
from ruamel.yaml import YAML

from loco_train import cli
from loco_train.actuator import model, recovery, ros_record
from test.helpers.deploy_fixtures import ros_env

GOALS = {'kp_scale': 1.0, 'kd_scale': 1.0, 'armature': 3.0, 'friction': 10.0, 'damping': 10.0}
"""Largest relative error (%) of a joint after a 3 s run over ROS (the chirp to 4 Hz): sim_robot
stamps its states and the commands its drives took in (/joint_command/applied) on its physics
clock, so the fit sees the synthetic recording's exact timing through real DDS, recorder and
bag (noise-free: the recovery goals, armature at its noisy goal for the short chirp)."""

DELAY_GOAL = 0.5e-3
"""Largest delay error (s)."""


@pytest.mark.ros
def test_sim_robot_recording_over_ros_recovers_known_drives(request, tmp_path):
    truth = recovery.draw_truth(1)
    bag = ros_record.record(str(tmp_path), truth, duration=3.0, env=ros_env(request.node.name),
                            sim_params=['realtime_priority:=50'],
                            excitation_params=['f_end:=4.0'])  # fmt: skip
    scheduling = [line for line in open(tmp_path / 'sim.log') if 'SCHED_FIFO' in line]
    output = tmp_path / 'actuator.yaml'
    assert cli.main(['fit-actuator', bag, '--output', str(output), '--max-iters', '8']) == 0
    fitted = model.read(str(output))
    table, delay_error = recovery.errors(truth, fitted)
    worst = {k: float(np.abs(v).max()) for k, v in table.items()}
    for field, goal in GOALS.items():
        assert worst[field] <= goal, (field, worst, scheduling)
    assert abs(delay_error) < DELAY_GOAL, (delay_error, scheduling)  # nominal: -11.3 ms
    document = YAML(typ='safe').load(open(output))
    held_out = recovery.held_out(document)  # position RMSEs (rad) on the last quarter
    assert held_out['nominal_over_fitted_of_means'] > 3.0, held_out
