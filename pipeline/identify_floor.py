"""Floor friction and restitution for the exported twin, calibrated in PyBullet.

identify fits a free root's floor contact with penalty springs (``identify_roots``), whose
Coulomb friction and Hunt-Crossley restitution are biased against the rigid contacts of
PyBullet, which the exported twin and forecast run on. Here the PyBullet twin of the
identified estimate (``export.build_urdf``, ``models.bullet.BulletTwin`` on forecast's
floor, ``forecast.default_floor``) is restarted from the free-flight state just before the
first floor contact (``forecast.Restart``, shot over up to ``FLIGHT_FRAMES`` flight frames)
and the floor friction mu and restitution e are searched for the simulation that best
reproduces the tracked body poses over the contact frames (``forecast.pose_residual``,
mean square): a grid over ``FRICTION_GRID`` x ``RESTITUTION_GRID``, then a grid of half
the spacing around its best point (impacts make the cost rugged, so no gradient steps).
Nothing else is fitted here.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np

from vid2sim.datasets.shapes import Shape

log = logging.getLogger(__name__)
FLIGHT_FRAMES = 10     # at most this many flight frames before the first contact fix the restart state
CONTACT_FRAMES = 30    # at most this many frames from the first contact on are compared
FRICTION_GRID = np.round(np.arange(0.1, 1.51, 0.1), 3)      # Coulomb mu searched (part-floor)
RESTITUTION_GRID = np.round(np.arange(0.0, 0.91, 0.1), 3)  # restitution searched


def calibrate(art, jp, poses, shapes: dict[str, Shape], fps: float, post, first: int) -> dict | None:
    """The floor friction and restitution that make the PyBullet twin of ``post`` reproduce the
    tracked frames ``first`` (the first floor contact) .. ``first + CONTACT_FRAMES - 1``:
    {"friction", "restitution", "rms", "frames": [lo, first, end - 1]} with rms the root mean
    square of the pose residual there (m; rotations weighed as in ``forecast.pose_residual``).
    None when fewer than 3 flight frames precede ``first`` or fewer than 2 frames follow it."""
    from vid2sim.models.bullet import BulletTwin
    from vid2sim.pipeline import export, forecast

    lo, end = max(0, first - FLIGHT_FRAMES), min(poses.num_frames, jp.q.shape[0], first + CONTACT_FRAMES)
    if first - lo < 3 or end - first < 2 or jp.root_pose is None:
        return None
    order = [poses.body_names.index(b) for b in art.bodies]
    kinds = [shapes[poses.shape_names[i]].type for i in order]
    W = poses.world_from_body[:, order]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "twin.urdf"
        path.write_text(export.build_urdf(export.ExportConfig(), art, post, shapes, poses))
        twin = BulletTwin(str(path), forecast.link_body_offsets(art, poses), True, forecast.default_floor(art, post))
    try:
        restart = forecast.Restart(twin, list(art.bodies), list(jp.names), jp.q[lo:first], jp.root_pose[lo:first],
                                   lo, fps)
        x = restart.fit(W[lo:first], kinds)

        def cost(mu: float, e: float) -> float:
            twin.set_contact(mu, e)
            r = forecast.pose_residual(restart.simulate(x, end - lo)[first - lo:], W[first:end], kinds)
            return float(np.mean(r * r))

        best = min(((cost(m, e), m, e) for m in FRICTION_GRID for e in RESTITUTION_GRID))
        dm, de = FRICTION_GRID[1] - FRICTION_GRID[0], RESTITUTION_GRID[1] - RESTITUTION_GRID[0]
        fine = [(best[1] + i * dm / 2, best[2] + j * de / 2) for i in (-1, 0, 1) for j in (-1, 0, 1) if i or j]
        best = min([best] + [(cost(m, e), m, e) for m, e in fine
                             if FRICTION_GRID[0] <= m <= FRICTION_GRID[-1] and 0.0 <= e <= 1.0])
    finally:
        twin.close()
    out = {"friction": round(float(best[1]), 4), "restitution": round(float(best[2]), 4),
           "rms": float(np.sqrt(best[0])), "frames": [lo, first, end - 1]}
    log.info("identify: floor contact calibrated in PyBullet over frames %d-%d: friction %.3f, restitution %.3f "
             "(pose residual rms %.1f mm)", first, end - 1, out["friction"], out["restitution"], 1e3 * out["rms"])
    return out


PUSH_TIP_GRID = np.round(np.concatenate([[0.05], np.arange(0.1, 1.51, 0.1)]), 3)   # tip mu searched (pushes)
PUSH_KEEP_GAIN = 0.5    # the searched coefficients replace the fitted ones only where the twin then follows the tracks
                        # at under this fraction of the fitted ones' rms (docs/decisions.md, 2026-11-29)
PUSH_START_FRAMES = 5   # tracked frames whose quadratic fit gives a pushed clip's start state (at rest)
PUSH_REFINE_FLOORS = (0.3, 0.8)   # floor mu the PyBullet refit also starts from, beside the grid's best (whose grid is
                                  # searched at the penalty fit's masses); the lowest rms of all starts is kept


class _PushTwin:
    """The PyBullet twin of ``post`` (``export.build_urdf`` on ``forecast.default_floor``, the pusher
    ``tip`` replayed with the fitted tip mu) restarted from the tracked start (``forecast.Restart``
    over the first ``PUSH_START_FRAMES`` frames), and the tracked frames 0 .. T-1 it is compared
    with: ``W`` (T, M, 4, 4) in ``art.bodies`` order, ``kinds`` their shape types. ``close()`` ends it."""

    def __init__(self, art, jp, poses, shapes: dict[str, Shape], fps: float, post, tip):
        from dataclasses import replace

        from vid2sim.models.bullet import BulletTwin
        from vid2sim.pipeline import export, forecast

        self.T = T = min(poses.num_frames, jp.q.shape[0])
        order = [poses.body_names.index(b) for b in art.bodies]
        self.kinds = [shapes[poses.shape_names[i]].type for i in order]
        self.W = poses.world_from_body[:T, order]
        self.floor = forecast.default_floor(art, post)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "twin.urdf"
            path.write_text(export.build_urdf(export.ExportConfig(), art, post, shapes, poses))
            self.twin = BulletTwin(str(path), forecast.link_body_offsets(art, poses), True, self.floor,
                                   tip=replace(tip, friction=float(post.estimate["tip.friction"])))
        try:
            self.restart = forecast.Restart(self.twin, list(art.bodies), list(jp.names), jp.q[:PUSH_START_FRAMES],
                                            jp.root_pose[:PUSH_START_FRAMES], 0, fps)
        except Exception:
            self.twin.close()
            raise

    def residual(self, mu: float, mu_tip: float) -> np.ndarray:
        """``forecast.pose_residual`` of the twin over the T frames at floor mu ``mu``, tip mu ``mu_tip``."""
        from vid2sim.pipeline import forecast

        self.twin.set_contact(mu, self.floor.restitution)
        self.twin.pb.changeDynamics(self.twin.tid, -1, lateralFriction=mu_tip / mu, physicsClientId=self.twin.cid)
        return forecast.pose_residual(self.restart.simulate(self.restart.x0, self.T), self.W, self.kinds)

    def close(self) -> None:
        self.twin.close()


def calibrate_push(art, jp, poses, shapes: dict[str, Shape], fps: float, post, tip) -> dict | None:
    """The floor and tip friction that make the PyBullet twin of ``post`` (``_PushTwin``: the pusher
    ``tip``, a ``models.bullet.Tip``, replayed) reproduce the tracked frames 0 .. T-1 of ``jp`` from the
    tracked start: mean square ``forecast.pose_residual`` (a cylinder's spin left out), searched
    over the grid of the tip mu ``PUSH_TIP_GRID`` x the floor mu ``FRICTION_GRID`` and the fitted one within
    ``post.limits["floor.friction"]`` (a release profile's interval), jointly: the two
    coefficients trade off along a valley; with parts below the root, then ``refine_push`` over their masses,
    the joints' damping and both coefficients from the grid's best and from the floor mu ``PUSH_REFINE_FLOORS``
    (within the limits), on the same twin, the lowest rms of them; kept where its rms is under
    ``PUSH_KEEP_GAIN`` x the fitted coefficients', else the fitted ones stay.
    -> {"friction", "tip_friction", "rms" (the twin's: kept), "restitution", "rms_fitted" (the fitted
    coefficients'), "frames": [0, T-1], "kept" ("searched" | "fitted"), "searched" {"friction",
    "tip_friction", "rms", "floor_profile" [[floor mu, rms (m)] at the grid's best tip mu], and where
    ``refine_push`` bettered the grid "masses", "masses_fitted", "dampings", "dampings_fitted", "refined"}}
    ("masses" and "dampings" also at the top level where kept), or None
    without a root pose, a fitted floor and tip friction, or ``PUSH_START_FRAMES`` + 2 frames."""
    T = min(poses.num_frames, jp.q.shape[0])
    if jp.root_pose is None or T < PUSH_START_FRAMES + 2 or not {"floor.friction", "tip.friction"} <= set(post.estimate):
        return None
    est = post.estimate
    lo, hi = post.limits.get("floor.friction", (FRICTION_GRID[0], FRICTION_GRID[-1]))
    floors = sorted({float(m) for m in FRICTION_GRID if lo <= m <= hi} | {float(est["floor.friction"]), float(lo),
                                                                          float(hi)} - {0.0})
    roots = {j.child for j in art.joints if j.parent == "world"}   # the anchor: the mass scale is not observable
    masses = [n for n in post.names if n.endswith(".mass") and n[:-len(".mass")] in set(art.bodies) - roots]
    pt = _PushTwin(art, jp, poses, shapes, fps, post, tip)
    try:
        def cost(mu: float, mu_tip: float) -> float:
            r = pt.residual(mu, mu_tip)
            return float(np.mean(r * r))

        fitted = cost(float(est["floor.friction"]), float(est["tip.friction"]))
        grid = np.array([[cost(m, float(t)) for t in PUSH_TIP_GRID] for m in floors])   # (floors, tips)
        i, j = np.unravel_index(np.argmin(grid), grid.shape)
        best = (float(grid[i, j]), floors[i], float(PUSH_TIP_GRID[j]))
        searched = {"friction": round(best[1], 4), "tip_friction": round(best[2], 4), "rms": float(np.sqrt(best[0])),
                    "floor_profile": [[round(m, 4), round(float(np.sqrt(c)), 6)] for c, m in zip(grid[:, j], floors)]}
        if masses:   # several parts: their mass ratios steer the linkage as much as the friction does
            refined: dict = {}
            for f0 in [searched["friction"]] + [f for f in PUSH_REFINE_FLOORS if lo <= f <= hi]:
                r = refine_push(pt, art, poses, shapes, post, masses, dict(searched, friction=f0))
                if r and r["rms"] < refined.get("rms", searched["rms"]):
                    refined = r
            searched.update(refined)
    finally:
        pt.close()
    keep = searched["rms"] < PUSH_KEEP_GAIN * np.sqrt(fitted)
    chosen = searched if keep else {"friction": float(est["floor.friction"]), "tip_friction": float(est["tip.friction"]),
                                    "rms": float(np.sqrt(fitted))}
    out = dict(chosen, restitution=float(pt.floor.restitution), rms_fitted=float(np.sqrt(fitted)), frames=[0, T - 1],
               kept="searched" if keep else "fitted", searched=searched)
    log.info("identify: floor and tip friction searched in PyBullet over frames 0-%d: floor %.3f, tip %.3f (pose "
             "residual rms %.1f mm; %.1f mm at the fitted %.3f / %.3f): the twin takes the %s ones", T - 1,
             searched["friction"], searched["tip_friction"], 1e3 * searched["rms"], 1e3 * out["rms_fitted"],
             est["floor.friction"], est["tip.friction"], out["kept"])
    return out


PUSH_REFINE_EVALS = 60   # PyBullet rollouts of the fitted frames per least-squares start (refine_push)
PUSH_REFINE_STEP = 0.02  # relative finite-difference step of its Jacobian (log masses, log dampings, friction coefficients)
PUSH_DAMPING_MIN = 1e-5  # N m s or N s/m: the least joint damping refine_push searches (its search is in log damping)


def refine_push(pt: _PushTwin, art, poses, shapes: dict[str, Shape], post, masses: list[str], start: dict,
                floor: float | None = None) -> dict:
    """The masses ``masses`` (params names ``<body>.mass``; the anchored root's stays), the damping of the
    twin's joints that ``post`` fits (``<joint>.damping``) and the floor and tip
    friction of the PyBullet twin ``pt`` that reproduce its tracked frames best (``_PushTwin.residual``):
    trust-region least squares over log masses and log dampings (within ``post.limits``, the damping at
    least ``PUSH_DAMPING_MIN``) and both friction coefficients
    (within ``PUSH_TIP_GRID``'s range, the floor's also within ``post.limits["floor.friction"]``: a release
    profile's interval), from the grid's best friction ``start`` {"friction", "tip_friction", "rms"} with the
    fitted masses and with the masses at one density (the build masses scaled to the anchor),
    ``PUSH_REFINE_EVALS`` rollouts each; the better end is kept. The twin's masses are left changed. With
    ``floor`` the floor mu is held there (a profile point) and the rest refitted.
    -> {"friction", "tip_friction", "rms", "masses" {name: kg}, "masses_fitted" {name: kg}, "dampings" {name:
    N m s or N s/m}, "dampings_fitted", "refined": true} or {} where no start improves on ``start["rms"]``."""
    from scipy.optimize import least_squares

    est, twin = post.estimate, pt.twin
    bodies = [n[:-len(".mass")] for n in masses]
    links = [-1 if b == twin.root else twin.link_index[b] for b in bodies]
    info = [twin.pb.getDynamicsInfo(twin.rid, i, physicsClientId=twin.cid) for i in links]
    m0, I0 = np.array([i[0] for i in info]), np.array([i[2] for i in info])
    dampings = [n for n in post.names if n.endswith(".damping") and n[:-len(".damping")] in twin.joint_index]
    joints = [twin.joint_index[n[:-len(".damping")]] for n in dampings]
    floor_lo, floor_hi = post.limits.get("floor.friction", (PUSH_TIP_GRID[0], PUSH_TIP_GRID[-1]))   # a release's interval
    lo = np.concatenate([np.log([post.limits[n][0] for n in masses]),
                         np.log([max(post.limits[n][0], PUSH_DAMPING_MIN) for n in dampings]),
                         [max(floor_lo, PUSH_TIP_GRID[0]), PUSH_TIP_GRID[0]]])
    hi = np.concatenate([np.log([post.limits[n][1] for n in masses]),
                         np.log([max(post.limits[n][1], 2 * PUSH_DAMPING_MIN) for n in dampings]),
                         [min(floor_hi, PUSH_TIP_GRID[-1]), PUSH_TIP_GRID[-1]]])
    k, kd = len(masses), len(masses) + len(dampings)
    free = np.ones(kd + 2, bool)
    if floor is not None:   # held: searched over nothing
        free[kd] = False
        lo[kd] = hi[kd] = float(floor)

    def residual(z: np.ndarray) -> np.ndarray:
        for i, m, mass, inertia in zip(links, np.exp(z[:k]), m0, I0):
            twin.pb.changeDynamics(twin.rid, i, mass=float(m), localInertiaDiagonal=list(np.asarray(inertia) * m / mass),
                                   physicsClientId=twin.cid)
        for j, c in zip(joints, np.exp(z[k:kd])):
            twin.pb.changeDynamics(twin.rid, j, jointDamping=float(c), physicsClientId=twin.cid)
        return pt.residual(float(z[kd]), float(z[kd + 1]))

    root = next(j.child for j in art.joints if j.parent == "world")
    volume = {b: shapes[poses.shape_names[poses.body_names.index(b)]].volume() for b in art.bodies}
    starts = [[float(est[n]) for n in masses]]
    if f"{root}.mass" in est:   # one density for every part, the anchor's: the prior's centre
        starts.append([est[f"{root}.mass"] / volume[root] * volume[b] for b in bodies])
    d0 = np.log([max(float(est[n]), PUSH_DAMPING_MIN) for n in dampings])
    best = None
    for ms in starts:
        z0 = np.clip(np.concatenate([np.log(ms), d0, [start["friction"], start["tip_friction"]]]), lo, hi)

        def full(zf: np.ndarray, z0=z0) -> np.ndarray:
            z = z0.copy()
            z[free] = zf
            return z

        r = least_squares(lambda zf: residual(full(zf)), z0[free], bounds=(lo[free], hi[free]), method="trf",
                          diff_step=PUSH_REFINE_STEP, max_nfev=PUSH_REFINE_EVALS // (int(free.sum()) + 1))
        x = full(r.x)
        rms = float(np.sqrt(np.mean(residual(x) ** 2)))
        log.info("identify: PyBullet refit of %s from %s: rms %.2f mm", ", ".join(masses + dampings + ["floor", "tip"]),
                 np.round(ms, 4).tolist(), 1e3 * rms)
        if best is None or rms < best[0]:
            best = (rms, x)
    if best is None or best[0] >= start["rms"]:
        return {}
    return {"friction": round(float(best[1][kd]), 4), "tip_friction": round(float(best[1][kd + 1]), 4), "rms": best[0],
            "masses": {n: float(v) for n, v in zip(masses, np.exp(best[1][:k]))},
            "masses_fitted": {n: float(est[n]) for n in masses},
            "dampings": {n: float(v) for n, v in zip(dampings, np.exp(best[1][k:kd]))},
            "dampings_fitted": {n: float(est[n]) for n in dampings}, "refined": True}
