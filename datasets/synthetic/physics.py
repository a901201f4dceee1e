"""Ground-truth motion of a synthetic mechanism, simulated by PyBullet.

The dynamics deliberately come from PyBullet (Coumans & Bai), never from
``vid2sim.models.dynamics``, so that our identification is judged against physics it
did not make. A ``Mechanism`` becomes a URDF in world coordinates (fixed-base ones
hang from a link named ``world``; a floating one has its root body as base), loaded
in DIRECT mode with default motors off, PyBullet's default link damping off, joint
damping set explicitly, stepped at ``SIM_HZ`` or faster with whole substeps per frame.
"""
from __future__ import annotations

import math
import os
import tempfile
import warnings
from dataclasses import dataclass
from xml.sax.saxutils import escape

import numpy as np
from scipy.spatial.transform import Rotation

from vid2sim.datasets.recording import Camera
from vid2sim.datasets.shapes import Shape
from vid2sim.datasets.synthetic.mechanisms import GRAVITY, Mechanism, Tip, pose
from vid2sim.models.bullet import add_floor

SIM_HZ = 960.0


@dataclass(frozen=True)
class SyntheticTruth:
    """Everything known about one simulated clip.

    truth: the truth.json dict (docs/formats.md); world_from_body: (T, M, 4, 4)
    shape-centre poses, bodies in truth order; q: (T, dofs) URDF joint positions of the
    non-fixed URDF joints ``joint_names``; root_pose: (T, 7) x, y, z, qx, qy, qz, qw of
    the floating root (None for fixed-base); tip_position: (T, 3) or None; joint_effort:
    (T, D) the known effort applied over each frame period at the joints ``effort_joints``
    (articulate's names), or None.
    """

    name: str
    truth: dict
    world_from_body: np.ndarray
    shapes: dict[str, Shape]
    urdf: str
    q: np.ndarray
    joint_names: list[str]
    camera: Camera
    fps: float
    colours: dict[str, tuple[float, float, float]]
    root_pose: np.ndarray | None = None
    tip_position: np.ndarray | None = None
    joint_effort: np.ndarray | None = None
    effort_joints: tuple[str, ...] = ()

    @property
    def body_names(self) -> list[str]:
        return [b["name"] for b in self.truth["bodies"]]


# ---------------------------------------------------------------- inertia and URDF

def _geometry_parts(shape: Shape) -> list[tuple[np.ndarray, str]]:
    """(offset in the shape frame, URDF <geometry> body) pieces of a shape.

    Standard URDF has no capsule, so a capsule is written as its exact decomposition,
    a cylinder plus two end spheres (for visual and collision; inertia is explicit),
    which every URDF reader understands and which Bullet collides identically.
    """
    if shape.type == "mesh":  # the file, scaled, placed so that its centre of mass is the shape centre
        sc = shape.scale
        return [(-shape.mesh_offset(), f'<mesh filename="{escape(str(shape.mesh_path().resolve()))}" '
                 f'scale="{sc:.9g} {sc:.9g} {sc:.9g}"/>')]
    if shape.type == "box":
        return [(np.zeros(3), '<box size="%.9g %.9g %.9g"/>' % tuple(shape.size))]
    if shape.type == "sphere":
        return [(np.zeros(3), f'<sphere radius="{shape.radius:.9g}"/>')]
    cyl = (np.zeros(3), f'<cylinder radius="{shape.radius:.9g}" length="{shape.length:.9g}"/>')
    if shape.type == "cylinder":
        return [cyl]
    cap = f'<sphere radius="{shape.radius:.9g}"/>'
    return [cyl, (np.array([0, 0, shape.length / 2]), cap), (np.array([0, 0, -shape.length / 2]), cap)]


def _origin_xml(T: np.ndarray) -> str:
    with warnings.catch_warnings():  # gimbal lock (pitch +-90 deg) still gives an exact R
        warnings.simplefilter("ignore", UserWarning)
        rpy = Rotation.from_matrix(T[:3, :3]).as_euler("xyz")  # URDF: R = Rz(y) Ry(p) Rx(r)
    return '<origin xyz="%.12g %.12g %.12g" rpy="%.12g %.12g %.12g"/>' % (*T[:3, 3], *rpy)


def link_frames(mech: Mechanism) -> dict[str, np.ndarray]:
    """URDF link frame of each body at the nominal configuration (world coordinates).

    A link's frame is its joint frame: at the pivot, oriented like the body. The root
    body of a floating mechanism (and ``world``) has its frame at the shape centre.
    """
    frames = {"world": np.eye(4)}
    for b in mech.bodies:
        frames[b.name] = b.T_world_body.copy()
    for j in mech.joints:
        if j.type in ("revolute", "prismatic", "fixed") and j.pivot is not None:
            frames[j.child][:3, 3] = j.pivot
    return frames


def build_urdf(mech: Mechanism) -> str:
    """The URDF PyBullet simulates, in world coordinates at the nominal configuration."""
    frames = link_frames(mech)
    parts = [f'<?xml version="1.0"?>\n<robot name="{escape(mech.name)}">']
    if mech.root is None:
        parts.append('  <link name="world"/>')
    for b in mech.bodies:
        c_link = frames[b.name][:3, :3].T @ (b.T_world_body[:3, 3] - frames[b.name][:3, 3])
        T_off = np.eye(4)
        T_off[:3, 3] = c_link
        I = b.shape.inertia_tensor(b.mass)
        rgba = "%.3g %.3g %.3g 1" % b.colour
        xml = (f'  <link name="{escape(b.name)}">\n'
               f'    <inertial>{_origin_xml(T_off)}<mass value="{b.mass:.9g}"/>'
               f'<inertia ixx="{I[0, 0]:.9g}" ixy="{I[0, 1]:.9g}" ixz="{I[0, 2]:.9g}" iyy="{I[1, 1]:.9g}" '
               f'iyz="{I[1, 2]:.9g}" izz="{I[2, 2]:.9g}"/></inertial>\n')
        for offset, geom in _geometry_parts(b.shape):
            T_geom = T_off @ pose(offset, b.T_world_body[:3, :3].T @ frames[b.name][:3, :3])
            xml += (f'    <visual>{_origin_xml(T_geom)}<geometry>{geom}</geometry>'
                    f'<material name="{escape(b.name)}_mat"><color rgba="{rgba}"/></material></visual>\n'
                    f'    <collision>{_origin_xml(T_geom)}<geometry>{geom}</geometry></collision>\n')
        parts.append(xml + '  </link>')
    for j in mech.joints:
        if j.type in ("free", "planar"):
            continue
        T_pc = np.linalg.inv(frames[j.parent]) @ frames[j.child]
        axis = frames[j.child][:3, :3].T @ np.asarray(j.axis, float)
        axis = axis / np.linalg.norm(axis)
        jtype = j.type
        if j.type == "revolute" and j.limits is None:
            jtype = "continuous"
        lim = j.limits if j.limits is not None else (-10.0, 10.0)
        xml = (f'  <joint name="{escape(j.name)}" type="{jtype}">\n'
               f'    <parent link="{escape(j.parent)}"/><child link="{escape(j.child)}"/>{_origin_xml(T_pc)}\n')
        if j.type != "fixed":
            xml += ('    <axis xyz="%.12g %.12g %.12g"/>' % tuple(axis)
                    + (f'<limit lower="{lim[0]:.9g}" upper="{lim[1]:.9g}" effort="1000" velocity="100"/>'
                       if jtype != "continuous" else '<limit effort="1000" velocity="100"/>')
                    + f'<dynamics damping="{j.damping:.9g}" friction="0"/>\n')
        parts.append(xml + '  </joint>')
    parts.append('</robot>\n')
    return "\n".join(parts)


# ---------------------------------------------------------------- simulation

def _T_from_pq(pos, quat) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3] = Rotation.from_quat(quat).as_matrix()
    T[:3, 3] = pos
    return T


def _add_tip(p, cid: int, tip: Tip, part_friction: float) -> int:
    shape = p.createCollisionShape(p.GEOM_CYLINDER, radius=tip.radius, height=tip.height, physicsClientId=cid)
    body = p.createMultiBody(50.0, shape, basePosition=list(tip.start), physicsClientId=cid)
    p.changeDynamics(body, -1, lateralFriction=tip.friction / part_friction, linearDamping=0, angularDamping=0,
                     physicsClientId=cid)
    return body


def _load(p, cid: int, mech: Mechanism, urdf: str, init, tip: Tip | None, dt: float) -> tuple[int, list, int | None]:
    """Load ``urdf`` into client ``cid`` in its initial state, with the floor and tip added.

    Returns the robot's body id, PyBullet's joint info tuples and the tip's body id (or None).
    """
    p.resetSimulation(physicsClientId=cid)
    p.setGravity(*GRAVITY, physicsClientId=cid)
    p.setTimeStep(dt, physicsClientId=cid)
    p.setPhysicsEngineParameter(numSolverIterations=100, deterministicOverlappingPairs=1, physicsClientId=cid)
    floating = mech.root is not None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{mech.name}.urdf")
        with open(path, "w") as f:
            f.write(urdf)
        rid = p.loadURDF(path, useFixedBase=not floating, flags=p.URDF_USE_INERTIA_FROM_FILE, physicsClientId=cid)
    nj = p.getNumJoints(rid, physicsClientId=cid)
    info = [p.getJointInfo(rid, i, physicsClientId=cid) for i in range(nj)]
    movable = [i for i, inf in enumerate(info) if inf[2] != p.JOINT_FIXED]
    spec = {j.name: j for j in mech.joints}
    for i in range(-1, nj):
        p.changeDynamics(rid, i, linearDamping=0.0, angularDamping=0.0, physicsClientId=cid)
        if mech.floor is not None:
            p.changeDynamics(rid, i, lateralFriction=mech.floor.friction,
                             restitution=mech.floor.restitution, physicsClientId=cid)
    for i in movable:
        name = info[i][1].decode()
        p.changeDynamics(rid, i, jointDamping=spec[name].damping, physicsClientId=cid)
        p.resetJointState(rid, i, init.q.get(name, 0.0), init.qd.get(name, 0.0), physicsClientId=cid)
    if movable:
        p.setJointMotorControlArray(rid, movable, p.VELOCITY_CONTROL, forces=[0.0] * len(movable),
                                    physicsClientId=cid)
    if floating:
        T0 = init.T_world_root
        p.resetBasePositionAndOrientation(rid, T0[:3, 3], Rotation.from_matrix(T0[:3, :3]).as_quat(),
                                          physicsClientId=cid)
        v, w = init.root_twist
        p.resetBaseVelocity(rid, list(v), list(w), physicsClientId=cid)
    fid = add_floor(p, cid, mech.floor) if mech.floor is not None else None
    part_friction = mech.floor.friction if mech.floor is not None else 1.0
    tid = _add_tip(p, cid, tip, part_friction) if tip is not None else None
    if tid is not None and fid is not None:
        p.setCollisionFilterPair(tid, fid, -1, -1, 0, physicsClientId=cid)
    return rid, info, tid


def _record(p, cid: int, mech: Mechanism, rid: int, info: list, tip: Tip | None, tid: int | None,
            effort, frames: int, fps: float, n_sub: int) -> dict:
    """Step the loaded clip ``frames`` frames of ``n_sub`` substeps, recording each frame's state.

    Returns poses (T, M, 4, 4) shape-centre poses in world, q (T, dofs) of the movable joints,
    root_pose (T, 7) or None, tip_pos (T, 3) or None, effort (T, D) or None and
    joint_frames0 {joint: 4x4 URDF joint frame in world at frame 0}.
    """
    nj = len(info)
    link_index = {inf[12].decode(): i for i, inf in enumerate(info)}
    joint_index = {inf[1].decode(): i for i, inf in enumerate(info)}
    movable = [i for i, inf in enumerate(info) if inf[2] != p.JOINT_FIXED]
    names = [b.name for b in mech.bodies]
    root_name = mech.root.child if mech.root is not None else None
    poses = np.zeros((frames, len(names), 4, 4))
    q = np.zeros((frames, len(movable)))
    root_pose = np.zeros((frames, 7)) if root_name is not None else None
    tip_pos = np.zeros((frames, 3)) if tip is not None else None
    tau = np.zeros((frames, len(effort.joints))) if effort is not None else None
    driven = [joint_index[j] for j in effort.joints] if effort is not None else []
    joint_frames0 = {}
    for k in range(frames):
        states = p.getLinkStates(rid, list(range(nj)), computeForwardKinematics=1,
                                 physicsClientId=cid) if nj else []
        for m, name in enumerate(names):
            if name == root_name:
                pos, orn = p.getBasePositionAndOrientation(rid, physicsClientId=cid)
                root_pose[k] = (*pos, *orn)
                poses[k, m] = _T_from_pq(pos, orn)
            else:
                s = states[link_index[name]]
                poses[k, m] = _T_from_pq(s[0], s[1])  # inertial frame = shape centre
        if movable:
            q[k] = [s[0] for s in p.getJointStates(rid, movable, physicsClientId=cid)]
        if k == 0:
            joint_frames0 = {j: _T_from_pq(states[i][4], states[i][5]) for j, i in joint_index.items()}
        if tip is not None:
            tip_pos[k] = tip.position(k / fps)
        if effort is not None:   # held over the frame period: the recorded row replays it exactly
            tau[k] = effort.values(k / fps)
        if k == frames - 1:
            break
        for s in range(n_sub):
            if tip is not None:   # the tip follows its path exactly: pose and velocity set each substep
                t = (k + s / n_sub) / fps
                p.resetBasePositionAndOrientation(tid, tip.position(t), [0, 0, 0, 1], physicsClientId=cid)
                p.resetBaseVelocity(tid, tip.velocity_at(t).tolist(), [0, 0, 0], physicsClientId=cid)
            for i, f in zip(driven, tau[k] if effort is not None else ()):
                p.setJointMotorControl2(rid, i, p.TORQUE_CONTROL, force=float(f), physicsClientId=cid)
            p.stepSimulation(physicsClientId=cid)
    return dict(poses=poses, q=q, root_pose=root_pose, tip_pos=tip_pos, effort=tau, joint_frames0=joint_frames0)


def run_pybullet(mech: Mechanism, seed: int, frames: int, fps: float) -> dict:
    """Simulate ``frames`` frames; returns raw arrays and the frame-0 joint frames."""
    import pybullet as p

    rng = np.random.default_rng(seed)
    init = mech.initial(rng)
    tip = mech.tip_factory(rng) if mech.tip_factory is not None else None
    effort = mech.effort_factory(rng) if mech.effort_factory is not None else None
    urdf = build_urdf(mech)
    n_sub = max(1, math.ceil(SIM_HZ / fps))
    cid = p.connect(p.DIRECT)
    try:
        rid, info, tid = _load(p, cid, mech, urdf, init, tip, 1.0 / (fps * n_sub))
        rec = _record(p, cid, mech, rid, info, tip, tid, effort, frames, fps, n_sub)
    finally:
        p.disconnect(cid)
    movable = [i for i, inf in enumerate(info) if inf[2] != p.JOINT_FIXED]
    return dict(rec, urdf=urdf, joint_names=[info[i][1].decode() for i in movable], tip=tip,
                effort_names=tuple(effort.joints) if effort is not None else (),
                axes_local={inf[1].decode(): np.asarray(inf[13], float) for inf in info}, sim_hz=fps * n_sub)


def truth_dict(mech: Mechanism, sim: dict, fps: float) -> dict:
    """truth.json (docs/formats.md): joints' axis and pivot in world at frame 0."""
    names = [b.name for b in mech.bodies]
    poses0 = sim["poses"][0]
    bodies = [{"name": b.name, "shape": b.shape.name, "mass": b.mass} for b in mech.bodies]
    joints = []
    for j in mech.joints:
        if j.type in ("free", "planar"):
            T0 = poses0[names.index(j.child)]
            axis = np.asarray(j.axis, float) if j.type == "planar" else np.array([0.0, 0.0, 1.0])
            pivot = T0[:3, 3]
        else:
            Tj = sim["joint_frames0"][j.name]
            axis = Tj[:3, :3] @ sim["axes_local"][j.name] if j.type != "fixed" else np.asarray(j.axis, float)
            pivot = Tj[:3, 3]
        d = {"name": j.name, "type": j.type, "parent": j.parent, "child": j.child,
             "axis": [float(v) for v in axis / np.linalg.norm(axis)], "pivot": [float(v) for v in pivot]}
        if j.limits is not None:
            d["limits"] = [float(v) for v in j.limits]
        joints.append(d)
    params = {f"{b.name}.mass": b.mass for b in mech.bodies}
    for j in mech.joints:
        if j.type in ("revolute", "prismatic"):
            params[f"{j.name}.damping"] = j.damping
            params[f"{j.name}.friction"] = 0.0
    if mech.floor is not None:  # effective coefficients between the parts and the floor
        params["floor.friction"] = mech.floor.friction
        params["floor.restitution"] = mech.floor.restitution
        if mech.floor.stiffness is not None:
            params["floor.stiffness"] = mech.floor.stiffness
            params["floor.damping"] = mech.floor.damping
    params.update(mech.extra_params)
    out = {"mechanism": mech.name, "bodies": bodies, "joints": joints, "params": params,
           "gravity": list(GRAVITY), "fps": fps, "sim_hz": sim["sim_hz"], "engine": "pybullet"}
    if mech.floor is not None:
        out["floor"] = {"height": mech.floor.height, "friction": mech.floor.friction,
                        "restitution": mech.floor.restitution, "stiffness": mech.floor.stiffness,
                        "damping": mech.floor.damping}
    tip = sim["tip"]
    if tip is not None:
        out["tip"] = {"radius": tip.radius, "height": tip.height, "start": list(tip.start),
                      "velocity": list(tip.velocity), "friction": tip.friction}
        if tip.strokes is not None:   # (moving, still) seconds; absent for a tip at constant velocity
            out["tip"]["strokes"] = list(tip.strokes)
    return out


def normal_mode_frequencies(mech: Mechanism) -> np.ndarray:
    """(dofs,) small-oscillation frequencies (Hz) about the nominal configuration of a
    fixed-base mechanism: eigenvalues of M^-1 K, K = dG/dq by central differences of
    PyBullet's gravity torques, M its joint-space mass matrix."""
    import pybullet as p

    cid = p.connect(p.DIRECT)
    try:
        p.setGravity(*GRAVITY, physicsClientId=cid)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.urdf")
            with open(path, "w") as f:
                f.write(build_urdf(mech))
            rid = p.loadURDF(path, useFixedBase=True, flags=p.URDF_USE_INERTIA_FROM_FILE, physicsClientId=cid)
        n = sum(p.getJointInfo(rid, i, physicsClientId=cid)[2] != p.JOINT_FIXED
                for i in range(p.getNumJoints(rid, physicsClientId=cid)))
        zero = [0.0] * n
        M = np.array(p.calculateMassMatrix(rid, zero, physicsClientId=cid))

        def G(q):
            return np.array(p.calculateInverseDynamics(rid, list(q), zero, zero, physicsClientId=cid))

        eps = 1e-5
        K = np.stack([(G(eps * e) - G(-eps * e)) / (2 * eps) for e in np.eye(n)], 1)
    finally:
        p.disconnect(cid)
    w2 = np.sort(np.linalg.eigvals(np.linalg.solve(M, K)).real)
    return np.sqrt(np.maximum(w2, 0.0)) / (2 * np.pi)
