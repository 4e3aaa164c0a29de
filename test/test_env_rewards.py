import math

import pytest
import torch

from loco_train.envs.rewards import (
    compute_reward,
    FeetAirTime,
    RewardConfig,
    RewardInputs,
    swing_reference,
    TERMS,
)


def inputs(n=3, **overrides):
    values = dict(
        command=torch.zeros(n, 3),
        base_lin_vel=torch.zeros(n, 3),
        base_ang_vel=torch.zeros(n, 3),
        torque=torch.zeros(n, 12),
        joint_acc=torch.zeros(n, 12),
        action=torch.zeros(n, 12),
        last_action=torch.zeros(n, 12),
        foot_height=torch.zeros(n, 4),
        undesired_contact=torch.zeros(n),
        phase_time=torch.zeros(n),
    )
    values.update(overrides)
    return RewardInputs(**values)


def test_every_term_is_logged_under_its_name_times_weight_and_dt():
    cfg = RewardConfig(
        feet_air_time=0.0, orientation=-5.0, foot_height=0.5, lin_vel_error=-1.0,
        yaw_rate_error=-0.5, foot_clearance=-50.0, alive=2.0, base_height=-10.0, stand_still=-1.0,
        stand_feet=-1.0, feet_slip=-1.0,
    )  # fmt: skip
    tilt = torch.tensor([[0.6, 0.0, -0.8]]).expand(3, 3)
    x = inputs(
        torque=torch.ones(3, 12), undesired_contact=torch.full((3,), 2.0), projected_gravity=tilt,
        foot_vel=torch.zeros(3, 4, 3), base_height=torch.full((3,), 0.45),
        joint_pos_offset=torch.zeros(3, 12),
    )  # fmt: skip
    total, terms = compute_reward(x, cfg, dt=0.02)
    assert 'feet_air_time' not in terms  # weight 0: not computed
    assert set(terms) == set(TERMS) - {'feet_air_time'}
    torch.testing.assert_close(terms['orientation'], torch.full((3,), -5.0 * 0.36 * 0.02))
    torch.testing.assert_close(total, sum(terms.values()))
    torch.testing.assert_close(terms['torque'], torch.full((3,), -1e-5 * 12 * 0.02))
    torch.testing.assert_close(terms['undesired_contact'], torch.full((3,), -1.0 * 2 * 0.02))
    torch.testing.assert_close(terms['alive'], torch.full((3,), 2.0 * 0.02))
    torch.testing.assert_close(terms['base_height'], torch.full((3,), -10.0 * 0.1**2 * 0.02))


def test_perfect_tracking_earns_the_full_tracking_weights():
    command = torch.tensor([[0.5, -0.2, 0.3]])
    x = inputs(
        1, command=command, base_lin_vel=torch.tensor([[0.5, -0.2, 0.0]]),
        base_ang_vel=torch.tensor([[0.0, 0.0, 0.3]]),
    )  # fmt: skip
    _, terms = compute_reward(x, RewardConfig(), dt=1.0)
    assert terms['lin_vel_tracking'].item() == pytest.approx(1.0)
    assert terms['yaw_rate_tracking'].item() == pytest.approx(0.5)
    # 0.5 m/s error with sigma 0.5: exp(-1)
    x.base_lin_vel = torch.tensor([[0.0, -0.2, 0.0]])
    _, terms = compute_reward(x, RewardConfig(), dt=1.0)
    assert terms['lin_vel_tracking'].item() == pytest.approx(math.exp(-1.0))


def test_swing_reference_alternates_the_diagonal_pairs():
    cfg = RewardConfig()
    quarter = torch.tensor([cfg.gait_period / 4, 3 * cfg.gait_period / 4])
    ref = swing_reference(quarter, cfg)
    # at a quarter period LF and RH are at the top of their swing, RF and LH on the ground
    torch.testing.assert_close(
        ref[0], torch.tensor([cfg.swing_height, 0.0, 0.0, cfg.swing_height])
    )
    torch.testing.assert_close(
        ref[1], torch.tensor([0.0, cfg.swing_height, cfg.swing_height, 0.0])
    )


def test_foot_height_term_is_differentiable_and_off_when_standing():
    cfg = RewardConfig(foot_height=0.5)
    height = torch.full((2, 4), 0.03, requires_grad=True)
    x = inputs(2, foot_height=height, command=torch.tensor([[1.0, 0, 0], [0.0, 0, 0]]),
               phase_time=torch.full((2,), 0.1))  # fmt: skip
    _, terms = compute_reward(x, cfg, dt=1.0)
    assert terms['foot_height'][1].item() == 0.0
    terms['foot_height'].sum().backward()
    assert torch.all(torch.isfinite(height.grad)) and height.grad[0].abs().sum() > 0


def test_feet_air_time_rewards_touchdown_after_long_swings():
    tracker = FeetAirTime(num_envs=1)
    command = torch.tensor([[1.0, 0.0, 0.0]])
    down = torch.ones(1, 4, dtype=torch.bool)
    lf_up = down.clone()
    lf_up[0, 0] = False
    tracker.update(down, command, 0.02)
    for _ in range(35):  # 0.7 s in the air for LF
        reward = tracker.update(lf_up, command, 0.02)
        assert reward.item() == 0.0
    reward = tracker.update(down, command, 0.02)
    assert reward.item() == pytest.approx(0.72 - 0.5, abs=1e-5)
    # standing command: no reward even for a long swing
    for _ in range(35):
        tracker.update(lf_up, torch.zeros(1, 3), 0.02)
    assert tracker.update(down, torch.zeros(1, 3), 0.02).item() == 0.0


def test_air_time_weight_without_tracker_is_an_error():
    with pytest.raises(ValueError, match='feet_air_time'):
        compute_reward(inputs(), RewardConfig(feet_air_time=0.125), dt=0.02)


def test_overrides_parse_names_and_refuse_unknown_or_non_finite():
    from loco_train.envs.rewards import parse_overrides

    assert parse_overrides(['foot_height=0', 'feet_air_time=2']) == {
        'foot_height': 0.0,
        'feet_air_time': 2.0,
    }
    for bad in ('nonsense=1', 'foot_height', 'foot_height=nan', 'torque=abc'):
        with pytest.raises(ValueError, match='reward override'):
            parse_overrides([bad])


def test_shape_parameters_must_stay_positive():
    from loco_train.envs.rewards import parse_overrides

    with pytest.raises(ValueError, match='tracking_sigma must be positive'):
        parse_overrides(['tracking_sigma=0'])
    assert parse_overrides(['torque=0']) == {'torque': 0.0}  # a weight of 0 turns a term off


def test_squared_tracking_errors_keep_their_gradient_far_from_the_command():
    cfg = RewardConfig(lin_vel_error=-1.0, yaw_rate_error=-0.5)
    velocity = torch.tensor([[0.0, 0.0, 0.0]], requires_grad=True)
    x = inputs(1, command=torch.tensor([[2.0, 0.0, 1.0]]), base_lin_vel=velocity)
    x.base_ang_vel = torch.tensor([[0.0, 0.0, 0.5]])
    _, terms = compute_reward(x, cfg, dt=1.0)
    assert terms['lin_vel_error'].item() == pytest.approx(-4.0)
    assert terms['yaw_rate_error'].item() == pytest.approx(-0.5 * 0.25)
    (terms['lin_vel_error'] + terms['lin_vel_tracking']).sum().backward()
    # d/dvx of -(2 - vx)^2 is 4 at vx = 0; the kernel adds only 1.0 * 2 * 2 / 0.25 * exp(-16)
    assert velocity.grad[0, 0].item() == pytest.approx(4.0, rel=1e-4)


def test_foot_clearance_penalises_low_feet_that_move_sideways_only():
    cfg = RewardConfig(foot_clearance=-1.0, swing_height=0.08)
    height = torch.tensor([[0.0, 0.08, 0.02, 0.0]], requires_grad=True)
    foot_vel = torch.tensor([[[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0, 0, -2.0]]])
    x = inputs(1, foot_height=height, foot_vel=foot_vel)
    _, terms = compute_reward(x, cfg, dt=1.0)
    expected = 0.08**2 * math.tanh(2.0) + 0.06**2 * math.tanh(6.0)  # feet 1 and 3
    assert terms['foot_clearance'].item() == pytest.approx(-expected)
    terms['foot_clearance'].sum().backward()
    assert height.grad[0, 0].item() > 0.0 and height.grad[0, 2].item() > 0.0  # lift them
    assert height.grad[0, 1].item() == 0.0 and height.grad[0, 3].item() == 0.0
    with pytest.raises(ValueError, match='foot_vel'):
        compute_reward(inputs(1), cfg, dt=1.0)


def test_base_height_penalises_a_crouch_below_the_target_only():
    cfg = RewardConfig(base_height=-1.0, base_height_target=0.55)
    height = torch.tensor([0.35, 0.55, 0.62], requires_grad=True)
    _, terms = compute_reward(inputs(3, base_height=height), cfg, dt=1.0)
    torch.testing.assert_close(terms['base_height'], torch.tensor([-0.04, 0.0, 0.0]))
    terms['base_height'].sum().backward()
    assert height.grad[0].item() == pytest.approx(0.4)  # up, 2 * 0.2
    assert height.grad[1].item() == 0.0 and height.grad[2].item() == 0.0
    with pytest.raises(ValueError, match='base_height'):
        compute_reward(inputs(1), cfg, dt=1.0)


def test_stand_still_penalises_joint_offsets_only_while_told_to_stand():
    cfg = RewardConfig(stand_still=-1.0)
    command = torch.tensor([[0.0, 0.0, 0.0], [0.05, 0.0, 0.05], [0.5, 0.0, 0.0]])
    offset = torch.full((3, 12), 0.1).index_fill_(1, torch.tensor([0]), -0.3).requires_grad_()
    _, terms = compute_reward(inputs(3, command=command, joint_pos_offset=offset), cfg, dt=1.0)
    torch.testing.assert_close(terms['stand_still'], torch.tensor([-1.4, -1.4, 0.0]))
    terms['stand_still'].sum().backward()
    assert offset.grad[0, 0].item() == 1.0 and offset.grad[0, 1].item() == -1.0  # to q_default
    assert torch.all(offset.grad[2] == 0.0)  # walking: free to move
    with pytest.raises(ValueError, match='joint_pos_offset'):
        compute_reward(inputs(1), cfg, dt=1.0)


def test_feet_slip_penalises_sliding_stance_feet_more_than_swinging_ones():
    cfg = RewardConfig(feet_slip=-2.0, slip_height=0.01)
    foot_vel = torch.zeros(1, 4, 3)
    foot_vel[0, 0] = torch.tensor([0.3, 0.4, 0.0])  # on the ground, sliding at 0.5 m/s
    foot_vel[0, 1] = torch.tensor([0.3, 0.4, 0.0])  # the same speed 5 cm up: a swing
    foot_vel[0, 2, 2] = 0.5  # on the ground, lifting straight up: no slip
    foot_height = torch.tensor([[0.0, 0.05, 0.0, -0.002]])  # the last one pressed in, at rest
    foot_vel.requires_grad_()
    foot_height.requires_grad_()
    x = inputs(1, foot_vel=foot_vel, foot_height=foot_height)
    _, terms = compute_reward(x, cfg, dt=1.0)
    expected = -2.0 * 0.25 * (1.0 + math.exp(-5.0))
    torch.testing.assert_close(terms['feet_slip'], torch.tensor([expected]))
    terms['feet_slip'].sum().backward()
    torch.testing.assert_close(foot_vel.grad[0, 0, :2], torch.tensor([-1.2, -1.6]))  # slow it down
    assert foot_vel.grad[0, 1, 0].item() == pytest.approx(-1.2 * math.exp(-5.0))
    assert torch.all(foot_vel.grad[0, 2:] == 0.0)
    assert foot_height.grad[0, 1].item() > 0.0  # lifting a sliding foot lowers the cost
    with pytest.raises(ValueError, match='foot_vel'):
        compute_reward(inputs(1), cfg, dt=1.0)


def test_stand_feet_penalises_foot_speed_only_while_told_to_stand():
    cfg = RewardConfig(stand_feet=-2.0)
    command = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.5, 0.0]])
    foot_vel = torch.zeros(2, 4, 3)
    foot_vel[:, 0, 2] = 0.5  # one foot lifting
    foot_vel[:, 3, :2] = torch.tensor([0.3, 0.4])  # one sliding
    foot_vel.requires_grad_()
    x = inputs(2, command=command, foot_vel=foot_vel)
    _, terms = compute_reward(x, cfg, dt=1.0)
    torch.testing.assert_close(terms['stand_feet'], torch.tensor([-2.0 * 0.5, 0.0]))
    terms['stand_feet'].sum().backward()
    assert foot_vel.grad[0, 0, 2].item() == pytest.approx(-2.0)  # slow it down
    assert torch.all(foot_vel.grad[1] == 0.0)
    with pytest.raises(ValueError, match='foot_vel'):
        compute_reward(inputs(1), cfg, dt=1.0)
