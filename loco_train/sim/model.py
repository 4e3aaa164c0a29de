"""Read a compiled mujoco.MjModel into the topology and arrays the Warp kernels need.

Supported: trees of bodies hanging from the world, each body with at most one joint, joints free
(only on children of the world) or hinge; sphere geoms are point contacts against the first plane
of the world body; every other box, cylinder, capsule or sphere geom is a shape whose clearance
above that plane is reported (fall detection). Nothing here is robot-specific.
"""

from dataclasses import dataclass
import hashlib

import numpy as np

FREE, HINGE, NONE = 0, 3, -1
"""Joint kinds (MuJoCo's mjJNT_FREE and mjJNT_HINGE values); NONE: a welded body."""

SHAPE_SPHERE, SHAPE_CAPSULE, SHAPE_CYLINDER, SHAPE_BOX = 2, 3, 5, 6
"""Geom types whose clearance is reported (MuJoCo's mjtGeom values)."""


def _xyzw(wxyz):
    """MuJoCo quaternion (..., 4) w-x-y-z -> Warp order x-y-z-w."""
    wxyz = np.asarray(wxyz, dtype=np.float64)
    return np.concatenate([wxyz[..., 1:], wxyz[..., :1]], axis=-1)


@dataclass
class ModelSpec:
    """Static description of a model: Python topology lists (compiled into kernels) and arrays."""

    nq: int
    """Number of generalised positions (a free joint counts 7)."""
    nv: int
    """Number of generalised velocities (dofs)."""
    nbody: int
    """Number of bodies, the world (body 0) included."""
    nu: int
    """Number of actuators (PD joint drives)."""
    parent: list
    """Parent body per body (world = 0, its own parent -1)."""
    root: list
    """Root body (child of the world) per body; its origin is the spatial reference point."""
    jtype: list
    """Joint kind per body: FREE, HINGE or NONE."""
    qadr: list
    """First qpos index of each body's joint (-1 when welded)."""
    dadr: list
    """First dof index of each body's joint (-1 when welded)."""
    dof_body: list
    """Body per dof."""
    dof_ancestors: list
    """Per dof i: the dofs j <= i whose motion moves dof i's body (MuJoCo's dof_parentid chain)."""
    body_dofs: list
    """Per body: every dof that moves it (ancestor dofs, ascending)."""
    subtree: list
    """Per body: the bodies in its subtree, itself included."""
    act_dof: list
    """Dof driven by each actuator (joint transmission, gear 1)."""
    act_qadr: list
    """qpos index of each actuator's joint."""
    contact_body: list
    """Body of each contact sphere."""
    contact_names: list
    """Geom name of each contact sphere."""
    shape_body: list
    """Body of each clearance shape."""
    shape_type: list
    """Geom type of each clearance shape (SHAPE_BOX, SHAPE_CYLINDER, SHAPE_CAPSULE)."""
    shape_names: list
    """Geom name of each clearance shape."""
    has_ground: bool
    """Whether the world body has a plane (the ground of every contact)."""
    arrays: dict
    """numpy float64 arrays: body_pos (nbody,3), body_quat (nbody,4 xyzw), body_ipos, body_iquat,
    body_mass (nbody,), body_inertia (nbody,3), jnt_axis (nbody,3), jnt_pos (nbody,3), qpos0 (nq,),
    dof_armature (nv,), dof_damping (nv,), contact_pos (nc,3), contact_radius (nc,),
    shape_pos (ns,3), shape_quat (ns,4), shape_size (ns,3), ground_normal, ground_point,
    ground_t1, ground_t2, gravity (3,), ctrl_limit (nu,); and the int32 topology arrays
    (body_parent, body_jtype, ..., dof_anc (nv, depth), contact_dofs (nc, depth)) read by the
    kernels' dynamic loops."""

    @property
    def ncontact(self):
        """Number of point contacts (sphere geoms)."""
        return len(self.contact_body)

    @property
    def nshape(self):
        """Number of clearance shapes."""
        return len(self.shape_body)

    def key(self):
        """Short hash of the topology: names the Warp module compiled for this model."""
        text = repr((self.nq, self.nv, self.parent, self.jtype, self.qadr, self.dadr))
        text += repr((self.act_dof, self.contact_body, self.shape_body, self.shape_type))
        return hashlib.sha1(text.encode()).hexdigest()[:10]


def _tangent(normal):
    """A unit vector orthogonal to `normal` (world x projected, or y when x is parallel)."""
    seed = np.array([1.0, 0.0, 0.0]) if abs(normal[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    t = seed - seed.dot(normal) * normal
    return t / np.linalg.norm(t)


def _ancestors(parent, body):
    chain = []
    while body > 0:
        chain.append(body)
        body = parent[body]
    return chain[::-1]


def model_spec(model):
    """Build a ModelSpec from a compiled mujoco.MjModel; ValueError if unsupported."""
    import mujoco

    nb, nq, nv, nu = model.nbody, model.nq, model.nv, model.nu
    parent = [int(p) for p in model.body_parentid]
    parent[0] = -1
    if any(parent[b] >= b for b in range(1, nb)):
        raise ValueError('bodies must be in depth-first order (parent before child)')
    jtype, qadr, dadr = [NONE] * nb, [-1] * nb, [-1] * nb
    jnt_axis, jnt_pos = np.zeros((nb, 3)), np.zeros((nb, 3))
    for b in range(1, nb):
        if model.body_jntnum[b] > 1:
            raise ValueError(f'body {model.body(b).name!r}: one joint per body at most')
        if model.body_jntnum[b] == 1:
            j = int(model.body_jntadr[b])
            kind = int(model.jnt_type[j])
            if kind == mujoco.mjtJoint.mjJNT_FREE and parent[b] != 0:
                raise ValueError('free joints only on children of the world body')
            if kind not in (FREE, HINGE):
                raise ValueError(f'joint {model.joint(j).name!r}: only free and hinge supported')
            jtype[b], qadr[b], dadr[b] = kind, int(model.jnt_qposadr[j]), int(model.jnt_dofadr[j])
            jnt_axis[b], jnt_pos[b] = model.jnt_axis[j], model.jnt_pos[j]
            if kind == FREE and np.any(jnt_pos[b] != 0):
                raise ValueError('free joints must sit at the body origin')
    chains = [_ancestors(parent, b) for b in range(nb)]
    root = [c[0] if c else 0 for c in chains]
    dof_body = [int(b) for b in model.dof_bodyid]
    dof_ancestors, body_dofs = [], []
    for b in range(nb):
        dofs = []
        for a in chains[b]:
            if jtype[a] != NONE:
                dofs += list(range(dadr[a], dadr[a] + (6 if jtype[a] == FREE else 1)))
        body_dofs.append(dofs)
    for i in range(nv):
        dof_ancestors.append([j for j in body_dofs[dof_body[i]] if j <= i])
    dof_descendants = [[m for m in range(k + 1, nv) if k in dof_ancestors[m]] for k in range(nv)]
    subtree = [[d for d in range(nb) if b == 0 or b in chains[d]] for b in range(nb)]

    for b in range(1, nb):
        if subtree[b] != list(range(b, b + len(subtree[b]))):
            raise ValueError('each subtree must be a contiguous run of bodies (depth-first order)')

    act_dof, act_qadr = [], []
    for a in range(nu):
        if (
            model.actuator_trntype[a] != mujoco.mjtTrn.mjTRN_JOINT
            or model.actuator_gear[a, 0] != 1
        ):
            raise ValueError('actuators must be joint motors with gear 1')
        j = int(model.actuator_trnid[a, 0])
        if model.jnt_type[j] != HINGE:
            raise ValueError('actuators must drive hinge joints')
        act_dof.append(int(model.jnt_dofadr[j]))
        act_qadr.append(int(model.jnt_qposadr[j]))
    ctrl_limit = np.where(
        model.actuator_ctrllimited.astype(bool), np.abs(model.actuator_ctrlrange).max(1), np.inf
    )

    ground = [
        g for g in range(model.ngeom) if model.geom_bodyid[g] == 0 and model.geom_type[g] == 0
    ]
    ground_normal, ground_point = np.array([0.0, 0.0, 1.0]), np.zeros(3)
    if ground:
        g = ground[0]
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, model.geom_quat[g])
        ground_normal, ground_point = rot.reshape(3, 3)[:, 2].copy(), model.geom_pos[g].copy()
    contact_body, contact_names, contact_pos, contact_radius = [], [], [], []
    shape_body, shape_type, shape_names, shape_pos, shape_quat, shape_size = [], [], [], [], [], []
    for g in range(model.ngeom):
        b, kind = int(model.geom_bodyid[g]), int(model.geom_type[g])
        if b == 0:
            continue
        if kind == SHAPE_SPHERE and model.geom_contype[g] | model.geom_conaffinity[g]:
            contact_body.append(b)
            contact_names.append(model.geom(g).name)
            contact_pos.append(model.geom_pos[g])
            contact_radius.append(model.geom_size[g, 0])
        elif kind in (SHAPE_CAPSULE, SHAPE_CYLINDER, SHAPE_BOX):
            shape_body.append(b)
            shape_type.append(kind)
            shape_names.append(model.geom(g).name)
            shape_pos.append(model.geom_pos[g])
            shape_quat.append(_xyzw(model.geom_quat[g]))
            shape_size.append(model.geom_size[g])

    arrays = {
        'body_pos': model.body_pos.copy(),
        'body_quat': _xyzw(model.body_quat),
        'body_ipos': model.body_ipos.copy(),
        'body_iquat': _xyzw(model.body_iquat),
        'body_mass': model.body_mass.copy(),
        'body_inertia': model.body_inertia.copy(),
        'jnt_axis': jnt_axis,
        'jnt_pos': jnt_pos,
        'qpos0': model.qpos0.copy(),
        'dof_armature': model.dof_armature.copy(),
        'dof_damping': model.dof_damping.copy(),
        'contact_pos': np.array(contact_pos).reshape(-1, 3),
        'contact_radius': np.array(contact_radius, dtype=np.float64),
        'shape_pos': np.array(shape_pos).reshape(-1, 3),
        'shape_quat': np.array(shape_quat).reshape(-1, 4),
        'shape_size': np.array(shape_size).reshape(-1, 3),
        'ground_normal': ground_normal,
        'ground_point': ground_point,
        'ground_t1': _tangent(ground_normal),
        'ground_t2': np.cross(ground_normal, _tangent(ground_normal)),
        'gravity': model.opt.gravity.copy(),
        'ctrl_limit': ctrl_limit,
    }
    act_of_dof = [act_dof.index(i) if i in act_dof else -1 for i in range(nv)]

    def padded(lists):
        width = max([len(x) for x in lists] + [1])
        return np.array([x + [0] * (width - len(x)) for x in lists] or [[0]], dtype=np.int32)

    topology = {
        'body_parent': parent, 'body_jtype': jtype, 'body_qadr': qadr, 'body_dadr': dadr,
        'body_root': root, 'body_subtree_end': [b + len(subtree[b]) for b in range(nb)],
        'dof_body': dof_body, 'dof_act': act_of_dof,
        'dof_nanc': [len(a) for a in dof_ancestors], 'dof_anc': padded(dof_ancestors),
        'dof_ndesc': [len(d) for d in dof_descendants], 'dof_desc': padded(dof_descendants),
        'act_dof': act_dof, 'act_qadr': act_qadr, 'contact_body': contact_body,
        'contact_ndof': [len(body_dofs[b]) for b in contact_body],
        'contact_dofs': padded([body_dofs[b] for b in contact_body]),
        'shape_body': shape_body, 'shape_type': shape_type,
    }  # fmt: skip
    for name, value in topology.items():
        value = np.asarray(value, dtype=np.int32)
        topology[name] = value if value.size else np.zeros(1, dtype=np.int32)
    arrays.update(topology)
    return ModelSpec(
        nq=nq, nv=nv, nbody=nb, nu=nu, parent=parent, root=root, jtype=jtype, qadr=qadr,
        dadr=dadr, dof_body=dof_body, dof_ancestors=dof_ancestors, body_dofs=body_dofs,
        subtree=subtree, act_dof=act_dof, act_qadr=act_qadr, contact_body=contact_body,
        contact_names=contact_names, shape_body=shape_body, shape_type=shape_type,
        shape_names=shape_names, has_ground=bool(ground), arrays=arrays,
    )  # fmt: skip
