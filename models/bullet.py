"""PyBullet pieces that simulations share: the floor (the synthetic generator's ground truth
and the twin's forecast stand on the same definition, so their contacts agree), a
kinematic pusher (``Tip``), a known joint effort (``Effort``) and a URDF twin read out as
body poses (``BulletTwin``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation


@dataclass(frozen=True)
class Floor:
    """A physical floor plane z = ``height`` (contacts), rendered as the ground. ``stiffness``
    (N/m) and ``damping`` (N s/m) make its contacts compliant (Bullet's contactStiffness /
    contactDamping on the floor); None: rigid contacts."""

    height: float = 0.0
    friction: float = 0.5
    restitution: float = 0.0
    stiffness: float | None = None
    damping: float | None = None


def add_floor(p, cid: int, floor) -> int:
    """``floor`` as a static box in PyBullet module ``p``, client ``cid``; returns its body id."""
    shape = p.createCollisionShape(p.GEOM_BOX, halfExtents=[20, 20, 0.5], physicsClientId=cid)
    body = p.createMultiBody(0, shape, basePosition=[0, 0, floor.height - 0.5], physicsClientId=cid)
    # Bullet multiplies the two bodies' coefficients (btManifoldResult::calculateCombined*):
    # the floor gets 1 so that the parts' own values are the effective ones.
    p.changeDynamics(body, -1, lateralFriction=1.0, restitution=1.0, physicsClientId=cid)
    if floor.stiffness is not None:  # compliant contacts (Bullet: the pair gets the floor's values)
        p.changeDynamics(body, -1, contactStiffness=floor.stiffness, contactDamping=floor.damping, physicsClientId=cid)
    return body


@dataclass(frozen=True)
class Tip:
    """A kinematic pusher: a vertical cylinder whose centre follows ``positions`` (T, 3), one per frame."""

    radius: float
    height: float
    positions: np.ndarray
    friction: float = 0.3

    @staticmethod
    def from_truth(st) -> "Tip | None":
        """A synthetic recording's pusher (``datasets.synthetic.simulate``'s result), or None."""
        if st.tip_position is None:
            return None
        t = st.truth["tip"]
        return Tip(t["radius"], t["height"], st.tip_position, t["friction"])


@dataclass(frozen=True)
class Effort:
    """A known generalised force at URDF joints ``joints``: ``values`` (T, D) N m or N, row k held
    over the period from frame k to k + 1 (the last row past the end)."""

    joints: tuple[str, ...]
    values: np.ndarray


class BulletTwin:
    """A URDF in its own PyBullet client, default motors off, read out as body (shape) poses."""

    def __init__(self, urdf_path: str, T_link_body: dict[str, np.ndarray], floating: bool, floor: Floor | None = None,
                 sim_hz: float = 960.0, tip: Tip | None = None, effort: Effort | None = None):
        import pybullet as pb

        self.pb, self.T_link_body, self.floating, self.sim_hz, self.tip = pb, T_link_body, floating, sim_hz, tip
        self.effort = effort
        self.cid = cid = pb.connect(pb.DIRECT)
        pb.setGravity(0, 0, -9.81, physicsClientId=cid)
        pb.setTimeStep(1.0 / sim_hz, physicsClientId=cid)
        pb.setPhysicsEngineParameter(numSolverIterations=100, deterministicOverlappingPairs=1, physicsClientId=cid)
        self.rid = pb.loadURDF(str(urdf_path), useFixedBase=not floating, physicsClientId=cid,
                               flags=pb.URDF_USE_INERTIA_FROM_FILE)
        self.joint_index, self.link_index, self.limits = {}, {}, {}
        self.root = pb.getBodyInfo(self.rid, physicsClientId=cid)[0].decode()
        n = pb.getNumJoints(self.rid, physicsClientId=cid)
        for i in range(-1, n):
            pb.changeDynamics(self.rid, i, linearDamping=0.0, angularDamping=0.0, physicsClientId=cid)
        if floor is not None:
            self.set_contact(floor.friction, floor.restitution)
        for i in range(n):
            info = pb.getJointInfo(self.rid, i, physicsClientId=cid)
            self.link_index[info[12].decode()] = i
            if info[2] in (pb.JOINT_REVOLUTE, pb.JOINT_PRISMATIC):
                self.joint_index[info[1].decode()] = i
                self.limits[i] = (info[8], info[9])
                pb.changeDynamics(self.rid, i, jointDamping=info[6], physicsClientId=cid)  # URDF damping
                # default motor off; Coulomb friction as a zero-velocity motor of force = URDF friction
                pb.setJointMotorControl2(self.rid, i, pb.VELOCITY_CONTROL, targetVelocity=0.0, force=info[7],
                                         physicsClientId=cid)
        if effort is not None:
            missing = [j for j in effort.joints if j not in self.joint_index]
            if missing:
                raise ValueError(f"BulletTwin: effort joint(s) {', '.join(missing)} are not revolute/prismatic joints "
                                 f"of {urdf_path} (it has {', '.join(self.joint_index) or 'none'})")
        self.base_inertial = pose_to_T(np.concatenate(pb.getDynamicsInfo(self.rid, -1, physicsClientId=cid)[3:5]))
        if floor is not None:  # friction/restitution 1.0 on it: the parts carry the effective values
            fid = add_floor(pb, cid, floor)
        if tip is not None:
            cyl = pb.createCollisionShape(pb.GEOM_CYLINDER, radius=tip.radius, height=tip.height, physicsClientId=cid)
            self.tid = pb.createMultiBody(50.0, cyl, basePosition=list(tip.positions[0]), physicsClientId=cid)
            # ``tip.friction`` is the effective tip-part value; Bullet multiplies it by the
            # part's own coefficient (the floor friction here), so divide that out as
            # datasets/synthetic/physics.py does
            part = floor.friction if floor is not None and floor.friction > 0 else 1.0
            pb.changeDynamics(self.tid, -1, lateralFriction=tip.friction / part, linearDamping=0, angularDamping=0,
                              physicsClientId=cid)
            if floor is not None:
                pb.setCollisionFilterPair(self.tid, fid, -1, -1, 0, physicsClientId=cid)

    def set_contact(self, friction: float, restitution: float) -> None:
        """Every link's lateral friction and restitution: the effective part-floor values (the
        floor carries 1.0). A tip keeps the value it was made with."""
        for i in range(-1, self.pb.getNumJoints(self.rid, physicsClientId=self.cid)):
            self.pb.changeDynamics(self.rid, i, lateralFriction=friction, restitution=restitution,
                                   physicsClientId=self.cid)

    def close(self) -> None:
        self.pb.disconnect(self.cid)

    def enable_limits(self, on: bool, keep: tuple[str, ...] = ()) -> None:
        """Switch the URDF joint limits on or off (off: +-1e4, e.g. while fitting a state); the
        joints named in ``keep`` keep theirs either way."""
        kept = {self.joint_index[n] for n in keep if n in self.joint_index}
        for i, (lo, hi) in self.limits.items():
            if hi > lo:
                lo, hi = (lo, hi) if on or i in kept else (-1e4, 1e4)
                self.pb.changeDynamics(self.rid, i, jointLowerLimit=lo, jointUpperLimit=hi, physicsClientId=self.cid)

    def set_state(self, names, q, qd, root=None, root_v=None, root_w=None) -> None:
        """Joint q/qd by name; a floating root's link pose (7,) and twist (world, about the link origin)."""
        pb = self.pb
        for n, qi, vi in zip(names, q, qd):
            if n in self.joint_index:
                pb.resetJointState(self.rid, self.joint_index[n], float(qi), float(vi), physicsClientId=self.cid)
        if self.floating and root is not None:
            T_wl = pose_to_T(root)
            T_wi = T_wl @ self.base_inertial  # PyBullet's base pose is its inertial frame
            pb.resetBasePositionAndOrientation(self.rid, T_wi[:3, 3], Rotation.from_matrix(T_wi[:3, :3]).as_quat(),
                                               physicsClientId=self.cid)
            v_com = np.asarray(root_v) + np.cross(root_w, T_wi[:3, 3] - T_wl[:3, 3])
            pb.resetBaseVelocity(self.rid, v_com, root_w, physicsClientId=self.cid)

    def step_frame(self, fps: float, frame: int = 0) -> None:
        """Advance one frame period; a tip moves linearly from its frame to the next meanwhile, a
        known effort's row ``frame`` acts on its joints (torque control, on top of the joint's
        damping and its friction motor)."""
        n = max(1, int(round(self.sim_hz / fps)))
        tau = self.effort.values[min(frame, len(self.effort.values) - 1)] if self.effort is not None else ()
        for s in range(n):
            for j, f in zip(self.effort.joints if self.effort is not None else (), tau):
                self.pb.setJointMotorControl2(self.rid, self.joint_index[j], self.pb.TORQUE_CONTROL, force=float(f),
                                              physicsClientId=self.cid)
            if self.tip is not None:
                P = self.tip.positions
                a, b = P[min(frame, len(P) - 1)], P[min(frame + 1, len(P) - 1)]
                self.pb.resetBasePositionAndOrientation(self.tid, a + (b - a) * s / n, [0, 0, 0, 1], physicsClientId=self.cid)
                self.pb.resetBaseVelocity(self.tid, list((b - a) * fps), [0, 0, 0], physicsClientId=self.cid)
            self.pb.stepSimulation(physicsClientId=self.cid)

    def body_poses(self, bodies: list[str]) -> np.ndarray:
        """(M, 4, 4) world poses of the bodies (shape frames)."""
        pb, out = self.pb, []
        for b in bodies:
            if b == self.root:
                p, o = pb.getBasePositionAndOrientation(self.rid, physicsClientId=self.cid)
                T_wl = pose_to_T(np.concatenate([p, o])) @ np.linalg.inv(self.base_inertial)
            else:
                s = pb.getLinkState(self.rid, self.link_index[b], computeForwardKinematics=True, physicsClientId=self.cid)
                T_wl = pose_to_T(np.concatenate([s[4], s[5]]))
            out.append(T_wl @ self.T_link_body[b])
        return np.stack(out)


def pose_to_T(pose) -> np.ndarray:
    """(4, 4) transform of a pose (7,): xyz + quaternion xyzw."""
    T = np.eye(4)
    T[:3, :3] = Rotation.from_quat(pose[3:7]).as_matrix()
    T[:3, 3] = pose[:3]
    return T
