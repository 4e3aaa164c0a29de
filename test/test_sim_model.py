"""The simulator reads any supported compiled MjModel; unsupported models are refused."""

import mujoco
import numpy as np
import pytest

from loco_policy import spec
from loco_train.sim.model import FREE, HINGE, model_spec
from loco_train.sim.reference import robot


def test_robot_spec_topology():
    s = model_spec(robot())
    assert (s.nq, s.nv, s.nu, s.nbody) == (19, 18, 12, 14)
    assert s.jtype[1] == FREE and all(s.jtype[b] == HINGE for b in range(2, s.nbody))
    assert s.contact_names == list(spec.FOOT_NAMES)
    assert 'base_trunk' in s.shape_names and 'LF_knee' in s.shape_names
    # the knee dof of LF is moved by the 6 base dofs and the LF leg's three joints
    assert s.dof_ancestors[8] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert s.subtree[1] == list(range(1, 14))
    np.testing.assert_allclose(s.arrays['ground_normal'], [0, 0, 1])


def test_ball_joint_refused():
    xml = """<mujoco><worldbody><body><freejoint/><geom size="0.1"/>
      <body pos="0 0 -0.2"><joint type="ball"/><geom size="0.05"/></body></body></worldbody>
      </mujoco>"""
    with pytest.raises(ValueError, match='only free and hinge'):
        model_spec(mujoco.MjModel.from_xml_string(xml))
