"""The URDF of the robot, written from the compiled MJCF description (ROS tools read URDF).

    python -m loco_policy.description.urdf [-o loco_policy/description/anymal_c.urdf]

The MJCF stays the one description; this generator compiles it with MuJoCo and writes what the
compiled model holds: one link per body (`base` for the trunk, the body names otherwise), one
revolute joint per hinge (names, axes, position limits from jnt_range, effort from the spec's
torque limit, damping and dry friction), inertials (mass, centre of mass, the full inertia tensor
in the link frame: MuJoCo stores principal moments and their frame iquat, rotated back here),
collision and visual primitives coloured by the geoms' rgba, and the foot sites as links on fixed
joints. URDF has no capsule: a capsule is written as a cylinder and two end spheres.
"""

import argparse
import sys

import numpy as np

from loco_policy import spec
from loco_policy.description import kinematics

VELOCITY_LIMIT = 7.5
"""Joint speed limit (rad/s) in the URDF's required <limit velocity>: a nominal figure for the
drives, enforced by neither simulator nor policy_node."""

HEADER = """
  ANYmal C, generated from anymal_c.xml (the MJCF robot description) by
  `python -m loco_policy.description.urdf -o anymal_c.urdf`: do not edit, regenerate.
  Units: m, kg, kg m^2, rad, N m, rad/s. Capsules are written as a cylinder and two spheres.
"""


def _num(value):
    """One number as URDF text: 9 significant digits, |v| < 1e-12 written as 0."""
    value = float(value)
    return '0' if abs(value) < 1e-12 else f'{value:.9g}'


def _vec(values):
    """Numbers as space-separated URDF text."""
    return ' '.join(_num(v) for v in values)


def _origin(pos, quat, indent):
    """<origin> of a pose (pos (3,), quat w-x-y-z (4,)); rpy from the rotation matrix."""
    rpy = kinematics.rpy_from_matrix(kinematics.matrix_from_quat(quat))
    return f'{indent}<origin xyz="{_vec(pos)}" rpy="{_vec(rpy)}"/>'


def _name(model, objtype, index, fallback):
    """The name of a model object, or fallback when it has none."""
    import mujoco

    return mujoco.mj_id2name(model, objtype, index) or fallback


def primitives(model, geom):
    """URDF primitives [(suffix, shape, dims, pos (3,), quat (4,))] of one geom, in body frame.

    shape is 'box' (dims: full sizes x y z), 'cylinder' (radius, length) or 'sphere' (radius).
    Raise ValueError on a geom type URDF cannot express (plane, ellipsoid, mesh, ...).
    """
    import mujoco

    kind, size = model.geom_type[geom], model.geom_size[geom]
    pos, quat = model.geom_pos[geom].copy(), model.geom_quat[geom].copy()
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        return [('', 'box', 2.0 * size, pos, quat)]
    if kind == mujoco.mjtGeom.mjGEOM_CYLINDER:
        return [('', 'cylinder', (size[0], 2.0 * size[1]), pos, quat)]
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return [('', 'sphere', (size[0],), pos, quat)]
    if kind == mujoco.mjtGeom.mjGEOM_CAPSULE:  # cylinder between two hemispheres' centres
        ends = kinematics.matrix_from_quat(quat)[:, 2] * size[1]
        return [
            ('', 'cylinder', (size[0], 2.0 * size[1]), pos, quat),
            ('_end0', 'sphere', (size[0],), pos - ends, quat),
            ('_end1', 'sphere', (size[0],), pos + ends, quat),
        ]
    name = _name(model, mujoco.mjtObj.mjOBJ_GEOM, geom, f'#{geom}')
    raise ValueError(f'geom {name!r}: type {mujoco.mjtGeom(kind).name} has no URDF primitive')


def _geometry(shape, dims):
    """The <geometry> element of one primitive."""
    if shape == 'box':
        return f'<box size="{_vec(dims)}"/>'
    if shape == 'cylinder':
        return f'<cylinder radius="{_num(dims[0])}" length="{_num(dims[1])}"/>'
    return f'<sphere radius="{_num(dims[0])}"/>'


def _inertia_tensor(model, body):
    """Full inertia tensor (3, 3) about the centre of mass, in the body frame: R diag(I) R^T."""
    rot = kinematics.matrix_from_quat(model.body_iquat[body])
    return rot @ np.diag(model.body_inertia[body]) @ rot.T


def _link(model, body, name):
    """Lines of one <link>: inertial, then a visual and a collision per geom primitive."""
    import mujoco

    lines = [f'  <link name="{name}">']
    if model.body_mass[body] > 0.0:
        i = _inertia_tensor(model, body)
        lines += [
            '    <inertial>',
            _origin(model.body_ipos[body], (1, 0, 0, 0), '      '),
            f'      <mass value="{_num(model.body_mass[body])}"/>',
            f'      <inertia ixx="{_num(i[0, 0])}" ixy="{_num(i[0, 1])}" ixz="{_num(i[0, 2])}"'
            f' iyy="{_num(i[1, 1])}" iyz="{_num(i[1, 2])}" izz="{_num(i[2, 2])}"/>',
            '    </inertial>',
        ]
    first = model.body_geomadr[body]
    for geom in range(first, first + model.body_geomnum[body]):
        geom_name = _name(model, mujoco.mjtObj.mjOBJ_GEOM, geom, f'{name}_geom{geom - first}')
        collides = model.geom_contype[geom] or model.geom_conaffinity[geom]
        rgba = _vec(np.round(model.geom_rgba[geom], 6))  # float32 in the model
        for suffix, shape, dims, pos, quat in primitives(model, geom):
            part = geom_name + suffix
            lines += [
                f'    <visual name="{part}">',
                _origin(pos, quat, '      '),
                f'      <geometry>{_geometry(shape, dims)}</geometry>',
                f'      <material name="{part}"><color rgba="{rgba}"/></material>',
                '    </visual>',
            ]
            if collides:
                lines += [
                    f'    <collision name="{part}">',
                    _origin(pos, quat, '      '),
                    f'      <geometry>{_geometry(shape, dims)}</geometry>',
                    '    </collision>',
                ]
    lines.append('  </link>')
    return lines


def _joint(model, body, parent, child, effort, velocity):
    """Lines of the <joint> that attaches a body to its parent (revolute, continuous or fixed)."""
    import mujoco

    count = model.body_jntnum[body]
    if count > 1:
        raise ValueError(f'body {child!r}: {count} joints; URDF allows one per link')
    origin = _origin(model.body_pos[body], model.body_quat[body], '    ')
    if count == 0:
        return [
            f'  <joint name="{parent}_to_{child}" type="fixed">',
            origin,
            f'    <parent link="{parent}"/>',
            f'    <child link="{child}"/>',
            '  </joint>',
        ]
    j = model.body_jntadr[body]
    name = _name(model, mujoco.mjtObj.mjOBJ_JOINT, j, f'{child}_joint')
    if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE:
        raise ValueError(f'joint {name!r}: only hinge joints below the base are written')
    if np.linalg.norm(model.jnt_pos[j]) > 1e-12:
        raise ValueError(f'joint {name!r}: not at its body origin (pos {model.jnt_pos[j]})')
    if name not in effort:
        raise ValueError(f'joint {name!r}: no effort limit given')
    dof = model.jnt_dofadr[j]
    limited = bool(model.jnt_limited[j])
    lines = [
        f'  <joint name="{name}" type="{"revolute" if limited else "continuous"}">',
        origin,
        f'    <parent link="{parent}"/>',
        f'    <child link="{child}"/>',
        f'    <axis xyz="{_vec(model.jnt_axis[j])}"/>',
    ]
    low, high = model.jnt_range[j] if limited else (None, None)
    bounds = f'lower="{_num(low)}" upper="{_num(high)}" ' if limited else ''
    lines += [
        f'    <limit {bounds}effort="{_num(effort[name])}" velocity="{_num(velocity)}"/>',
        f'    <dynamics damping="{_num(model.dof_damping[dof])}"'
        f' friction="{_num(model.dof_frictionloss[dof])}"/>',
        '  </joint>',
    ]
    return lines


def _frame_joint(model, site, parent, name):
    """Lines of a site written as a link on a fixed joint (a foot frame)."""
    return [
        f'  <link name="{name}"/>',
        f'  <joint name="{name}_fixed" type="fixed">',
        _origin(model.site_pos[site], model.site_quat[site], '    '),
        f'    <parent link="{parent}"/>',
        f'    <child link="{name}"/>',
        '  </joint>',
    ]


def urdf_from_model(model, effort, velocity=VELOCITY_LIMIT, frames=(), name='robot', header=''):
    """URDF text of a compiled mujoco.MjModel whose first body is the (floating) base.

    effort: {joint name: torque limit N m}; velocity: rad/s for every joint; frames: site names
    written as fixed-joint links of the same name; header: a comment put at the top. The base's
    free joint is left out (a URDF's root link floats). Raise ValueError on what URDF cannot hold.
    """
    import mujoco

    if model.nbody < 2:
        raise ValueError('the model has no body besides the world')
    roots = [b for b in range(1, model.nbody) if model.body_parentid[b] == 0]
    if roots != [1]:
        raise ValueError(f'expected one body under the world, found {len(roots)}')
    if model.body_jntnum[1] and model.jnt_type[model.body_jntadr[1]] != mujoco.mjtJoint.mjJNT_FREE:
        raise ValueError('the base may only carry a free joint')
    links = {b: _name(model, mujoco.mjtObj.mjOBJ_BODY, b, f'body{b}') for b in range(model.nbody)}
    links[1] = spec.BASE_BODY
    lines = ['<?xml version="1.0"?>']
    if header:
        lines.append(f'<!--{header}-->')
    lines.append(f'<robot name="{name}">')
    for body in range(1, model.nbody):
        lines += _link(model, body, links[body])
        if body > 1:
            parent = links[model.body_parentid[body]]
            lines += _joint(model, body, parent, links[body], effort, velocity)
    for site_name in frames:
        site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site_name)
        if site < 0:
            raise ValueError(f'no site {site_name!r} to write as a frame')
        lines += _frame_joint(model, site, links[model.site_bodyid[site]], site_name)
    lines.append('</robot>')
    return '\n'.join(lines) + '\n'


def generate(path=None):
    """URDF text of the package's robot description (or the MJCF at path)."""
    from loco_policy import description

    model = description.load_model() if path is None else description.load_model(path)
    effort = dict(zip(spec.JOINT_NAMES, spec.TORQUE_LIMIT.tolist()))
    return urdf_from_model(
        model, effort, frames=spec.FOOT_NAMES, name=spec.ROBOT_NAME, header=HEADER
    )


def main(argv=None):
    """Write the URDF to stdout or to -o FILE."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-o', '--output', default='', help='output file (default: stdout)')
    args = parser.parse_args(argv)
    text = generate()
    if args.output:
        with open(args.output, 'w') as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
