"""Track's start: fit one primitive to a mask's point cloud from several orientations.

Used for the segmentation frame's start poses and to re-acquire a body (``track.py``); a mask's
pixels are first cut to its own (less the masks nested in it, ``own_pixels``) and to those at its
part's depth (``depth_cluster``).
Each orientation hypothesis (principal axes of the points; for a box also the world axes,
every assignment of the axes to its edges), started behind the points by one or two depths
(``start_depths``), is aligned to the points' surface (``surface_fit``:
each point's signed distance to the shape, which holds wherever the shape is seen, whatever
hides the rest of it), then by damped Gauss-Newton steps of the renderer
(``models/render/align.py``), and the pose that explains the points best, with a penalty for
covering background, is kept.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import torch

from vid2sim.models.geometry_torch import perturb
from vid2sim.models.render import Primitive
from vid2sim.models.render.align import Observation, gauss_newton_step, huber_weights
from vid2sim.models.render.primitives import sdf_and_grad

if TYPE_CHECKING:
    from vid2sim.pipeline.track import TrackConfig

log = logging.getLogger(__name__)

FLOAT = torch.float64  # dtype of every pose, ray and residual tensor of the tracker


def rot_hypotheses(prim: Primitive, pts: np.ndarray) -> list[np.ndarray]:
    """Candidate body orientations (3, 3) from the principal axes of a point cloud (each a
    right-handed basis; for a capsule or cylinder, its axis along each principal axis)."""
    c = pts - pts.mean(0)
    _, _, Vt = np.linalg.svd(c, full_matrices=False)
    axes = Vt  # rows: principal directions, largest variance first
    if prim.kind == "sphere":
        return [np.eye(3)]
    if prim.kind in ("capsule", "cylinder"):
        # the axis along the points' largest spread (a rod) or their smallest (a puck, a disc seen
        # face on), or the middle one (a short round part seen from its side)
        out = []
        for i in (0, 2, 1):
            z, x = axes[i], axes[(i + 1) % 3]
            out.append(np.stack([x, np.cross(z, x), z], 1))
        return out
    # A box seen in part (occluded, one face visible) has misleading principal axes, and
    # man-made boxes usually stand square to gravity: try the world axes too.
    hyps = []
    for basis in (axes, np.eye(3)):
        for perm in ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)):
            R = np.stack([basis[perm[0]], basis[perm[1]], basis[perm[2]]], 1)
            if np.linalg.det(R) < 0:
                R[:, 2] *= -1
            hyps.append(R)
    return hyps


def start_depths(prim: Primitive, R: np.ndarray, view: np.ndarray, gate_m: float) -> list[float]:
    """How far (m) behind its seen points' mean a primitive at orientation R (3, 3), seen along the unit
    ``view`` (3,), is started: its smallest half side (a round part: its radius), as if seen on its
    broadest face; for a box (a mesh: its bounding box) also its half extent along the view, sum_i
    |view . R[:, i]| half_size_i, where that lies more than ``gate_m`` deeper. Seen square on a face
    whose half depth is larger (a drawer's front: 0.18 m, not 0.06 m), a start at the smallest half
    side leaves the seen points deep inside the box, where a point's nearest face may be another than
    its own, and the fit goes astray."""
    if prim.kind not in ("box", "mesh"):
        return [prim.radius]
    smallest = min(prim.half_size)
    extent = float(np.abs(view @ R) @ np.asarray(prim.half_size))
    return [smallest, extent] if extent - smallest > gate_m else [smallest]


def fit_primitive(cfg: "TrackConfig", prim: Primitive, obs: Observation,
                  fits: list | None = None) -> tuple[float, torch.Tensor]:
    """Fit one primitive to the foreground points of ``obs`` from every orientation hypothesis.

    Returns (cost, (4, 4) world pose): cost = mean clipped squared point residual plus a
    penalty per free-space ray (a pose that covers background is wrong). ``fits``, if given,
    receives (cost, (4, 4) pose) of every hypothesis fitted, the returned one included (two
    hypotheses may converge to the same placement).
    """
    p = obs.points[obs.foreground].numpy()
    view = p.mean(0) - obs.origin.numpy()
    view /= np.linalg.norm(view)
    best = (float("inf"), None)
    started: list[torch.Tensor] = []
    for R in rot_hypotheses(prim, p):
        fit = None
        for behind in start_depths(prim, R, view, cfg.gates.gate_m):   # per orientation, the better fit
            T = torch.eye(4, dtype=FLOAT)
            T[:3, :3], T[:3, 3] = torch.as_tensor(R), torch.as_tensor(p.mean(0) + view * behind)
            T = surface_fit(prim, T[None], obs.points[obs.foreground], cfg.noise.huber_m * 2.5, cfg.init_iterations)
            if any(same_placement(prim, T[0], S) for S in started):
                continue  # the same shape in the same place as an earlier start: the same fit
            started.append(T[0])
            cost, T = _aligned_cost(cfg, prim, T, obs)
            if fit is None or cost < fit[0]:
                fit = (cost, T[0])
        if fit is None:
            continue
        if fits is not None:
            fits.append(fit)
        if best[1] is None or fit[0] < best[0]:  # no finite cost at all: the first hypothesis, cost inf
            best = fit
    return best


def _aligned_cost(cfg: "TrackConfig", prim: Primitive, T: torch.Tensor, obs: Observation) -> tuple[float, torch.Tensor]:
    """A start T (1, 4, 4) aligned by damped Gauss-Newton steps, and its cost (inf where no point is
    seen): the mean clipped squared point residual plus a penalty per free-space ray."""
    kw = dict(gate=prim.bounding_radius * 2, scale=cfg.noise.huber_m, freespace_tol=cfg.noise.freespace_tol_m,
              grazing=False)  # see gauss_newton_step
    T = _levenberg_marquardt(cfg, prim, T, obs, kw)
    res = gauss_newton_step([prim], T, obs, active=torch.zeros(1, dtype=torch.bool), **kw)
    r = res.point_res[torch.isfinite(res.point_res)]
    if not len(r):
        return float("inf"), T
    cost = float(torch.minimum(r, torch.tensor(cfg.gates.gate_m)).square().mean()) + cfg.gates.gate_m ** 2 * float(
        res.freespace.sum()) / len(r)
    return (cost if np.isfinite(cost) else float("inf")), T


def depth_cluster(depth: np.ndarray, mask: np.ndarray, size_m: float, sigma=lambda z: 0 * z) -> np.ndarray:
    """(H, W) bool: the pixels of ``mask`` whose depth (``depth`` (H, W), m; 0 = no reading) lies in the
    densest interval ``size_m`` plus 6 depth noise sigmas long (``sigma``: depth (N,) m -> sigma (N,) m at
    the interval's near end), the nearest of equally dense ones; none where the mask has no reading.
    A mask that bled over its part's edge takes pixels of whatever lies behind it (a floor or wall
    metres further, 30 % of a thin link's mask); a part spans no more depth than its own size, so
    those pixels are not its and would drag its fit off the part."""
    z = depth[mask]
    z = np.sort(z[z > 0])
    out = np.zeros_like(mask, dtype=bool)
    if len(z) == 0:
        return out
    extent = size_m + 6 * sigma(z)
    count = np.searchsorted(z, z + extent, side="right") - np.arange(len(z))
    i = int(np.argmax(count))
    return mask & (depth >= z[i]) & (depth <= z[i] + extent[i])


CONTAINED_SHARE = 0.85  # share of a mask's pixels inside a larger mask above which it is nested in that one


def own_pixels(masks: np.ndarray, k: int, share: float = CONTAINED_SHARE) -> np.ndarray:
    """(H, W) bool: mask k's pixels (``masks`` (M, H, W)) less those of every smaller mask lying nearly
    wholly (over ``share`` of its pixels) inside it; all of them where nothing would be left.

    A mask drawn over a whole assembly (the carcass's over the door and the drawer in front of it)
    holds the nested parts' pixels, which show those parts' surfaces, not its own: fitted to them,
    its part is pulled towards them."""
    mine = masks[k] > 0
    own = mine.copy()
    for j in range(len(masks)):
        other = masks[j] > 0
        if j != k and 0 < other.sum() < mine.sum() and (other & mine).sum() > share * other.sum():
            own &= ~other
    return own if own.any() else mine


def other_placements(tracker, depth: np.ndarray, rgb: np.ndarray | None, T: torch.Tensor,
                     fits: list[list[torch.Tensor]]) -> torch.Tensor:
    """Start poses T (M, 4, 4) with body m moved to another fit of its mask where that explains
    the whole frame better. ``fits[m]``: body m's mask fits (4, 4), its best fit first.
    Each other fit is compared with that best one in the frame as T is (every body's render,
    silhouettes and colour: the frame's truncated cost on the rays around them all); the best one
    that does better is aligned in the frame (``tracker.frame``) and kept if it beats T.

    A mask's points pin only the surface they see: a box seen on one face (a hub behind an arm)
    fits them nearly as well with its edges swapped, where its silhouette covers background
    or a neighbour; only the whole frame tells the two apart."""
    for m, alts in enumerate(fits):
        if len(alts) < 2:
            continue
        tried = [T.clone() for _ in alts]
        for Tm, S in zip(tried, alts):
            Tm[m] = S
        cost = tracker.cost_fn(depth, rgb, [T, *tried], tracker.cfg.gates.max_rays)
        costs = [cost(Tm) for Tm in tried]
        k = int(np.argmin(costs))
        if k == 0:
            continue
        Tm = tracker.frame(depth, tried[k], tried[k], use_prior=False, rgb=rgb)[0]
        cost = tracker.cost_fn(depth, rgb, [T, Tm], tracker.cfg.gates.max_rays)
        c_T, c_m = cost(T), cost(Tm)
        if c_m < c_T:
            log.info("track: start: body %d moved %.0f mm to another fit of its mask (frame cost %.0f -> %.0f)",
                     m, 1000 * float((Tm[m, :3, 3] - T[m, :3, 3]).norm()), c_T, c_m)
            T = Tm
    return T


def _levenberg_marquardt(cfg: "TrackConfig", prim: Primitive, T: torch.Tensor, obs: Observation, kw: dict) -> torch.Tensor:
    """``cfg.init_iterations`` damped Gauss-Newton steps of one primitive (1, 4, 4) from ``T``, each
    kept only where it lowers the step's truncated cost (``StepResult.cost``, judged at the next
    step's start), else retried from the last kept pose with 10x the damping (3x less after a
    kept one, not below ``cfg.steps.damping``): a step from a partly seen box can run far off.
    Stops early once the proposed step moves no pose parameter more than ``cfg.steps.converged_step``."""
    def step(T: torch.Tensor, lam: float):
        return gauss_newton_step([prim], T, obs, w_depth=cfg.noise.w_depth, w_silhouette=cfg.noise.w_silhouette,
                                 damping=lam, **kw)

    lam = cfg.steps.damping
    res = step(T, lam)
    for _ in range(cfg.init_iterations - 1):
        if res.step_norm < cfg.steps.converged_step:
            break  # the proposed step is negligible; larger damping only shrinks it
        cand = step(res.T, max(lam / 3.0, cfg.steps.damping))
        if cand.cost <= res.cost:
            T, res, lam = res.T, cand, max(lam / 3.0, cfg.steps.damping)
        else:
            lam *= 10.0
            res = res.with_damping(lam)   # the same step from T, more damped
    return T


def same_placement(prim: Primitive, T: torch.Tensor, S: torch.Tensor, tol_m: float = 1e-4,
                   tol_rad: float = 1e-3) -> bool:
    """Whether poses T and S (4, 4) put the same shape in the same place: centres within ``tol_m``
    and ``T^-1 S``'s rotation within ``tol_rad`` of a rotation mapping the shape onto itself (a box:
    half-turns about its axes, quarter-turns about an axis with equal sides; a capsule or cylinder:
    any spin about its axis and the half-turn that flips it; a sphere: any)."""
    if float((T[:3, 3] - S[:3, 3]).norm()) > tol_m:
        return False
    if prim.kind == "sphere":
        return True
    D = (T[:3, :3].T @ S[:3, :3]).numpy()
    if prim.kind in ("capsule", "cylinder"):
        return abs(D[2, 2]) > np.cos(tol_rad)
    if prim.kind != "box":
        return bool(np.arccos(np.clip((np.trace(D) - 1) / 2, -1, 1)) < tol_rad)
    h = np.asarray(prim.half_size)
    P = np.round(D)   # the nearest signed permutation, if D is near one
    if np.abs(P).sum(0).tolist() != [1, 1, 1] or np.abs(P).sum(1).tolist() != [1, 1, 1] or np.linalg.det(P) < 0:
        return False
    perm = np.abs(P).argmax(0)
    if np.abs(h[perm] - h).max() > 1e-9:
        return False
    return bool(np.arccos(np.clip((np.trace(P.T @ D) - 1) / 2, -1, 1)) < tol_rad)


def surface_fit(prim: Primitive, T: torch.Tensor, pts: torch.Tensor, scale: float, iterations: int) -> torch.Tensor:
    """The pose (1, 4, 4) near ``T`` that puts the world points ``pts`` (N, 3) on the surface of
    ``prim``: Levenberg-Marquardt on sum Huber(signed distance, ``scale`` m) over the body twist,
    a step kept only where it lowers that sum. Written here because the residual is the
    primitives' own closed-form SDF (``sdf_and_grad``), which no ICP library takes."""
    P = torch.as_tensor(pts, dtype=FLOAT)
    if len(P) < 6:
        return T
    P_t = P.T.contiguous()   # (3, N): rotated as R^T X, X^T R's values at a fraction of its cost

    def evaluate(T: torch.Tensor):
        """Signed distances (N,) at pose T, their Huber cost and what ``normal`` needs."""
        R, t = T[0, :3, :3], T[0, :3, 3]
        x_t = P_t - t.unsqueeze(-1)
        d, g = sdf_and_grad(prim, (R.T @ x_t).T)
        cost = float(torch.where(d.abs() < scale, 0.5 * d * d, scale * (d.abs() - 0.5 * scale)).sum())
        return d, cost, (R, x_t, g)

    def normal(d: torch.Tensor, R: torch.Tensor, x_t: torch.Tensor, g: torch.Tensor):
        """The IRLS normal equations (H (6, 6), g (6,)) at a kept pose (a rejected step needs none)."""
        n = (R @ g.T.contiguous()).T                            # world normals
        J = torch.cat([-n, torch.cross(n, x_t.T, dim=-1)], 1)   # d sdf / d (v, w) of perturb's twist
        Jw = J * huber_weights(d, scale)[:, None]
        return Jw.T @ J, Jw.T @ d

    lam = 1e-3
    d, c, geo = evaluate(T)
    H, g = normal(d, *geo)
    for it in range(iterations):
        step = -torch.linalg.solve(H + lam * torch.diag(torch.diag(H)) + 1e-12 * torch.eye(6, dtype=FLOAT), g)
        Tn = perturb(T[0], step)[None]
        d2, c2, geo2 = evaluate(Tn)
        if c2 <= c:
            T, d, c, lam = Tn, d2, c2, max(lam / 3.0, 1e-6)
            if it < iterations - 1:
                H, g = normal(d, *geo2)
        else:
            lam *= 10.0
    return T
