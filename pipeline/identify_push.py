"""Identify a mechanism pushed by a known actuator (``actuation.npz``, docs/formats.md §1.2).

The pusher is a kinematic body: the first actuator whose shape is a cylinder (a robot's
tip), its axis the cylinder's z axis at frame 0, its centre following the recorded poses
(linear between frames; the last row held past the end). It touches the parts through
the simulator's penalty contact (``models.dynamics.contact``: Hunt-Crossley normal force,
regularised Coulomb friction ``tip.friction`` between the tip and the parts) at points
sampled every ``SIDE_SPACING_M`` along each part's outline in the horizontal plane through
its centre (``side_points``), where a vertical tip meets parts lying on a floor.

It extends ``identify_roots.RootProblem`` (planar or free root, floor friction
``floor.friction``): the simulator's state gets one more column, the time (s) of the
state, so that a rollout started at any frame (a shooting window) replays the pusher from
that frame; observations and noise are the root problem's. Identified besides the root
problem's masses (ratios to the anchored root) and floor friction: ``tip.friction``.

A part moved by a position-controlled tip at a steady push moves alike at any floor mu
(quasi-static: the floor friction scales the part's whole limit surface); where the tip stops
dead and the part slides on alone (``release_windows``), the floor alone slows it, and the
floor mu is profiled there first (``release_profile``): the main fit then searches it only
within that profile's interval, recorded in ``extra["floor_release"]`` ({"windows": []} and a
note where the tip never stopped).

After the fit, the floor and tip friction of the PyBullet twin are searched in PyBullet itself
(``identify_floor.calibrate_push``, held in ``extra["floor_bullet"]``): the penalty law's tip
friction is biased against Bullet's contact (``pushed_box``: 3.0 mm rms over the fitted frames at
the fitted values, 0.16 mm at the calibrated ones). What the URDF cannot hold (the pusher, the
floor and tip friction, the contact model) goes to ``contacts.json`` beside ``model.urdf``
(``write_side_file``; the twin's coefficients, ``twin_friction``); forecast replays
the pusher from the recording's actuation with those coefficients (``forecast_tip``) over
a compliant floor (``floor.stiffness`` = the penalty floor's 1e4 N/m per contact point,
``floor.damping`` half critical for the lightest part: with one and the same fit, the
pushed linkage's twin ended 115 mm / 52 deg off after 1 s on a rigid PyBullet floor and
39 mm / 16 deg on this one).
export places the parts that lie on the floor under a planar root flat on forecast's floor
(``resting_placements``): the twin's contacts then carry each part as the penalty floor's common
depth does, whatever sub-millimetre tilt the tracks give it.
It does not model the pusher's own dynamics, rolling resistance, or part-part contact (nor the
stops that stand for it, such as ``pushed``'s hinges at +-1 rad; the PyBullet twin that
``calibrate_push`` refits has them as URDF limits where export sees them).
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from vid2sim.datasets.shapes import Shape
from vid2sim.models import geometry

log = logging.getLogger(__name__)
SIDE_SPACING_M = 0.003   # contact points along a part's outline: a 15-mm tip pressing 0.3 mm into a flat face
                         # meets a 6-mm chord, so two points at least
TIP_DAMPING = 1.0        # s/m Hunt-Crossley damping of the tip contact (the planar floor's is not felt: its depth is
                         # fixed by the joint)
SLIP_VELOCITY = 1e-2   # m/s, the regularised Coulomb law's slip velocity (floor and tip): f = mu f_n v / sqrt(v^2 + vs^2)
SIDE_FILE = "contacts.json"
RELEASE_TIP_SPEED = 0.05     # m/s: a tip this fast or faster that stops dead can release the part it pushed
RELEASE_STILL = 0.05         # a tip moving at under this fraction of its speed before is standing still
RELEASE_PART_SPEED = 0.3     # the part moved at this fraction of the tip's speed or more as it stopped (it was pushed)
RELEASE_MIN_FRAMES = 4       # frames of a release window at least (the stop frame included)
RELEASE_GRID = np.round(np.arange(0.05, 1.501, 0.05), 3)   # floor mu profiled over the release windows
UNSEEN_SIGMA = 1e3       # rad, the noise std given to a yaw no frame shows (an upright puck's spin): out of the fit
REST_TILT_DEG = 3.0      # deg: a body under a planar root tilted by at most this at frame 0 lies flat on the floor
                         # (``resting_placements``); more is a pose the tracks show, not their error
PUSH_HZ = 480.0          # simulator rate with the pusher: a 0.3-kg box pushed at 0.12 m/s ends within 1.6 mm / 3.0 deg
                         # of PyBullet after 2.5 s, as at 960 Hz (1.9 mm / 3.3 deg), in half the time


def pusher_of(rec) -> tuple[int, Shape] | None:
    """(actuator index, its cylinder Shape) of the recording's pusher, or None."""
    act = getattr(rec, "actuation", None)
    if act is None or not rec.shapes:
        return None
    for a, name in enumerate(act.shapes):
        s = rec.shapes.get(name)
        if s is not None and s.type == "cylinder":
            return a, s
    return None


def side_points(shape: Shape, up_body: np.ndarray) -> np.ndarray:
    """(P, 3) points in the body frame on the outline of ``shape`` cut by the plane through
    its centre perpendicular to ``up_body`` (the world vertical in the body frame), every
    ``SIDE_SPACING_M`` along the outline (rays cast inwards every 0.25 deg, resampled by arc length)."""
    from vid2sim.models.render.primitives import Primitive, ray_hit

    up = np.asarray(up_body, float) / np.linalg.norm(up_body)
    ref = np.array([1.0, 0, 0]) if abs(up[0]) < 0.9 else np.array([0, 1.0, 0])
    e1 = ref - up * (ref @ up)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(up, e1)
    a = np.linspace(0, 2 * math.pi, 1440, endpoint=False)
    d = np.cos(a)[:, None] * e1 + np.sin(a)[:, None] * e2
    reach = float(np.linalg.norm(shape.extents())) + 0.01
    with torch.no_grad():
        s = ray_hit(Primitive.from_shape(shape), torch.as_tensor(d * reach), torch.as_tensor(-d)).numpy()
    ring = d * (reach - s)[:, None]
    seg = np.linalg.norm(np.roll(ring, -1, 0) - ring, axis=1)
    arc = np.concatenate([[0.0], np.cumsum(seg)])
    closed = np.vstack([ring, ring[:1]])
    at = np.arange(0.0, arc[-1], SIDE_SPACING_M)
    return np.stack([np.interp(at, arc, closed[:, k]) for k in range(3)], 1)


def planar_root(art, jp, poses, rec, shapes: dict[str, Shape], tolerance: float = 0.005):
    """(Articulation, JointPositions) with the world joint made ``planar`` (axis world z, pivot
    the root body's frame-0 centre) when the recording has a pusher, the articulation one tree
    hung from the world by a revolute joint about the vertical (within 10 deg), a horizontal
    prismatic, a fixed joint or a planar joint whose normal is off the vertical by up to 10 deg,
    and the tracks rest on a floor (``identify_roots.floor_plane`` within ``tolerance`` m);
    else None. A part pushed across a floor is pinned by nothing: over a short clip its
    friction-held pivot looks like a hinge to the world, which cannot slide when the pusher
    pushes harder. The plane is the floor's (identify's floor is z = h): a plane tilted by
    0.6 deg (fitted to a box's tracks) lifts a part 1.6 mm off a floor over 15 cm of slide,
    30 times the depth at which its contacts carry it; hinges below it within 10 deg of the
    vertical are made vertical for the same reason (``_upright``)."""
    from vid2sim.pipeline import export
    from vid2sim.pipeline.artifacts import JointPositions
    from vid2sim.pipeline.identify_roots import floor_plane, lowest_points, surface_points

    if pusher_of(rec) is None:
        return None
    roots = [j for j in art.joints if j.parent == "world"]
    if len(roots) != 1 or roots[0].type not in ("revolute", "prismatic", "fixed", "planar"):
        return None
    j = roots[0]
    vertical = abs(float(np.asarray(j.axis) @ [0, 0, 1.0])) / max(np.linalg.norm(j.axis), 1e-12)
    if (j.type in ("revolute", "planar") and vertical < math.cos(math.radians(10))) or \
            (j.type == "prismatic" and vertical > math.sin(math.radians(10))):
        return None
    shape_of = dict(zip(poses.body_names, poses.shape_names))
    W = poses.world_from_body[:, [poses.body_names.index(b) for b in art.bodies]]
    floor = floor_plane(lowest_points(W, [surface_points(shapes[shape_of[b]]) for b in art.bodies]), poses.fps,
                        tolerance)
    if not floor.seen:
        return None
    pivot = tuple(float(v) for v in W[0, art.bodies.index(j.child), :3, 3]) if j.type != "planar" else j.pivot
    joints = [replace(x, type="planar", axis=(0.0, 0.0, 1.0), pivot=pivot) if x is j else _upright(x)
              for x in art.joints]
    if joints == list(art.joints):
        return None
    new = replace(art, joints=joints)
    names, q = export.joint_coordinates(new, poses)
    log.info("articulate: %s (%s to the world) made planar: pushed by a known actuator on a floor (%s)",
             j.name, j.type, floor.reason)
    return new, JointPositions(q, names, export.root_poses(new, poses))


def level_rotation(R: np.ndarray) -> np.ndarray:
    """The smallest rotation (3, 3, world) that turns the axis of R (3, 3) nearest the world vertical
    (a column, either sign) onto it."""
    k = int(np.argmax(np.abs(R[2])))
    a = R[:, k] * math.copysign(1.0, R[2, k])
    v = np.cross(a, [0.0, 0.0, 1.0])
    s = float(np.linalg.norm(v))
    return np.eye(3) if s < 1e-15 else geometry.exp_so3(v / s * math.atan2(s, float(a[2])))


def resting_placements(art, poses, shapes: dict[str, Shape], height: float = 0.0,
                       tolerance: float = 0.005) -> dict[str, np.ndarray]:
    """{body: (4, 4) world pose at frame 0} of the bodies that lie on a floor under a planar root
    about the vertical (within 10 deg): each body whose lowest point (``identify_roots.surface_points``)
    is within ``tolerance`` m of the tracks' floor (``identify_roots.floor_plane``) and whose axis
    nearest the vertical is off it by at most ``REST_TILT_DEG``, turned about its centre by
    ``level_rotation`` and moved vertically so that its lowest point is at z = ``height`` (m); {}
    otherwise (another root, no floor in the tracks or one farther than ``tolerance`` from z =
    ``height``, a mesh). A planar root's parts slide flat on
    the floor; tracked on depth in whole millimetres their frame-0 poses tilt by up to half a degree
    and sit 0.1 mm apart in height, while a compliant floor sinks 0.03 mm under a link: placed as
    tracked, the twin rests each link on one edge or lifts it clear, and which one changes with
    every sub-millimetre change of the tracks."""
    from vid2sim.pipeline.identify_roots import floor_plane, lowest_points, surface_points

    roots = [j for j in art.joints if j.parent == "world"]
    if len(roots) != 1 or roots[0].type != "planar" or \
            abs(float(np.asarray(roots[0].axis) @ [0, 0, 1.0])) < math.cos(math.radians(10)):
        return {}
    shape_of = dict(zip(poses.body_names, poses.shape_names))
    try:
        pts = {b: surface_points(shapes[shape_of[b]]) for b in art.bodies}
    except (KeyError, ValueError):   # a body without a library shape or contact points (a mesh)
        return {}
    W = poses.world_from_body[:, [poses.body_names.index(b) for b in art.bodies]]
    floor = floor_plane(lowest_points(W, list(pts.values())), poses.fps, tolerance)
    if not floor.seen or abs(floor.height - height) > tolerance:   # no floor, or not the one at z = height
        return {}
    out = {}
    for i, b in enumerate(art.bodies):
        T = W[0, i].copy()
        L = level_rotation(T[:3, :3])
        low = float((pts[b] @ T[:3, :3].T)[:, 2].min()) + T[2, 3]
        if abs(low - floor.height) > tolerance or np.degrees(geometry.rotation_angle(L)) > REST_TILT_DEG:
            continue
        T[:3, :3] = L @ T[:3, :3]
        T[2, 3] = height - float((pts[b] @ T[:3, :3].T)[:, 2].min())
        out[b] = T
    return out


def _upright(j):
    """A revolute joint whose axis is within 10 deg of the vertical, made vertical (its sign kept):
    a hinge 0.4 deg off tilts a 16-cm link 0.5 mm up or down as it turns half a radian, 17x the
    depth at which the floor carries it."""
    a = np.asarray(j.axis, float) / max(np.linalg.norm(j.axis), 1e-12)
    if j.type != "revolute" or abs(a[2]) < math.cos(math.radians(10)) or abs(a[2]) == 1.0:
        return j
    return replace(j, axis=(0.0, 0.0, float(np.sign(a[2]))))


def _tip_track(act, a: int, fps: float) -> tuple[np.ndarray, tuple]:
    """(T, 3) tip centre per row (m, world) and the cylinder axis (world, frame 0)."""
    W = act.world_from_actuator[:, a]
    return W[:, :3, 3].copy(), tuple(float(v) for v in W[0, :3, 2])


def attach_pusher(cfg, rp, rec, shapes: dict[str, Shape], poses, art) -> bool:
    """Give the root problem ``rp`` the recording's pusher (module docstring); False without one."""
    from vid2sim.pipeline.identify_roots import FRICTION_MAX

    found = pusher_of(rec)
    if found is None:
        return False
    a, tip = found
    fps = float(poses.fps)
    track, axis = _tip_track(rec.actuation, a, fps)
    sim = rp.sim
    model = sim.model
    shape_of = dict(zip(poses.body_names, poses.shape_names))
    W0 = {b: poses.world_from_body[0, poses.body_names.index(b)] for b in art.bodies}
    idx, pts = list(model.contact_body), [model.contact_points.numpy()] if model.contact_points is not None else []
    for i, b in enumerate(model.body_names):
        side = side_points(shapes[shape_of[b]], W0[b][:3, :3].T @ np.array([0.0, 0, 1]))
        pts.append(side @ W0[b][:3, :3].T + model.com[0, i].numpy())   # model body frames are world-aligned at 0
        idx += [i] * len(side)
    pts = np.concatenate(pts)
    model = model.replace(contact_body=tuple(idx), contact_points=torch.as_tensor(pts, dtype=model.dtype),
                          tip_radius=float(tip.radius), tip_half_length=float(tip.length) / 2, tip_axis=axis,
                          contact_damping=torch.full((1,), TIP_DAMPING, dtype=model.dtype),
                          tip_friction=torch.full((1,), 0.5, dtype=model.dtype), slip_velocity=SLIP_VELOCITY)
    names, lower, upper = list(sim.names) + ["tip.friction"], np.append(sim.lower, 0.0), np.append(sim.upper, FRICTION_MAX)
    sub = max(1, math.ceil(PUSH_HZ / fps - 1e-9))
    base = replace(sim, names=names, lower=lower, upper=upper, model=model, substeps=sub, dt=1.0 / (fps * sub))
    push = _push_simulator(type(sim))(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    push.fixed, push.track, push.fps = dict(getattr(sim, "fixed", None) or {}), torch.as_tensor(track), fps
    rp.sim = push
    from vid2sim.models.bullet import Tip

    rp.pusher = Tip(float(tip.radius), float(tip.length), track.copy(), 0.5)   # the twin's, calibrated after the fit
    times = np.arange(len(rp.guess)) / fps
    rp.guess = np.column_stack([rp.guess, times])
    rp.extra["pusher"] = {"actuator": rec.actuation.names[a], "shape": rec.actuation.shapes[a],
                          "radius": float(tip.radius), "length": float(tip.length), "axis": list(axis),
                          "contact_points": int(len(pts)), "tip_damping": TIP_DAMPING}
    unseen = unseen_yaw(rp, art, {b: shapes[shape_of[b]] for b in art.bodies}, W0)
    if unseen is not None:   # the tracker holds a spin it cannot see still: fitting it would stop the part's spin
        rp.sigma = np.asarray(rp.sigma, float).copy()
        rp.sigma[unseen] = UNSEEN_SIGMA
        rp.extra["pusher"]["unseen_yaw"] = rp.extra["q_names"][unseen]
        log.info("identify: %s not observed (a part symmetric about the vertical shows no spin)",
                 rp.extra["q_names"][unseen])
    log.info("identify: pusher %r (cylinder r=%.3f m) in contact with %d points on the parts",
             rec.actuation.names[a], tip.radius, len(pts))
    from vid2sim.pipeline.identify_roots import PLANAR_STIFFNESS, _problem

    windows = release_windows(track, fps, rp.q)
    if windows:   # the part slid on alone after the tip stopped: the floor friction is pinned there
        rel = release_profile(push, rp, windows)
        k = names.index("floor.friction")
        push.lower, push.upper = push.lower.copy(), push.upper.copy()
        push.lower[k], push.upper[k] = rel["interval"]
        rp.extra["floor_release"] = rel
        log.info("identify: floor friction %.3f (%.3f-%.3f) from %d release(s) of the part by the tip (frames %s); "
                 "the fit searches it there", rel["estimate"], *rel["interval"], len(windows),
                 ", ".join(f"{a}-{b}" for a, b in windows))
    else:
        rp.extra["floor_release"] = {"windows": [], "note": "the tip never stopped while pushing the part: the floor "
                                     "friction is barely observable (a quasi-static push moves the part alike at any mu)"}

    # the twin's PyBullet floor (forecast.default_floor): compliant like the penalty floor fitted here, so
    # that a flat part's contact forces are determinate; damped at half critical for the lightest part
    rp.held.update({"floor.stiffness": PLANAR_STIFFNESS,
                    "floor.damping": float(math.sqrt(PLANAR_STIFFNESS * float(model.mass.min())))})

    # the clip starts at rest before the push: the tracked start state, not estimated
    rp.problem = _problem(push, names, rp.q, rp.guess, rp.sigma, estimate_start=False)
    return True


def unseen_yaw(rp, art, shapes: dict[str, Shape], W0: dict, tolerance_deg: float = 5.0) -> int | None:
    """Column of ``rp.q`` holding a planar root's yaw that no frame shows, or None: the articulation
    is one body, a sphere or a cylinder or capsule whose axis (body z) is within ``tolerance_deg``
    of the vertical at frame 0 (``W0`` {body: (4, 4)}); its spin about the vertical changes no pixel."""
    if rp.extra["root"]["type"] != "planar" or len(art.bodies) != 1:
        return None
    b = art.bodies[0]
    s = shapes[b]
    upright = abs(float(W0[b][2, 2])) >= math.cos(math.radians(tolerance_deg))
    if s.type != "sphere" and not (s.type in ("cylinder", "capsule") and upright):
        return None
    name = f"{rp.extra['root']['joint']}/theta"
    return rp.extra["q_names"].index(name) if name in rp.extra["q_names"] else None


def release_windows(track: np.ndarray, fps: float, q: np.ndarray) -> list[tuple[int, int]]:
    """(stop, end) frames (inclusive) where the tip, moving at ``RELEASE_TIP_SPEED`` m/s or more
    over the frame before ``stop``, stands still from ``stop`` to ``end`` (the last frame before it
    moves again, or the last of q), while the part it pushed was moving at ``RELEASE_PART_SPEED``
    of the tip's speed or more at ``stop``: the part slides on alone, slowed by the floor only.
    track (R, 3) tip centre per recorded row (m); q (T, nq) the root's coordinates first (m).
    Windows shorter than ``RELEASE_MIN_FRAMES`` are left out."""
    T = min(len(q), len(track))
    v = np.linalg.norm(np.diff(track[:T], axis=0), axis=1) * fps   # (T - 1,) speed from row k to k + 1
    part = np.linalg.norm(np.diff(q[:T, :2], axis=0), axis=1) * fps
    out = []
    for s in range(2, T - 1):
        if v[s - 1] < RELEASE_TIP_SPEED or v[s] > RELEASE_STILL * v[s - 1] or part[s - 1] < RELEASE_PART_SPEED * v[s - 1]:
            continue
        moving = np.nonzero(v[s:] > RELEASE_STILL * v[s - 1])[0]
        end = s + int(moving[0]) if len(moving) else T - 1
        if end - s + 1 >= RELEASE_MIN_FRAMES:
            out.append((s, end))
    return out


def _backward_state(rp, s: int) -> np.ndarray:
    """The state guess at frame s (q, qd, t) with velocities from frames s - 2 .. s only (second-order
    backward differences): the part's motion up to a release, not the slide after it."""
    from vid2sim.pipeline.identify_roots import root_velocities

    fps = float(rp.sim.fps)
    x = rp.guess[s].copy()
    nq = rp.q.shape[1]
    kind = rp.extra["root"]["type"]
    nr = 3 if kind == "planar" else 7
    rows = rp.q[s - 2:s + 1]
    vr = root_velocities(kind, rows[:, :nr], fps)[-1]
    vj = np.gradient(rows[:, nr:], 1.0 / fps, axis=0, edge_order=2)[-1] if nq > nr else np.zeros(0)
    x[nq:nq + len(vr) + len(vj)] = np.concatenate([vr, vj])
    return x


def release_profile(sim, rp, windows: list[tuple[int, int]]) -> dict:
    """The floor friction that best explains the slides after the tip stopped (``release_windows``):
    each window simulated from its backward-difference start state (``_backward_state``) over
    ``RELEASE_GRID`` (then a grid of 0.01 around the best), other parameters at the build masses,
    the lower joint limits and tip mu 0.5 (the tip stands clear). Gaussian log-likelihood of q
    with ``rp.sigma``, each window's scaled by its own residual at its best mu where that exceeds
    the noise (a simulator bias counts as noise; a window the simulator cannot follow weighs little).
    -> {"estimate", "interval" (log-likelihood within 2 of the best, one fine step either side at
    least), "per_window" (each window's own best), "windows", "residual_scale", "profile"}."""
    names = list(sim.names)
    base = []
    for n, lo in zip(names, sim.lower):
        body = n[:-len(".mass")] if n.endswith(".mass") else None
        base.append(float(sim.model.mass[0, sim.model.body_names.index(body)]) if body in sim.model.body_names
                    else 0.5 if n == "tip.friction" else float(lo))
    k = names.index("floor.friction")
    nq = rp.q.shape[1]
    sigma = np.asarray(rp.sigma, float)

    def window_ll(grid: np.ndarray) -> np.ndarray:   # (W, G) log-likelihood of each window at each mu
        theta = torch.tensor(np.tile(base, (len(grid), 1)), dtype=torch.float64)
        theta[:, k] = torch.as_tensor(grid)
        out = []
        for s, e in windows:
            x0 = torch.as_tensor(_backward_state(rp, s))[None].expand(len(grid), -1)
            with torch.no_grad():
                x = sim.simulate(theta, x0, e - s + 1)[..., :nq].numpy()
            r = (x - rp.q[s:e + 1]) / sigma
            out.append(-0.5 * (r * r).sum((1, 2)))
        return np.array(out)

    coarse = window_ll(RELEASE_GRID)
    best = RELEASE_GRID[np.argmax(coarse.sum(0))]
    fine = np.round(np.arange(max(best - 0.05, 0.0), best + 0.0501, 0.01), 4)
    grid = np.unique(np.concatenate([RELEASE_GRID, fine]))
    ll = window_ll(grid)
    n_obs = np.array([(e - s + 1) * nq for s, e in windows])
    scale = np.maximum(1.0, -2 * ll.max(1) / n_obs)   # (W,) mean square residual at each window's best, in sigma^2
    total = (ll / scale[:, None]).sum(0)
    est = float(grid[np.argmax(total)])
    inside = grid[total >= total.max() - 2.0]
    per_window = [float(grid[i]) for i in ll.argmax(1)]
    lo, hi = max(min(inside.min(), est - 0.01), 0.0), max(inside.max(), est + 0.01)   # one fine grid step either side at least
    return {"estimate": est, "interval": [round(float(lo), 4), round(float(hi), 4)], "per_window": per_window,
            "windows": [list(w) for w in windows], "residual_scale": scale.round(3).tolist(),
            "profile": [[float(g), round(float(t - total.max()), 2)] for g, t in zip(grid, total)]}


def _push_simulator(base):
    class PushSimulator(base):
        """The root simulator with the pusher replayed: state (q, qd, t)."""

        track: torch.Tensor = None   # (R, 3) tip centre per recorded row
        fps: float = 30.0

        def model_for(self, theta: torch.Tensor):
            m = super().model_for(theta)
            if "tip.friction" in self.names:
                m = m.replace(tip_friction=theta[:, self.names.index("tip.friction")].to(m.dtype))
            return m

        def controls(self, t0: torch.Tensor, n: int, dtype):
            """Tip positions and velocities (n, B, 3) at times t0 + k dt, k < n."""
            from vid2sim.models.dynamics import Control

            R = len(self.track)
            f = (t0[None, :] + torch.arange(n, dtype=dtype)[:, None] * self.dt) * self.fps   # (n, B) fractional rows
            f = f.clamp(0, R - 1)
            lo = f.floor().long().clamp(max=R - 2) if R > 1 else f.floor().long()
            w = (f - lo)[..., None]
            P = self.track.to(dtype)
            hi = (lo + 1).clamp(max=R - 1)
            pos = P[lo] * (1 - w) + P[hi] * w
            vel = (P[hi] - P[lo]) * self.fps * (hi > lo)[..., None]
            return Control(tip_pos=pos, tip_vel=vel)

        def simulate(self, theta: torch.Tensor, start: torch.Tensor, steps: int, nets: tuple = ()) -> torch.Tensor:
            return timed_rollout(self, theta, start, steps, nets)

    return PushSimulator


def timed_rollout(sim, theta: torch.Tensor, start: torch.Tensor, steps: int, nets: tuple = (),
                  compile: bool = False) -> torch.Tensor:
    """``simulate`` of a simulator whose state ends with its time (s): start (B, nq + nv + 1) ->
    (B, steps, nq + nv + 1), driven by ``sim.controls(t0 (B,), substeps, dtype)`` (the pusher's
    tip, a known joint effort); each window starts on a frame (``sim.fps``)."""
    from vid2sim.models.dynamics import State, rollout

    model = sim.model_for(theta).replace(nets=tuple(nets))
    nq, nv = model.nq, model.nv
    t0 = torch.round(start[:, nq + nv].detach() * sim.fps) / sim.fps
    n = (steps - 1) * sim.substeps
    st = rollout(model, State(start[:, :nq], start[:, nq:nq + nv]), n, dt=sim.dt,
                 controls=sim.controls(t0, max(n, 1), start.dtype), compile=compile)
    x = torch.cat([st.q, st.qd], -1)[:: sim.substeps].transpose(0, 1)   # (B, steps, nq + nv)
    t = t0[:, None] + torch.arange(steps, dtype=start.dtype)[None] / sim.fps
    return torch.cat([x, t[..., None]], -1)


def twin_friction(post) -> dict:
    """{"floor.friction", "tip.friction"} of the twin: calibrated in PyBullet (``extra["floor_bullet"]``,
    ``identify_floor.calibrate_push``) where identify did, else the penalty model's fit (the estimate)."""
    est = post.estimate if post is not None else {}
    out = {"floor.friction": est.get("floor.friction"), "tip.friction": est.get("tip.friction", 0.5)}
    bullet = (post.extra or {}).get("floor_bullet") if post is not None else None
    if bullet and "tip_friction" in bullet:
        out = {"floor.friction": bullet["friction"], "tip.friction": bullet["tip_friction"]}
    return out


def contact_summary(post, rec) -> dict | None:
    """The side file's content for posterior ``post`` (None without a pusher in ``post``)."""
    extra = post.extra.get("pusher") if post.extra else None
    if extra is None:
        return None
    est, bullet = post.estimate, twin_friction(post)
    return {"floor": {"height": (post.extra.get("floor") or {}).get("height", 0.0),
                      "friction": bullet.get("floor.friction"), "stiffness": est.get("floor.stiffness"),
                      "damping": est.get("floor.damping"), "friction_penalty_fit": est.get("floor.friction")},
            "pusher": dict(extra, friction=bullet.get("tip.friction"), friction_penalty_fit=est.get("tip.friction")),
            "contact_model": "penalty: Hunt-Crossley normal force, regularised Coulomb friction (models.dynamics.contact); "
                             "the pusher is kinematic (replayed from actuation.npz)"}


def write_side_file(post, out_dir: Path) -> Path | None:
    """``contacts.json`` beside model.urdf (docs/formats.md §2) when ``post`` has a pusher."""
    from vid2sim.datasets.atomic import write_json

    summary = contact_summary(post, None)
    if summary is None:
        return None
    path = Path(out_dir) / SIDE_FILE
    write_json(path, summary)
    return path


def forecast_tip(rec, post):
    """``forecast.Tip`` of the recording's pusher with the twin's tip friction (``twin_friction``), or None."""
    from vid2sim.pipeline.forecast import Tip

    found = pusher_of(rec)
    if found is None:
        return None
    a, tip = found
    mu = twin_friction(post)["tip.friction"] if post is not None else 0.5
    return Tip(float(tip.radius), float(tip.length), rec.actuation.world_from_actuator[:, a, :3, 3].copy(), float(mu))


def dumps(d: dict) -> str:
    return json.dumps(d, indent=2)
