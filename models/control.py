"""Model-predictive control with the twin: MPPI on a cartpole (Heiden et al., §4.3.5.3).

The controller plans on a model (the inferred twin, or the true model for comparison)
and acts on the true system, simulated by PyBullet. Planning model: the cartpole's
equations of motion, vectorised over MPPI samples in NumPy, with the parameters read
from a URDF (cart mass, pole mass, hinge-to-COM distance and inertia about the hinge
axis through Pinocchio's link inertias, joint damping); so planning on ``model.urdf``
is planning on exactly what the pipeline inferred.

Cartpole coordinates: x (m) along the slider axis, theta (rad) about the hinge axis
with theta = 0 at the frame the URDF calls 0 plus ``theta_up`` (the upright angle).
Equations (Lagrange; pole COM at distance l from the hinge, inertia I about the COM):

    (mc + mp) x'' + mp l cos(th) th'' - mp l sin(th) th'^2 = F - bc x'
    mp l cos(th) x'' + (I + mp l^2) th'' - mp g l sin(th)  = -bp th'

with th measured from upright (so + mp g l sin th tips it further).

MPPI (Williams et al. 2017, information-theoretic MPC): ``samples`` Gaussian control
sequences around the warm-started nominal (AR(1)-correlated over the horizon: white
noise rarely contains the sustained push that catches a falling pole), each rolled out ``horizon`` steps of ``dt``;
weights exp(-(cost - min)/lambda); the nominal becomes the weighted mean; the first
control is applied and the sequence shifted.

Reward (reported per task as the mean over the episode's control steps, in [0, 1]):
the DeepMind Control Suite cartpole reward (Tassa et al. 2018):
``upright * centered * small_control * small_velocity`` with upright = (cos th + 1)/2,
centered = (1 + tol(x, margin=2))/2, small_control = (4 + tol_quad(u, margin=1))/5 for
the normalised action u = F / max_force in [-1, 1], small_velocity = (1 + tol(th',
margin=5))/2, where tol(v, margin) = exp(-0.5 (v * sqrt(-2 ln 0.1) / margin)^2) and
tol_quad(v, margin) = max(0, 1 - (v / margin)^2). The planner minimises the negative
of the same reward.

It deliberately does not identify anything; see bench_mpc.py for the comparison.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

_GAUSS = math.sqrt(-2.0 * math.log(0.1))


@dataclass(frozen=True)
class CartpoleParams:
    """Planning model parameters (SI)."""

    mc: float  # cart mass (kg)
    mp: float  # pole mass (kg)
    l: float  # hinge to pole COM (m)
    I: float  # pole inertia about its COM, about the hinge axis (kg m^2)
    bc: float = 0.0  # slider damping (N s/m)
    bp: float = 0.0  # hinge damping (N m s/rad)
    g: float = 9.81
    theta_up: float = 0.0  # the URDF hinge angle at which the pole points up (rad)
    slider_world: tuple[float, float, float] = (1.0, 0.0, 0.0)  # slider axis, world
    hinge_world: tuple[float, float, float] = (0.0, 1.0, 0.0)  # hinge axis, world
    slider: str = "slider"  # URDF joint names
    hinge: str = "hinge"


@dataclass(frozen=True)
class MPPIConfig:
    """Settings of the MPPI controller and the episode."""

    samples: int = 200  # sampled control sequences per step
    horizon: int = 60  # planning steps
    dt: float = 0.05  # control period (s)
    substeps: int = 5  # Euler substeps of the planning model per control period
    noise: float = 1.0  # std of the sampled normalised actions
    noise_correlation: float = 0.8  # AR(1) coefficient of the sampled noise over the horizon (0: white)
    lam: float = 1.0  # MPPI temperature (cost units: summed negative reward)
    max_force: float = 10.0  # N at |u| = 1
    steps: int = 100  # control steps per episode (5 s)


def cartpole_joints(path: str) -> tuple[str, str]:
    """(slider, hinge): the URDF's only prismatic joint and only revolute/continuous joint."""
    import xml.etree.ElementTree as ET

    joints = ET.parse(str(path)).getroot().findall("joint")
    pri = [j.get("name") for j in joints if j.get("type") == "prismatic"]
    rev = [j.get("name") for j in joints if j.get("type") in ("revolute", "continuous")]
    if len(pri) != 1 or len(rev) != 1:
        raise ValueError(f"{path}: not a cartpole (prismatic joints {pri}, revolute joints {rev})")
    return pri[0], rev[0]


def cartpole_from_urdf(path: str) -> CartpoleParams:
    """Cartpole planning parameters of a URDF (via Pinocchio's link inertias and damping)."""
    import pinocchio as pin

    slider, hinge = cartpole_joints(path)
    model = pin.buildModelFromUrdf(str(path))
    js, jh = model.getJointId(slider), model.getJointId(hinge)
    # all bodies carried by the slider but not by the hinge count as cart
    mc = sum(model.inertias[j].mass for j in range(1, model.njoints) if _descends(model, j, js) and not _descends(model, j, jh))
    Y = model.inertias[jh]
    mp = Y.mass
    axis = _joint_axis(model, jh)
    lever = np.asarray(Y.lever)
    r_perp = lever - axis * (lever @ axis)
    l = float(np.linalg.norm(r_perp))
    I = float(axis @ np.asarray(Y.inertia) @ axis)
    # upright: the hinge angle that puts the COM straight above the hinge (world z)
    data = model.createData()
    pin.forwardKinematics(model, data, pin.neutral(model))
    R_h = data.oMi[jh].rotation
    c_world, a_world = R_h @ r_perp, R_h @ axis
    up = np.array([0.0, 0.0, 1.0]) - a_world * a_world[2]
    up /= np.linalg.norm(up)
    # angle from c_world to up about a_world (positive = right hand about the axis)
    theta_up = math.atan2(float(a_world @ np.cross(c_world, up)), float(c_world @ up))
    bc = float(model.damping[model.joints[js].idx_v])
    bp = float(model.damping[model.joints[jh].idx_v])
    s_world = data.oMi[js].rotation @ _joint_axis(model, js)
    return CartpoleParams(float(mc), float(mp), l, I, bc, bp, 9.81, float(theta_up),
                          tuple(float(v) for v in s_world), tuple(float(v) for v in a_world), slider, hinge)


def _descends(model, j: int, ancestor: int) -> bool:
    while j > 0:
        if j == ancestor:
            return True
        j = model.parents[j]
    return False


def _joint_axis(model, j: int) -> np.ndarray:
    sc = model.joints[j].shortname()  # JointModelRX, JointModelRUBY (continuous), ...Unaligned
    if "Unaligned" in sc:
        return np.asarray(model.joints[j].extract().axis, float)
    return np.eye(3)["XYZ".index(sc[-1])]


def accel(p: CartpoleParams, th: np.ndarray, xd: np.ndarray, thd: np.ndarray, F: np.ndarray, sign: float = 1.0):
    """(x'', th'') of the cartpole; th from upright; all arrays broadcast (batched over samples).

    ``sign`` = +1 when a positive hinge angle moves the pole COM towards +x of the slider.
    """
    s, c = np.sin(th), np.cos(th) * sign
    m11, m12, m22 = p.mc + p.mp, p.mp * p.l * c, p.I + p.mp * p.l**2
    f1 = F - p.bc * xd + p.mp * p.l * s * sign * thd**2
    f2 = -p.bp * thd + p.mp * p.g * p.l * s
    det = m11 * m22 - m12 * m12
    return (m22 * f1 - m12 * f2) / det, (m11 * f2 - m12 * f1) / det


def reward(x, th, thd, u) -> np.ndarray:
    """DeepMind Control Suite cartpole reward (see module docstring); th from upright."""
    upright = (np.cos(th) + 1) / 2
    centered = (1 + np.exp(-0.5 * (x * _GAUSS / 2.0) ** 2)) / 2
    small_control = (4 + np.maximum(0.0, 1 - u**2)) / 5
    small_velocity = (1 + np.exp(-0.5 * (thd * _GAUSS / 5.0) ** 2)) / 2
    return upright * centered * small_control * small_velocity


class MPPI:
    """MPPI over a vectorised cartpole model; ``act(state) -> u`` in [-1, 1]."""

    def __init__(self, params: CartpoleParams, cfg: MPPIConfig, sign: float = 1.0, seed: int = 0):
        self.p, self.cfg, self.sign = params, cfg, sign
        self.rng = np.random.default_rng(seed)
        self.nominal = np.zeros(cfg.horizon)

    def rollout_cost(self, state: np.ndarray, U: np.ndarray) -> np.ndarray:
        """state (4,) = x, th (from upright), xd, thd; U (S, H) -> cost (S,)."""
        cfg, p = self.cfg, self.p
        S = U.shape[0]
        x, th, xd, thd = (np.full(S, v) for v in state)
        h = cfg.dt / cfg.substeps
        cost = np.zeros(S)
        for k in range(cfg.horizon):
            F = U[:, k] * cfg.max_force
            for _ in range(cfg.substeps):
                xdd, thdd = accel(p, th, xd, thd, F, self.sign)
                xd, thd = xd + h * xdd, thd + h * thdd  # semi-implicit Euler
                x, th = x + h * xd, th + h * thd
            cost -= reward(x, th, thd, U[:, k])
        return cost

    def act(self, state: np.ndarray) -> float:
        cfg = self.cfg
        white = self.rng.normal(0.0, cfg.noise, (cfg.samples, cfg.horizon))
        eps = np.empty_like(white)  # AR(1) noise: smooth pushes, not chatter, explore the long horizon
        eps[:, 0] = white[:, 0]
        b = cfg.noise_correlation
        for k in range(1, cfg.horizon):
            eps[:, k] = b * eps[:, k - 1] + math.sqrt(1 - b * b) * white[:, k]
        U = np.clip(self.nominal[None] + eps, -1.0, 1.0)
        U[0] = self.nominal  # keep the warm start as one candidate
        cost = self.rollout_cost(state, U)
        w = np.exp(-(cost - cost.min()) / cfg.lam)
        w /= w.sum()
        self.nominal = np.clip(w @ U, -1.0, 1.0)
        u = float(self.nominal[0])
        self.nominal = np.concatenate([self.nominal[1:], self.nominal[-1:]])
        return u


class BulletCartpole:
    """The true system: a cartpole URDF in PyBullet, default motors off, force on the slider."""

    def __init__(self, urdf_path: str, slider: str = "slider", hinge: str = "hinge", sim_hz: float = 960.0):
        import pybullet as pb

        self.pb = pb
        self.cid = pb.connect(pb.DIRECT)
        pb.setGravity(0, 0, -9.81, physicsClientId=self.cid)
        pb.setTimeStep(1.0 / sim_hz, physicsClientId=self.cid)
        self.sim_hz = sim_hz
        self.rid = pb.loadURDF(str(urdf_path), useFixedBase=True, flags=pb.URDF_USE_INERTIA_FROM_FILE,
                               physicsClientId=self.cid)
        names = {pb.getJointInfo(self.rid, i, physicsClientId=self.cid)[1].decode(): i
                 for i in range(pb.getNumJoints(self.rid, physicsClientId=self.cid))}
        self.js, self.jh = names[slider], names[hinge]
        for i in range(-1, pb.getNumJoints(self.rid, physicsClientId=self.cid)):
            pb.changeDynamics(self.rid, i, linearDamping=0.0, angularDamping=0.0, physicsClientId=self.cid)
        for j in (self.js, self.jh):
            info = pb.getJointInfo(self.rid, j, physicsClientId=self.cid)
            pb.changeDynamics(self.rid, j, jointDamping=info[6], physicsClientId=self.cid)
            pb.changeDynamics(self.rid, j, jointLowerLimit=-1e3, jointUpperLimit=1e3, physicsClientId=self.cid)
            pb.setJointMotorControl2(self.rid, j, pb.VELOCITY_CONTROL, force=0.0, physicsClientId=self.cid)

    def reset(self, x: float, th: float, xd: float, thd: float) -> None:
        self.pb.resetJointState(self.rid, self.js, x, xd, physicsClientId=self.cid)
        self.pb.resetJointState(self.rid, self.jh, th, thd, physicsClientId=self.cid)

    def state(self) -> np.ndarray:
        (x, xd, *_), (th, thd, *_) = self.pb.getJointStates(self.rid, [self.js, self.jh], physicsClientId=self.cid)
        return np.array([x, th, xd, thd])

    def step(self, force: float, dt: float) -> None:
        for _ in range(max(1, int(round(dt * self.sim_hz)))):
            self.pb.setJointMotorControl2(self.rid, self.js, self.pb.TORQUE_CONTROL, force=force, physicsClientId=self.cid)
            self.pb.stepSimulation(physicsClientId=self.cid)

    def close(self) -> None:
        self.pb.disconnect(self.cid)


def hinge_sign(p: CartpoleParams) -> float:
    """+1 if increasing the hinge angle at upright moves the pole COM towards +slider, else -1."""
    a, sl = np.asarray(p.hinge_world), np.asarray(p.slider_world)
    return 1.0 if np.cross(a, [0.0, 0.0, 1.0]) @ sl > 0 else -1.0


def episode(plan_urdf: str, true_urdf: str, start: tuple[float, float, float, float], cfg: MPPIConfig,
            seed: int = 0) -> float:
    """Mean reward of one MPPI episode planned on ``plan_urdf``, executed on ``true_urdf`` (PyBullet).

    start = (x, th from upright, xd, thd) of the true system in its own joint coordinates.
    The measured true state is handed to the planner in the planning model's coordinates
    (axes may point the other way in an inferred model), and its force back.
    """
    plan, true = cartpole_from_urdf(plan_urdf), cartpole_from_urdf(true_urdf)
    sx = 1.0 if np.dot(plan.slider_world, true.slider_world) > 0 else -1.0
    sth = 1.0 if np.dot(plan.hinge_world, true.hinge_world) > 0 else -1.0
    ctrl = MPPI(plan, cfg, hinge_sign(plan), seed)
    sys = BulletCartpole(true_urdf, true.slider, true.hinge)
    try:
        x, th, xd, thd = start
        sys.reset(x, th + true.theta_up, xd, thd)
        total = 0.0
        for _ in range(cfg.steps):
            x, th, xd, thd = sys.state()
            th = _wrap(th - true.theta_up)
            u = sx * ctrl.act(np.array([sx * x, sth * th, sx * xd, sth * thd]))
            sys.step(u * cfg.max_force, cfg.dt)
            x, th, xd, thd = sys.state()
            total += float(reward(x, _wrap(th - true.theta_up), thd, u))
        return total / cfg.steps
    finally:
        sys.close()


def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi
