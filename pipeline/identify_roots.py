"""Identify for floating and planar roots: a free or planar root joint, joints below it,
gravity, and penalty contact with a floor plane when the tracks show one.

State and observation. The simulator's state is the model's (q, qd) (``models.dynamics``):
a free root's q is (x, y, z, qx, qy, qz, qw) of the root body's frame-0-aligned frame,
i.e. the position change of the root's tracked origin since frame 0 (m, world) and the
rotation R_t R_0^T (xyzw); its qd the linear and angular velocity in that moving frame.
A planar root's q is (x, y, theta) in its plane. Joints below follow as in
``identify.joint_trajectory``. The likelihood compares every q column (quaternion
components included, made sign-continuous over the clip) with the tracked one, each
with its own noise std from the tracks (``identify.track_noise``).

The floor (``floor_plane``). A plane z = h where the tracks' lowest body point (per frame,
the lowest of all bodies' contact points) comes to a common height: when some height is
held within ``floor_tolerance`` in at least ``FLOOR_FRAMES`` frames (resting, sliding)
with at most max(2 ``FLOOR_FRAMES``, 10 %) of the frames below it, h is the median height
of the frames within tolerance of the level held in the most frames (the lowest of ties;
a few frames tracked below the floor do not move it); otherwise h is the lowest point
reached, and the floor counts as seen only when the lowest point bounces there: an interior
local minimum with upward acceleration within the tolerance plus the frame's descent of h
(a body in free flight has no interior minimum of its centre's height). ``floor="on"`` forces the plane, ``"off"`` disables it; ``floor_height`` (a known
world frame) replaces h. The first contact is the first frame whose lowest point is within
the tolerance plus one frame's descent of h.

The fit (``flight_prefit``). Start state, masses and joint damping are first fitted by
least squares (``models.inference.least_squares``) on the frames before the first contact
(the free flight: smooth and well posed); the contact parameters are then searched by
``identify.inference.method`` from that start state with those values held (``extra["flight_fit"]``).

Identified quantities. Gravity does not depend on mass, and the penalty contact force
scales with the contact stiffness, so the overall mass scale is not observable: the root
body's mass is anchored (``identify.bounds.masses`` if given, else volume x ``density_anchor``)
and stays out of the fitted parameters (it is written to the estimate and named under
``extra["anchored"]``); masses of bodies below the root are fitted within the density
limits (their ratio to the root's shapes the motion in flight). Fitted as well: joint
damping of the joints below, and with a floor ``floor.friction`` (Coulomb mu between
parts and floor), ``contact.damping`` (Hunt-Crossley, s/m) and ``contact.stiffness``
(N/m per contact point). The posterior also carries ``floor.restitution``, derived per
particle from the contact parameters: the rebound/impact speed ratio of a point hitting
the penalty floor at the clip's observed impact speed (``restitution``). Masses and
damping fitted in flight scale with the anchor: thrown's truth (0.8 / 0.25 kg, 0.002 N m s)
reads 1.568 / 0.49 kg, 0.0039 N m s at the anchor 1.568 kg.
The penalty stiffness is a simulation device for a rigid floor; ``floor.stiffness`` /
``floor.damping`` (which make forecast's PyBullet floor compliant) are not written.
The penalty model's friction and restitution are biased against PyBullet's rigid contacts,
so ``finish`` also calibrates them in PyBullet (``identify_floor``) for the exported
twin: ``extra["floor_bullet"]``.

Planar roots rest on the floor through their joint (it absorbs the weight, and would leave
the penalty normal force at 0): their lowest contact points are set at the depth where
their springs carry the tree's weight (``_footprint``), so ``floor.friction`` (mu) acts at
each point against its own slip, as PyBullet's box corners do. Restitution and contact
stiffness are not observable there and not fitted. Without a bouncing contact (planar
root, or no floor) the least-squares pre-fit runs on the whole clip (``flight_prefit``).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.spatial.transform import Rotation

from vid2sim.datasets.shapes import Shape
from vid2sim.models.geometry import plane_basis

log = logging.getLogger(__name__)
ROOT_TYPES = ("free", "planar")
FLOOR_FRAMES = 5          # frames at a common low height that make a resting/sliding contact (1/6 s at 30 fps;
                          # 3 also took three touches of a tumbling body, 18 mm above the floor, for one)
CONTACT_STIFFNESS = (5e3, 2e5)   # N/m per contact point: penalty stiffness limits for a rigid floor
CONTACT_DAMPING = (0.0, 5.0)     # s/m, Hunt-Crossley damping limits (restitution ~1 -> ~0 at 2-4 m/s)
FRICTION_MAX = 1.5               # Coulomb mu upper limit
PLANAR_STIFFNESS = 1e4           # N/m per contact point of a planar root (its depth is fixed: only mu x weight matters)
CONTACT_HZ = 960.0               # simulator rate with floor contact (substeps=0): the stiffest contact of a
                                 # 0.25-kg capsule end at 480 Hz diverged (semi-implicit Euler, omega dt > 2)


def root_joint(art):
    """The articulation's free/planar joint to the world, or None (fixed base). Raises
    NotImplementedError for two floating roots, or a floating root beside a moving joint to the world
    (two trees: the world-hinged one is no part of the floating tree)."""
    roots = [j for j in art.joints if j.parent == "world" and j.type in ROOT_TYPES]
    if len(roots) > 1:
        raise NotImplementedError(f"identify: {len(roots)} floating roots ({', '.join(j.name for j in roots)}); "
                                  "only one floating tree is supported")
    beside = [f"{j.name} ({j.type})" for j in art.joints if roots and j.parent == "world" and j is not roots[0]
              and j.type != "fixed"]
    if beside:
        raise NotImplementedError(f"identify: a {roots[0].type} root ({roots[0].name}) beside joint(s) to the world "
                                  f"{', '.join(beside)}: two trees; only one floating tree is supported")
    return roots[0] if roots else None


# ----------------------------------------------------------------------------- geometry


def _directions() -> np.ndarray:
    """26 unit directions: the 3x3x3 grid without its centre, normalised."""
    g = np.array([[x, y, z] for x in (-1, 0, 1) for y in (-1, 0, 1) for z in (-1, 0, 1) if (x, y, z) != (0, 0, 0)], float)
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def surface_points(shape: Shape) -> np.ndarray:
    """(P, 3) contact points on a shape's surface in its body frame (m): box corners, sphere
    and capsule end-sphere points in 26 directions, cylinder rims (8 per end)."""
    if shape.type == "box":
        sx, sy, sz = np.asarray(shape.size, float) / 2
        return np.array([[x, y, z] for x in (-sx, sx) for y in (-sy, sy) for z in (-sz, sz)])
    d = _directions()
    if shape.type == "sphere":
        return shape.radius * d
    if shape.type == "capsule":
        h = shape.length / 2
        return np.concatenate([shape.radius * d + [0, 0, h], shape.radius * d - [0, 0, h]])
    if shape.type == "cylinder":
        a = 2 * math.pi * np.arange(8) / 8
        ring = np.stack([shape.radius * np.cos(a), shape.radius * np.sin(a)], 1)
        h = shape.length / 2
        return np.concatenate([np.column_stack([ring, np.full(8, z)]) for z in (h, -h)])
    raise ValueError(f"identify: shape {shape.name!r} ({shape.type}) has no contact points (meshes are not supported)")


def lowest_points(W: np.ndarray, pts: list[np.ndarray]) -> np.ndarray:
    """W (T, M, 4, 4) body poses, pts: M arrays (P_m, 3) in body frames -> (T,) the lowest
    world z of any body's points per frame."""
    low = [np.einsum("tij,pj->tpi", W[:, m, :3, :3], p)[..., 2].min(1) + W[:, m, 2, 3] for m, p in enumerate(pts)]
    return np.min(np.stack(low, 1), 1)


@dataclass(frozen=True)
class FloorEstimate:
    """height: floor plane z (m, world); seen: whether the tracks show contact; frames: frames
    within tolerance of it; impact_speed: downward speed (m/s) of the lowest point just before
    it first reaches the floor (0 when it starts there); reason: a short explanation."""

    height: float
    seen: bool
    frames: int
    impact_speed: float
    reason: str
    first: int = 0   # first frame whose lowest point is within the tolerance (+ one frame's descent) of the floor


def floor_plane(low: np.ndarray, fps: float, tolerance: float) -> FloorEstimate:
    """The floor rule of the module docstring from the per-frame lowest point ``low`` (T,)."""
    counts = (np.abs(low[:, None] - low[None, :]) <= tolerance).sum(1)     # frames within tolerance of each
    below = (low[None, :] < low[:, None] - tolerance).sum(1)                # frames below each
    counts = np.where(below <= max(2 * FLOOR_FRAMES, len(low) // 10), counts, 0)
    level = counts.max() >= FLOOR_FRAMES
    # the most populated level (ties: the lowest), robust to a few frames tracked below the floor
    h = float(low[counts == counts.max()].min()) if level else float(low.min())
    h = float(np.median(low[np.abs(low - h) <= tolerance])) if level else h
    near = np.abs(low - h) <= tolerance
    # bounces: interior local minima with upward acceleration that reach the lowest height, within
    # the tolerance plus the descent into them (a minimum between frames is not sampled)
    acc = np.diff(low, 2) * fps * fps
    mid = low[1:-1]
    hits = (mid <= low[:-2]) & (mid <= low[2:]) & (acc > 0.5 * 9.81) & \
        (mid <= h + tolerance + np.maximum(low[:-2] - mid, 0.0))
    bounce = bool(hits.any())
    k = int(np.argmax(hits)) + 1
    vz = np.gradient(low, 1.0 / fps)
    # within the tolerance plus one frame's descent: contact may begin before the next frame
    first = int(np.argmax(low <= h + tolerance + np.maximum(-vz, 0.0) / fps))
    before = vz[max(first - 3, 0):first + 1]
    speed = float(max(-before.min(), 0.0)) if first > 0 else 0.0
    if level:
        return FloorEstimate(h, True, int(near.sum()), speed, f"lowest point within {tolerance * 1e3:.0f} mm of "
                             f"z={h:.4f} m in {int(near.sum())} frames", first)
    if bounce:
        return FloorEstimate(h, True, int(near.sum()), speed, f"lowest point bounces at z={h:.4f} m (frame {k})",
                             first)
    return FloorEstimate(h, False, int(near.sum()), 0.0, f"lowest point z={h:.4f} m reached in {int(near.sum())} "
                         "frame(s) without a bounce: no floor contact")


def restitution(damping, speed: float, steps: int = 4000) -> np.ndarray:
    """Coefficient of restitution of the Hunt-Crossley floor f = k x (1 + d xdot) (clipped at
    0) for a point hitting it at ``speed`` m/s, without gravity: rebound / impact speed. In
    the units x = speed sqrt(m/k) xi, t = sqrt(m/k) tau the contact obeys
    xi'' = -xi (1 + d speed xi'), so the ratio depends on d x speed only (not on k or the
    mass). damping d: array (s/m) -> array of the same shape; NaN when speed <= 0.
    Semi-implicit Euler over the contact in ``steps`` steps of tau."""
    c = np.asarray(damping, float) * speed
    if speed <= 0:
        return np.full(c.shape, np.nan)
    dtau = 4 * math.pi / steps        # an undamped contact lasts pi
    xi, u = np.zeros(c.shape), np.ones(c.shape)
    for _ in range(steps):
        u = np.where(xi >= 0, u - dtau * np.maximum(xi * (1 + c * u), 0.0), u)
        xi = xi + dtau * u
        if np.all(xi < 0):
            break
    return np.clip(-u, 0.0, 1.0)


# ----------------------------------------------------------------------------- trajectories


def continuous_quaternions(quat: np.ndarray) -> np.ndarray:
    """(T, 4) xyzw quaternions with signs flipped so that consecutive ones have a positive dot product."""
    out = np.array(quat, float)
    for t in range(1, len(out)):
        if out[t] @ out[t - 1] < 0:
            out[t] = -out[t]
    return out


def root_coordinates(root_type: str, axis, root_pose: np.ndarray) -> np.ndarray:
    """The root joint's model q over time from ``root_pose`` (T, 7: world xyz + xyzw of the root
    link, joint_positions.npz): free -> (T, 7) position change since frame 0 and the
    quaternion of R_t R_0^T; planar -> (T, 3) x, y along the plane basis
    (``models.geometry.plane_basis``) and the unwrapped
    angle about the plane normal ``axis``."""
    p = root_pose[:, :3] - root_pose[:1, :3]
    rel = Rotation.from_quat(root_pose[:, 3:]) * Rotation.from_quat(root_pose[0, 3:]).inv()
    if root_type == "free":
        return np.concatenate([p, continuous_quaternions(rel.as_quat())], 1)
    n = np.asarray(axis, float) / np.linalg.norm(axis)
    t1, t2 = plane_basis(n)
    theta = np.unwrap(rel.as_rotvec() @ n)
    return np.column_stack([p @ t1, p @ t2, theta])


def root_velocities(root_type: str, qroot: np.ndarray, fps: float) -> np.ndarray:
    """Finite-difference generalized velocities of the root (T, nv_root) in the model's
    convention: free -> linear then angular velocity in the moving (child) frame; planar ->
    vx, vy in the child frame (rotated by theta) and omega."""
    dt = 1.0 / fps
    if root_type == "planar":
        d = np.gradient(qroot, dt, axis=0, edge_order=2)
        c, s = np.cos(qroot[:, 2]), np.sin(qroot[:, 2])
        return np.column_stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1], d[:, 2]])
    v_world = np.gradient(qroot[:, :3], dt, axis=0, edge_order=2)
    R = Rotation.from_quat(qroot[:, 3:])
    T = len(qroot)
    w_world = np.zeros((T, 3))
    for t in range(T):
        a, b = max(t - 1, 0), min(t + 1, T - 1)
        w_world[t] = (R[b] * R[a].inv()).as_rotvec() / ((b - a) * dt)
    return np.concatenate([R.inv().apply(v_world), R.inv().apply(w_world)], 1)


# ----------------------------------------------------------------------------- simulator


def _twin_simulator():
    from vid2sim.pipeline.identify import TwinSimulator

    class RootSimulator(TwinSimulator):
        """``TwinSimulator`` plus the floor's contact parameters (``floor.friction`` -> Coulomb mu,
        ``contact.damping``, ``contact.stiffness``) and unit quaternions in start states (an
        optimiser perturbs their components independently)."""

        fixed: dict | None = None   # joint parameters ("<dof>.damping"/".friction") held at these values

        def model_for(self, theta: torch.Tensor):
            m = super().model_for(theta)
            if self.fixed:
                m = m.with_params({n: torch.full((theta.shape[0],), v, dtype=theta.dtype)
                                   for n, v in self.fixed.items() if n not in self.names})
            cols = {n: theta[:, i] for i, n in enumerate(self.names)}
            fields = {"floor.friction": "contact_friction", "contact.damping": "contact_damping",
                      "contact.stiffness": "contact_stiffness"}
            return m.replace(**{f: cols[n].to(m.dtype) for n, f in fields.items() if n in cols})

        def simulate(self, theta: torch.Tensor, start: torch.Tensor, steps: int, nets: tuple = ()) -> torch.Tensor:
            parts, o = [], 0
            for i, t in enumerate(self.model.joint_types):
                s = self.model.q_slice(i)
                if t == "free":
                    quat = start[:, s.start + 3:s.stop]
                    parts += [start[:, o:s.start + 3], quat / quat.norm(dim=-1, keepdim=True).clamp(min=1e-9)]
                    o = s.stop
            parts.append(start[:, o:])
            return super().simulate(theta, torch.cat(parts, -1), steps, nets)

    return RootSimulator


@dataclass
class RootProblem:
    """What ``identify.run`` needs for a floating/planar root: the simulator, the observed q
    (T, nq) in the model's q order (relative to frame 0), a state guess (T, nq + nv), per-column
    noise std (nq,), the floor and what the posterior should say (``extra``)."""

    sim: object
    q: np.ndarray
    guess: np.ndarray
    sigma: np.ndarray
    floor: FloorEstimate | None
    anchored: dict
    extra: dict
    problem: object = None  # the inference Problem (identify.floating_setup)
    held: dict = field(default_factory=dict)  # parameters fitted before the main fit and held in it (flight_prefit)
    candidate: tuple | None = None  # (values, log-likelihood, start state) of the least squares on the main problem
    inputs: tuple | None = None  # (art, jp, poses, shapes, fps) as build_root_problem got them (identify_floor)
    pusher: object = None  # models.bullet.Tip of a known pusher (identify_push): its twin calibrated in PyBullet

    def finish(self, post):
        """``post`` with the anchored masses added to its estimate (they are not fitted names) and,
        with a floor hit at a known speed, the derived ``floor.restitution`` as one more
        parameter (``restitution`` of each particle's ``contact.damping``; limits [0, 1]), and
        ``extra["floor_bullet"]``: the floor friction and restitution of the PyBullet twin
        (``identify_floor.calibrate``), which forecast's floor uses; with a known pusher, the floor and
        tip friction of the PyBullet twin (``identify_floor.calibrate_push``), and the masses of the parts
        below the root and the joints' damping where that search refitted them in PyBullet and kept its result
        (they replace the penalty fit's in the estimate, which export and forecast use)."""
        from vid2sim.pipeline.artifacts import Posterior

        names, limits, est, X = list(post.names), dict(post.limits), dict(post.estimate), post.particles
        extra = dict(post.extra)
        ll = post.log_likelihood
        if self.candidate is not None and self.candidate[1] > ll:   # least squares beat the search: keep it
            values, ll, extra["start_state"] = self.candidate
            est.update(values)
            X = np.vstack([[values[n] for n in names], X])
            extra["particle_log_likelihood"] = [ll] + list(extra.get("particle_log_likelihood", []))
            extra["estimate_from"] = "flight least squares (higher log-likelihood than the main fit's best)"
            log.info("identify: the flight least-squares fit (log-likelihood %.1f) is kept over the main fit's %.1f",
                     ll, post.log_likelihood)
        speed = self.floor.impact_speed if self.floor is not None else 0.0
        if "contact.damping" in names and speed > 0:
            d = X[:, names.index("contact.damping")]
            X = np.column_stack([X, restitution(d, speed)])
            est["floor.restitution"] = float(restitution(np.array([est["contact.damping"]]), speed)[0])
            names.append("floor.restitution")
            limits["floor.restitution"] = (0.0, 1.0)
            extra["derived"] = {"floor.restitution": f"Hunt-Crossley rebound at the impact speed {speed:.3f} m/s"}
        est.update(self.anchored)
        est.update(self.held)
        out = Posterior(names, limits, est, X, post.method, ll, extra)
        if speed > 0 and "contact.damping" in names and self.inputs is not None:
            from vid2sim.pipeline.identify_floor import calibrate

            fit = calibrate(*self.inputs, out, self.floor.first)
            if fit is not None:
                out = Posterior(names, limits, est, X, post.method, ll, dict(extra, floor_bullet=fit))
        if self.pusher is not None and self.inputs is not None:   # pushed: floor and tip friction of the PyBullet twin
            from vid2sim.pipeline.identify_floor import calibrate_push

            fit = calibrate_push(*self.inputs, out, self.pusher)
            if fit is not None:   # the twin's masses and joint damping too where PyBullet refitted them (several parts)
                if fit["kept"] == "searched" and "masses" in fit:
                    est = dict(est, **fit["masses"], **fit.get("dampings", {}))
                out = Posterior(names, limits, est, X, post.method, ll, dict(extra, floor_bullet=fit))
        return out


def _body_points(model, shapes: dict[str, Shape], W0: dict[str, np.ndarray]) -> tuple[list[int], np.ndarray]:
    """Contact points of every body in the model's body frames: (body index per point, (P, 3))."""
    idx, pts = [], []
    for i, b in enumerate(model.body_names):
        s = surface_points(shapes[b])
        pts.append(s @ W0[b][:3, :3].T + model.com[0, i].numpy())
        idx += [i] * len(s)
    return idx, np.concatenate(pts)


def build_root_problem(cfg, art, jp, poses, shapes: dict[str, Shape], fps: float) -> RootProblem:
    """The simulator, parameters and observations of an articulation with a free or planar root."""
    from dataclasses import replace

    from vid2sim.models.dynamics import model_from_articulation
    from vid2sim.pipeline.identify import compile_for, joint_trajectory, observation_sigma, substeps_for

    original, root = art, root_joint(art)
    bad = [f"{j.name} ({j.type})" for j in art.joints if j is not root and j.type not in ("revolute", "prismatic", "fixed")]
    if bad:
        raise NotImplementedError(f"identify: joints {bad} below or beside a floating root are not supported yet")
    if jp.root_pose is None:
        raise ValueError(f"identify: joint_positions has no root_pose for the {root.type} root joint {root.name!r}")
    shape_of = dict(zip(poses.body_names, poses.shape_names))
    missing = [b for b in art.bodies if shape_of.get(b) not in shapes]
    if missing:
        raise ValueError(f"identify: bodies {missing} have no shape; masses and contact points come from shapes")
    body_shapes = {b: shapes[shape_of[b]] for b in art.bodies}
    W = poses.world_from_body[:, [poses.body_names.index(b) for b in art.bodies]]
    frames = min(cfg.frames, poses.num_frames) if cfg.frames else poses.num_frames
    W, root_pose = W[:frames], jp.root_pose[:frames]
    T0 = {b: W[0, i] for i, b in enumerate(art.bodies)}
    # the planar joint's pivot at the root's tracked origin, so that its x, y are the origin's
    joints = [replace(j, pivot=tuple(T0[j.child][:3, 3])) if j is root else j for j in art.joints]
    art = replace(art, joints=joints)

    floor = None
    if cfg.contact.floor != "off":
        low = lowest_points(W, [surface_points(body_shapes[b]) for b in art.bodies])
        floor = floor_plane(low, fps, cfg.contact.floor_tolerance)
        if cfg.contact.floor == "on" and not floor.seen:
            floor = replace(floor, seen=True, reason=floor.reason + "; floor forced on")
        if cfg.contact.floor_height is not None:
            floor = replace(floor, height=float(cfg.contact.floor_height))
        log.info("identify: floor %s (%s)", f"z = {floor.height:.4f} m" if floor.seen else "not seen", floor.reason)
        if not floor.seen:
            floor = None
    anchored = {}
    root_kg = cfg.bounds.masses.get(root.child)
    anchored[f"{root.child}.mass"] = (float(root_kg) if root_kg
                                      else float(body_shapes[root.child].volume() * cfg.bounds.density_anchor))
    masses = {b: anchored.get(f"{b}.mass", body_shapes[b].volume() * cfg.bounds.density_anchor) for b in art.bodies}
    model = model_from_articulation(art, T0, masses=masses, shapes=body_shapes, batch=1)
    if floor is not None:
        idx, pts = _body_points(model, body_shapes, T0)
        if root.type == "planar":
            idx, pts = _footprint(model, idx, pts, T0, floor.height, cfg.contact.floor_tolerance)
        model = model.replace(ground=True, ground_height=floor.height, contact_body=tuple(idx),
                              contact_points=torch.as_tensor(pts, dtype=model.dtype))
        if root.type == "planar":
            model = model.replace(contact_stiffness=torch.full((1,), PLANAR_STIFFNESS, dtype=model.dtype),
                                  contact_damping=torch.zeros(1, dtype=model.dtype))
    names, lo, hi = _parameters(cfg, model, body_shapes, anchored, floor is not None, root.type == "free")
    unit = model.inertia / model.mass[:, :, None, None]
    sub = substeps_for(cfg, fps)
    if model.ground and cfg.shooting.substeps == 0:   # stiff penalty contacts need the finer step
        sub = max(sub, math.ceil(CONTACT_HZ / fps - 1e-9))
    sim = _twin_simulator()(names, np.array(lo), np.array(hi), model, unit, list(model.dof_names),
                            1.0 / (fps * sub), sub, compile_for(cfg, sub, frames))

    qroot = root_coordinates(root.type, root.axis, root_pose)
    dofs = [d for d in model.dof_names if not d.startswith(f"{root.name}/")]
    qj = joint_trajectory(jp, dofs, frames)
    q = np.concatenate([qroot, qj], 1)
    qd = np.concatenate([root_velocities(root.type, qroot, fps), np.gradient(qj, 1.0 / fps, axis=0, edge_order=2)
                         if len(qj) > 2 else np.zeros_like(qj)], 1)
    sigma = observation_sigma(cfg, q)
    extra = {"root": {"joint": root.name, "type": root.type, "body": root.child},
             "anchored": anchored, "q_names": _q_names(model),
             "floor": None if floor is None else {"height": floor.height, "reason": floor.reason,
                                                   "impact_speed": floor.impact_speed}}
    log.info("identify: %s root %r; mass scale not observable: %s anchored (not fitted)", root.type, root.name,
             ", ".join(f"{k} = {v:.4g} kg" for k, v in anchored.items()))
    return RootProblem(sim, q, np.concatenate([q, qd], 1), sigma, floor, anchored, extra,
                       inputs=(original, jp, poses.head(frames), shapes, fps))   # the fitted frames only


def _q_names(model) -> list[str]:
    out = []
    for name, t in zip(model.joint_names, model.joint_types):
        out += {"free": [f"{name}/{c}" for c in ("x", "y", "z", "qx", "qy", "qz", "qw")],
                "planar": [f"{name}/{c}" for c in ("x", "y", "theta")], "fixed": []}.get(t, [name])
    return out


def _footprint(model, idx: list[int], pts: np.ndarray, T0: dict, height: float, tolerance: float):
    """A planar tree's floor contacts: the points (model body frames, world-aligned at frame
    0) within ``tolerance`` of the lowest one, moved to the common depth below the floor
    z = ``height`` at which their penalty springs (``PLANAR_STIFFNESS``) carry the tree's
    weight at its build masses (the planar joint keeps that depth), so that the floor
    friction mu x the normal force acts at each point along its own slip.
    -> (body index per point, (P, 3))."""
    idx = np.asarray(idx)
    origin_z = np.array([T0[model.body_names[i]][2, 3] - float(model.com[0, i, 2]) for i in idx])
    z = origin_z + pts[:, 2]
    on = z <= z.min() + tolerance
    depth = float(model.mass.sum()) * float(-model.gravity[0, 2]) / (on.sum() * PLANAR_STIFFNESS)
    out = pts[on].copy()
    out[:, 2] = height - depth - origin_z[on]
    return idx[on].tolist(), out


def _parameters(cfg, model, shapes: dict[str, Shape], anchored: dict, contact: bool, bounce: bool = True):
    """Names and limits: masses of the non-anchored bodies (density limits x volume), damping of
    the 1-dof joints (and friction with ``estimate_friction``), the floor's contact parameters."""
    from vid2sim.pipeline.identify import joint_parameters

    names, lo, hi = [], [], []
    for b in model.body_names:
        if f"{b}.mass" in anchored:
            continue
        vol = float(shapes[b].volume())
        kg = cfg.bounds.masses.get(b)
        names.append(f"{b}.mass")
        lo.append(kg * 0.999 if kg else vol * cfg.bounds.density_min)
        hi.append(kg * 1.001 if kg else vol * cfg.bounds.density_max)
    root, kg = next(iter(anchored.items()), (None, None))   # damping limits scale with the anchored mass
    nominal = shapes[root.rsplit(".", 1)[0]].volume() * cfg.bounds.density_anchor if root else 0.0
    joint_parameters(cfg, model, names, lo, hi, scale=kg / nominal if nominal > 0 else 1.0)
    if contact:   # bounce: a free root's normal contact (restitution, stiffness) is observable
        names += ["floor.friction", "contact.damping", "contact.stiffness"][:3 if bounce else 1]
        lo += [0.0, CONTACT_DAMPING[0], CONTACT_STIFFNESS[0]][:3 if bounce else 1]
        hi += [FRICTION_MAX, CONTACT_DAMPING[1], CONTACT_STIFFNESS[1]][:3 if bounce else 1]
    return names, lo, hi


FLIGHT_MIN = 3            # frames of free flight before the first contact that pay for a flight pre-fit (position,
                          # velocity and the known acceleration of gravity fix a start state)
FLIGHT_EVALS = 25         # least-squares evaluations (value + Jacobian) of the flight fit, at least
CONTACT_NAMES = ("floor.friction", "contact.damping", "contact.stiffness")


def _problem(sim, names, q: np.ndarray, guess: np.ndarray, sigma: np.ndarray, estimate_start: bool = True):
    from vid2sim.models.inference import Problem

    idx = [sim.names.index(n) for n in names]
    nq = q.shape[1]
    return Problem(list(names), torch.as_tensor(sim.lower[idx]), torch.as_tensor(sim.upper[idx]), sim.simulate,
                   [torch.as_tensor(q, dtype=torch.float64)], [torch.as_tensor(guess, dtype=torch.float64)],
                   observe=lambda s: s[..., :nq], sigma=torch.as_tensor(sigma, dtype=torch.float64),
                   estimate_start=estimate_start)


def _with_names(sim, names: list[str], model=None, fixed: dict | None = None):
    """A copy of the RootSimulator ``sim`` over the parameters ``names`` (limits kept)."""
    from dataclasses import replace

    idx = [sim.names.index(n) for n in names]
    out = replace(sim, names=list(names), lower=sim.lower[idx], upper=sim.upper[idx], model=model or sim.model)
    out.fixed = dict(fixed or {})
    return out


def flight_prefit(cfg, rp: RootProblem) -> None:
    """Fit the start state and the smooth part of the model by least squares first, then set
    ``rp.problem`` to the main fit from that start state (not re-estimated there).

    With penalty contact (a free root over a floor): the least squares run on the free flight
    before the floor is first touched, over the masses and joint parameters, which the main
    fit then holds while it searches the contact parameters. Without penalty contact (no
    floor, or a planar root, whose floor friction is a smooth joint force) they run on the
    whole clip over every parameter, and the main fit searches the same parameters again
    (``finish`` keeps the better of the two). With fewer than ``FLIGHT_MIN`` flight frames
    ``rp.problem`` fits everything, start state included."""
    from vid2sim.models.inference import least_squares

    if not rp.sim.names:
        raise ValueError("identify: nothing to identify: no joints below the floating root and no floor contact "
                         "in the tracks (set identify.contact.floor=on if the floor is touched)")
    smooth = not rp.sim.model.ground or rp.extra["root"]["type"] == "planar"   # no bouncing contact
    names = list(rp.sim.names) if smooth else [n for n in rp.sim.names if n not in CONTACT_NAMES]
    contact = [] if smooth else [n for n in rp.sim.names if n in CONTACT_NAMES]
    k = len(rp.q) if smooth else rp.floor.first
    if k < FLIGHT_MIN:
        rp.problem = _problem(rp.sim, rp.sim.names, rp.q, rp.guess, rp.sigma)
        return
    flight = _with_names(rp.sim, names, model=rp.sim.model if smooth else rp.sim.model.replace(ground=False))
    prob = _problem(flight, names, rp.q[:k], rp.guess[:k], rp.sigma)
    rows = 2 * (len(names) + rp.guess.shape[1]) + 1              # rollouts per Jacobian (central differences)
    res = least_squares(prob, batch=cfg.inference.particles,
                        batches=-(-rows // cfg.inference.particles) * max(FLIGHT_EVALS, cfg.inference.iterations // 4))
    b = res.best
    values = {n: float(v) for n, v in zip(names, res.theta[b])}
    rp.guess = rp.guess.copy()
    rp.guess[0] = res.start[b, 0].numpy()
    log.info("identify: %s (frames 0-%d) fitted first by least squares: log-likelihood %.1f%s",
             "the whole clip" if smooth else "free flight", k - 1, float(res.log_likelihood[b]),
             "".join(f", {n} {v:.4g}" for n, v in values.items()))
    rp.extra["flight_fit"] = {"frames": k, "log_likelihood": float(res.log_likelihood[b]), "estimate": values}
    if smooth:   # (CMA-ES needs two dimensions: with one parameter the start state is searched again)
        rp.problem = _problem(rp.sim, names, rp.q, rp.guess, rp.sigma, estimate_start=len(names) < 2)
        rp.candidate = (values, float(res.log_likelihood[b]), rp.guess[0].tolist())   # k is the whole clip
        return
    masses = rp.sim.model.mass.clone()
    for i, body in enumerate(rp.sim.model.body_names):
        if f"{body}.mass" in values:
            masses[0, i] = values[f"{body}.mass"]
    rp.sim = _with_names(rp.sim, contact, model=rp.sim.model.replace(mass=masses),
                         fixed={n: v for n, v in values.items() if not n.endswith(".mass")})
    rp.problem = _problem(rp.sim, contact, rp.q, rp.guess, rp.sigma, estimate_start=False)
    rp.held.update(values)
    rp.extra["flight_fit"]["note"] = "fitted on the free flight before the first floor contact, then held"
