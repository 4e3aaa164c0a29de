import numpy as np

from loco_policy import spec


def test_joint_order_is_legs_then_haa_hfe_kfe():
    assert spec.JOINT_NAMES == (
        'LF_HAA', 'LF_HFE', 'LF_KFE', 'RF_HAA', 'RF_HFE', 'RF_KFE',
        'LH_HAA', 'LH_HFE', 'LH_KFE', 'RH_HAA', 'RH_HFE', 'RH_KFE',
    )  # fmt: skip
    assert spec.FOOT_NAMES == ('LF_FOOT', 'RF_FOOT', 'LH_FOOT', 'RH_FOOT')


def test_per_joint_arrays_have_twelve_entries():
    for array in (spec.DEFAULT_JOINT_POS, spec.KP, spec.KD, spec.TORQUE_LIMIT):
        assert array.shape == (spec.NUM_JOINTS,)
    assert spec.JOINT_POS_LIMITS.shape == (spec.NUM_JOINTS, 2)
    assert np.all(spec.KP > 0) and np.all(spec.KD > 0) and np.all(spec.TORQUE_LIMIT > 0)


def test_default_pose_is_inside_the_joint_limits_and_mirrored():
    low, high = spec.JOINT_POS_LIMITS.T
    assert np.all(low < spec.DEFAULT_JOINT_POS) and np.all(spec.DEFAULT_JOINT_POS < high)
    fore, hind = spec.DEFAULT_JOINT_POS[:6], spec.DEFAULT_JOINT_POS[6:]
    np.testing.assert_array_equal(fore, -hind)  # X stance: hind legs mirror the fore legs


def test_observation_layout_is_the_48_term_contract():
    names = [term.name for term in spec.OBSERVATION]
    assert names == [
        'base_lin_vel',
        'base_ang_vel',
        'projected_gravity',
        'command',
        'joint_pos',
        'joint_vel',
        'last_action',
    ]
    assert [term.dim for term in spec.OBSERVATION] == [3, 3, 3, 3, 12, 12, 12]
    assert spec.OBS_DIM == 48 and spec.ACTION_DIM == 12
    for term in spec.OBSERVATION:
        assert len(term.scale) == term.dim


def test_observation_slices_tile_the_vector():
    slices = spec.observation_slices()
    covered = np.zeros(spec.OBS_DIM, dtype=int)
    for term in spec.OBSERVATION:
        covered[slices[term.name]] += 1
        assert slices[term.name].stop - slices[term.name].start == term.dim
    np.testing.assert_array_equal(covered, 1)
    assert slices['command'] == slice(9, 12)


def test_observation_scale_and_metadata_agree():
    scale = spec.observation_scale()
    assert scale.shape == (48,)
    meta = spec.observation_metadata()
    flat = np.concatenate([entry['scale'] for entry in meta])
    np.testing.assert_array_equal(flat, scale)
    assert scale[spec.observation_slices()['command']].tolist() == [2.0, 2.0, 0.25]


def test_joint_targets_map_action_through_the_scale():
    np.testing.assert_allclose(spec.joint_targets(np.zeros(12)), spec.DEFAULT_JOINT_POS)
    action = np.linspace(-1.0, 1.0, 12)
    np.testing.assert_allclose(
        spec.joint_targets(action), spec.DEFAULT_JOINT_POS + spec.ACTION_SCALE * action
    )
    assert spec.joint_targets(np.zeros((5, 12))).shape == (5, 12)


def test_timing_and_command_ranges():
    assert spec.CONTROL_DT == 0.02
    assert set(spec.COMMAND_RANGES) == {'vx', 'vy', 'wz'}
    for low, high in spec.COMMAND_RANGES.values():
        assert low < 0.0 < high
