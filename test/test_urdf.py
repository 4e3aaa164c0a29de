"""The committed URDF against the compiled MJCF, and MuJoCo's own URDF parser as a consumer."""

import subprocess
import sys
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from loco_policy import description, spec
from loco_policy.description import urdf

# MuJoCo's URDF options for a like-for-like model: keep the fixed-joint foot links as bodies
# (fusestatic false), take the inertia tensors as written (balanceinertia false)
MUJOCO_OPTIONS = (
    '<mujoco><compiler fusestatic="false" discardvisual="true" balanceinertia="false"/></mujoco>'
)


@pytest.fixture(scope='module')
def model():
    return description.load_model()


@pytest.fixture(scope='module')
def text():
    return description.load_urdf()


@pytest.fixture(scope='module')
def robot(text):
    return ET.fromstring(text)


def floats(element, attribute):
    return np.array([float(v) for v in element.get(attribute).split()])


def rotation_of(origin):
    """Rotation matrix of an <origin rpy>, through MuJoCo's extrinsic x-y-z Euler sequence."""
    quat = np.zeros(4)
    mujoco.mju_euler2Quat(quat, floats(origin, 'rpy'), 'XYZ')
    return quat_matrix(quat)


def quat_matrix(quat):
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, np.asarray(quat, dtype=np.float64))
    return mat.reshape(3, 3)


def link_name(model, body):
    return 'base' if body == 1 else model.body(body).name


def expected_primitives(model, geom):
    """(shape, dims, pos, rot) URDF primitives of a MuJoCo geom; capsule: cylinder + 2 spheres."""
    kind, size = model.geom_type[geom], model.geom_size[geom]
    pos, rot = model.geom_pos[geom], quat_matrix(model.geom_quat[geom])
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        return [('box', 2 * size, pos, rot)]
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return [('sphere', size[:1], pos, rot)]
    cylinder = ('cylinder', np.array([size[0], 2 * size[1]]), pos, rot)
    if kind == mujoco.mjtGeom.mjGEOM_CYLINDER:
        return [cylinder]
    assert kind == mujoco.mjtGeom.mjGEOM_CAPSULE
    half = rot[:, 2] * size[1]
    return [cylinder, ('sphere', size[:1], pos - half, rot), ('sphere', size[:1], pos + half, rot)]


def parsed_primitive(element):
    shape = element.find('geometry')[0]
    if shape.tag == 'box':
        dims = floats(shape, 'size')
    elif shape.tag == 'cylinder':
        dims = np.array([float(shape.get('radius')), float(shape.get('length'))])
    else:
        dims = np.array([float(shape.get('radius'))])
    origin = element.find('origin')
    return shape.tag, dims, floats(origin, 'xyz'), rotation_of(origin)


def test_committed_urdf_is_the_generators_output(text):
    assert text == urdf.generate(), 'regenerate: python -m loco_policy.description.urdf -o ...'


def test_command_line_writes_the_same_text(tmp_path, text):
    out = tmp_path / 'robot.urdf'
    subprocess.run([sys.executable, '-m', 'loco_policy.description.urdf', '-o', out], check=True)
    assert out.read_text() == text
    printed = subprocess.run(
        [sys.executable, '-m', 'loco_policy.description.urdf'], capture_output=True, text=True
    )
    assert printed.stdout == text


def test_joints_names_order_axes_limits_and_placement(model, robot):
    joints = robot.findall('joint')
    movable = [j for j in joints if j.get('type') != 'fixed']
    assert tuple(j.get('name') for j in movable) == spec.JOINT_NAMES
    for joint, effort in zip(movable, spec.TORQUE_LIMIT):
        j = model.joint(joint.get('name'))
        body = int(j.bodyid[0])
        assert joint.get('type') == 'revolute'
        assert joint.find('child').get('link') == model.body(body).name
        assert joint.find('parent').get('link') == link_name(model, model.body_parentid[body])
        np.testing.assert_allclose(floats(joint.find('axis'), 'xyz'), j.axis, atol=1e-9)
        limit = joint.find('limit')
        low, high = float(limit.get('lower')), float(limit.get('upper'))
        np.testing.assert_allclose([low, high], j.range, atol=1e-9)
        assert float(limit.get('effort')) == effort
        assert float(limit.get('velocity')) == urdf.VELOCITY_LIMIT
        origin = joint.find('origin')
        np.testing.assert_allclose(floats(origin, 'xyz'), model.body_pos[body], atol=1e-9)
        rot = quat_matrix(model.body_quat[body])
        np.testing.assert_allclose(rotation_of(origin), rot, atol=1e-6)
        dynamics = joint.find('dynamics')
        assert float(dynamics.get('damping')) == model.dof_damping[j.dofadr[0]]
    np.testing.assert_allclose(
        [[float(j.find('limit').get(k)) for k in ('lower', 'upper')] for j in movable],
        spec.JOINT_POS_LIMITS,
    )


def test_feet_are_fixed_links_at_the_foot_sites(model, robot):
    fixed = {
        j.find('child').get('link'): j for j in robot.findall('joint') if j.get('type') == 'fixed'
    }
    assert sorted(fixed) == sorted(spec.FOOT_NAMES)
    for foot in spec.FOOT_NAMES:
        site = model.site(foot)
        assert fixed[foot].find('parent').get('link') == model.body(int(site.bodyid[0])).name
        np.testing.assert_allclose(floats(fixed[foot].find('origin'), 'xyz'), site.pos, atol=1e-9)


def test_every_body_mass_com_and_inertia_tensor(model, robot):
    links = {link.get('name'): link for link in robot.findall('link')}
    assert len(links) == model.nbody - 1 + len(spec.FOOT_NAMES)  # the world is no link
    for body in range(1, model.nbody):
        inertial = links[link_name(model, body)].find('inertial')
        assert float(inertial.find('mass').get('value')) == pytest.approx(
            model.body_mass[body], abs=1e-6
        )
        origin = inertial.find('origin')
        np.testing.assert_allclose(floats(origin, 'xyz'), model.body_ipos[body], atol=1e-9)
        np.testing.assert_allclose(rotation_of(origin), np.eye(3))
        i = {k: float(v) for k, v in inertial.find('inertia').attrib.items()}
        tensor = np.array(
            [
                [i['ixx'], i['ixy'], i['ixz']],
                [i['ixy'], i['iyy'], i['iyz']],
                [i['ixz'], i['iyz'], i['izz']],
            ]
        )
        rot = quat_matrix(model.body_iquat[body])  # principal axes in the body frame
        expected = rot @ np.diag(model.body_inertia[body]) @ rot.T
        np.testing.assert_allclose(tensor, expected, atol=1e-9)
        np.testing.assert_allclose(
            np.sort(np.linalg.eigvalsh(tensor)), np.sort(model.body_inertia[body]), atol=1e-9
        )
    for foot in spec.FOOT_NAMES:
        assert links[foot].find('inertial') is None  # a frame, no mass


def test_every_collision_primitive_type_size_and_pose(model, robot):
    links = {link.get('name'): link for link in robot.findall('link')}
    total = 0
    for body in range(1, model.nbody):
        link = links[link_name(model, body)]
        expected = []
        for geom in range(
            model.body_geomadr[body], model.body_geomadr[body] + model.body_geomnum[body]
        ):
            expected += expected_primitives(model, geom)
        collisions = [parsed_primitive(c) for c in link.findall('collision')]
        visuals = [parsed_primitive(v) for v in link.findall('visual')]
        assert len(collisions) == len(visuals) == len(expected)
        for got, want in zip(collisions, expected):
            assert got[0] == want[0]
            for a, b in zip(got[1:], want[1:]):
                np.testing.assert_allclose(a, b, atol=1e-6)
        total += len(collisions)
    assert total == model.ngeom - 1  # every geom but the floor
    first = links['base'].find('visual/material/color')
    np.testing.assert_allclose(
        floats(first, 'rgba'), model.geom_rgba[model.geom('base_trunk').id], atol=1e-6
    )


def floating(text):
    """MuJoCo's model of the URDF, foot links kept, with a free joint on the base."""
    robot_spec = mujoco.MjSpec.from_string(
        text.replace('<robot name="anymal_c">', '<robot name="anymal_c">' + MUJOCO_OPTIONS, 1)
    )
    robot_spec.body('base').add_freejoint()
    return robot_spec.compile()


def test_mujoco_parses_the_urdf_with_the_same_joints_and_mass(model, text):
    plain = mujoco.MjModel.from_xml_string(text)  # as a URDF consumer reads it, no options
    assert tuple(plain.joint(i).name for i in range(plain.njnt)) == spec.JOINT_NAMES
    loaded = floating(text)
    assert tuple(loaded.joint(i).name for i in range(1, loaded.njnt)) == spec.JOINT_NAMES
    assert float(loaded.body_mass.sum()) == pytest.approx(float(model.body_mass.sum()), abs=1e-6)
    assert loaded.ngeom == model.ngeom - 1
    np.testing.assert_allclose(loaded.jnt_range[1:], model.jnt_range[1:], atol=1e-9)
    np.testing.assert_allclose(loaded.dof_damping, model.dof_damping, atol=1e-9)


def test_forward_kinematics_and_mass_matrix_equal_at_random_states(model, text):
    loaded = floating(text)
    rng = np.random.default_rng(7)
    for _ in range(5):
        qpos = description.default_qpos()
        qpos[:3] = rng.normal(size=3)
        quat = rng.normal(size=4)
        qpos[3:7] = quat / np.linalg.norm(quat)
        qpos[7:] = rng.uniform(spec.JOINT_POS_LIMITS[:, 0], spec.JOINT_POS_LIMITS[:, 1])
        data_mjcf, data_urdf = mujoco.MjData(model), mujoco.MjData(loaded)
        data_mjcf.qpos[:] = data_urdf.qpos[:] = qpos
        mujoco.mj_forward(model, data_mjcf)
        mujoco.mj_forward(loaded, data_urdf)
        for body in range(1, model.nbody):
            other = loaded.body(link_name(model, body)).id
            np.testing.assert_allclose(data_urdf.xpos[other], data_mjcf.xpos[body], atol=1e-6)
            np.testing.assert_allclose(data_urdf.xmat[other], data_mjcf.xmat[body], atol=1e-6)
            np.testing.assert_allclose(data_urdf.xipos[other], data_mjcf.xipos[body], atol=1e-6)
        for foot in spec.FOOT_NAMES:
            np.testing.assert_allclose(
                data_urdf.xpos[loaded.body(foot).id], data_mjcf.site(foot).xpos, atol=1e-6
            )
        mass_mjcf, mass_urdf = np.zeros((model.nv, model.nv)), np.zeros((model.nv, model.nv))
        mujoco.mj_fullM(model, data_mjcf, mass_mjcf)
        mujoco.mj_fullM(loaded, data_urdf, mass_urdf)
        np.testing.assert_allclose(mass_urdf, mass_mjcf, atol=1e-6)


CAPSULE_ROBOT = """
<mujoco>
  <worldbody>
    <body name="trunk">
      <freejoint/>
      <geom name="hull" type="capsule" size="0.05 0.2" pos="0.1 0 0" euler="0 1.2 0.3"
          rgba="1 0 0 1"/>
      <body name="arm" pos="0.3 0 0">
        <joint name="swing" axis="0 1 0"/>
        <geom type="sphere" size="0.04" contype="0" conaffinity="0"/>
      </body>
      <body name="tip" pos="0 0 0.3"><geom type="box" size="0.01 0.02 0.03"/></body>
    </body>
  </worldbody>
</mujoco>
"""


def test_capsules_become_cylinder_and_spheres_and_other_shapes_are_refused():
    small = mujoco.MjModel.from_xml_string(CAPSULE_ROBOT)
    robot = ET.fromstring(urdf.urdf_from_model(small, {'swing': 5.0}))
    base = robot.find("link[@name='base']")
    collisions = [parsed_primitive(c) for c in base.findall('collision')]
    assert [c[0] for c in collisions] == ['cylinder', 'sphere', 'sphere']
    for got, want in zip(collisions, expected_primitives(small, 0)):
        for a, b in zip(got[1:], want[1:]):
            np.testing.assert_allclose(a, b, atol=1e-6)
    arm = robot.find("link[@name='arm']")
    assert arm.find('collision') is None and arm.find('visual') is not None  # visual-only geom
    swing = robot.find("joint[@name='swing']")
    assert swing.get('type') == 'continuous' and swing.find('limit').get('lower') is None
    assert robot.find("joint[@name='base_to_tip']").get('type') == 'fixed'
    with pytest.raises(ValueError, match="joint 'swing': no effort limit"):
        urdf.urdf_from_model(small, {})
    ellipsoid = mujoco.MjModel.from_xml_string(
        CAPSULE_ROBOT.replace('type="capsule" size="0.05 0.2"', 'type="ellipsoid" size="1 2 3"')
    )
    with pytest.raises(ValueError, match="geom 'hull': type mjGEOM_ELLIPSOID has no URDF"):
        urdf.urdf_from_model(ellipsoid, {'swing': 5.0})
    ball = mujoco.MjModel.from_xml_string(
        CAPSULE_ROBOT.replace('name="swing"', 'name="swing" type="ball"')
    )
    with pytest.raises(ValueError, match='only hinge joints'):
        urdf.urdf_from_model(ball, {'swing': 5.0})
    with pytest.raises(ValueError, match="no site 'LF_FOOT'"):
        urdf.urdf_from_model(small, {'swing': 5.0}, frames=('LF_FOOT',))
