"""Joint models fitted to a sequence of relative rigid transforms, with model selection.

Input: ``X: (T, 4, 4)`` the child's pose in the parent's frame over time (the parent
may be the world), a validity mask and the noise of that relative pose (position
sigma in metres, rotation sigma in radians). Each joint model explains ``X[t]`` as

    fixed      X(q)       = ref
    prismatic  X(q)       = [I, q s] ref                  q: displacement along s
    revolute   X(q)       = [R(s, q), c - R(s, q) c] ref  q: angle about s through c
    planar     X(x, y, t) = [R(n, t), p_ref - R(n, t) p_ref + x u + y v] ref
                            (rotation about the normal n through the child origin of
                            ``ref``, then translation in the plane; (u, v) =
                            ``se3.plane_basis(n)``)

Fitting follows Heiden et al. 2022, Alg. 6: closed-form hypotheses from two frames
(revolute: s = rotation axis of X_j X_i^-1, pivot from (I - dR) c = dp; prismatic:
s = dp / |dp|; where the child's spin about its own axis is not seen, a rod's, also from
that axis's direction alone: ``_revolute_from_directions``), scored by MSAC on a
noise-normalised per-frame chi-square, then a
least-squares refinement on the inliers with the joint positions eliminated in
closed form (variable projection: for given geometry the best q of each frame is an
``atan2`` / a dot product).

Model selection (Sturm et al. 2011, BIC-like): cost = sum over frames of the
truncated chi-square + ``latent_penalty`` per joint coordinate per frame +
log(#observations) per geometric parameter. A model only *fits* when at least
``min_inlier_ratio`` of the frames are inliers and its joint coordinate moves
significantly beyond its own noise: a 5-95 % spread of q of ``min_motion_sigma``
sigmas, q's sigma from the stated noise (Fisher information), times the fit's Birge
ratio (``birge_ratio``: sqrt of the reduced chi-square) where its residuals exceed the
stated noise by more than ``max_birge_ratio`` (slowly varying tracking errors, which
a coordinate can follow). So a body at rest is ``fixed``, never a revolute joint that
happens to absorb noise. The caller compares costs of fitting models; ``free`` (6
coordinates a frame, zero residual) is the pipeline's fallback for roots and is not
fitted here.

Not here: which pairs to fit, the spanning forest, frames in world coordinates
(``vid2sim.pipeline.articulate``), forward kinematics (``kinematics``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from vid2sim.models import geometry as se3

KINDS = ("fixed", "prismatic", "revolute", "planar")
DOF = {"fixed": 0, "prismatic": 1, "revolute": 1, "planar": 3, "free": 6}
K_GEOM = {"fixed": 6, "prismatic": 8, "revolute": 10, "planar": 8, "free": 0}


@dataclass(frozen=True)
class FitSettings:
    """sigma_pos (m) / sigma_rot (rad): noise of one relative pose (per component)."""

    sigma_pos: float
    sigma_rot: float
    iterations: int = 100          # RANSAC hypotheses per model
    inlier_chi2: float = 45.0      # per-frame chi-square (6 components) for an inlier
    min_inlier_ratio: float = 0.9  # fraction of valid frames that must be inliers
    latent_penalty: float = 2.0    # cost per joint coordinate per frame (AIC-like)
    min_motion_sigma: float = 6.0  # q's 5-95 % spread must exceed this many of its sigmas
    max_birge_ratio: float = 1.3   # a fit's residuals up to this many times the noise are the noise as stated
    seed: int = 0
    parent_noisy: bool = False     # the parent is a tracked body (False: the world)
    # Per-axis noise in each body's own frame ((pos x, y, z) m, (rot x, y, z) rad), from
    # ``estimate_body_noise``; when given it replaces sigma_pos / sigma_rot in the chi-square
    # (those stay as isotropic stand-ins for the closed-form q and the motion test).
    child_axes: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    parent_axes: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    robust_scale: float = 0.0      # > 0: Huber's loss on a frame's chi-square beyond this (``frame_cost``); 0: e


@dataclass(frozen=True)
class JointFit:
    """One fitted model. axis/pivot/ref in the parent frame; q: (T,) or (T, 3)."""

    kind: str
    axis: np.ndarray
    pivot: np.ndarray
    ref: np.ndarray
    q: np.ndarray
    chi2: np.ndarray
    inliers: np.ndarray
    cost: float
    fits: bool
    why: str = ""


# ----------------------------------------------------------------- model algebra
def _vee_asym(Rd: np.ndarray) -> np.ndarray:
    return np.stack([Rd[..., 2, 1] - Rd[..., 1, 2], Rd[..., 0, 2] - Rd[..., 2, 0], Rd[..., 1, 0] - Rd[..., 0, 1]], -1)


def _angle_terms(Rd: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """tr(R(s, q)^T Rd) = a cos q + b sin q + const."""
    a = np.trace(Rd, axis1=-2, axis2=-1) - np.einsum("i,tij,j->t", s, Rd, s)
    return a, _vee_asym(Rd) @ s


def solve_q(kind: str, X: np.ndarray, axis, pivot, ref: np.ndarray, sp: float, sr: float) -> np.ndarray:
    """Best joint coordinate per frame for fixed geometry (exact for the weighted
    Frobenius-rotation + position objective). X: (T, 4, 4) -> (T,) or (T, 3)."""
    s = np.asarray(axis, float)
    if kind == "fixed":
        return np.zeros((len(X), 0))
    if kind == "prismatic":
        return (X[:, :3, 3] - ref[:3, 3]) @ s
    Rd = X[:, :3, :3] @ ref[:3, :3].T
    a_r, b_r = _angle_terms(Rd, s)
    if kind == "revolute":
        c = np.asarray(pivot, float)
        x = ref[:3, 3] - c
        y = X[:, :3, 3] - c
        a_p = y @ x - (y @ s) * (x @ s)
        b_p = np.cross(x, y) @ s
        return np.arctan2(b_r / sr**2 + 2 * b_p / sp**2, a_r / sr**2 + 2 * a_p / sp**2)
    if kind == "planar":
        u, v = se3.plane_basis(s)
        d = X[:, :3, 3] - ref[:3, 3]
        return np.stack([d @ u, d @ v, np.arctan2(b_r, a_r)], -1)
    raise ValueError(f"unknown joint model {kind!r}")


def predict(kind: str, axis, pivot, ref: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Child pose in the parent frame for joint coordinates q -> (T, 4, 4)."""
    s = np.asarray(axis, float)
    T = len(q)
    out = np.broadcast_to(ref, (T, 4, 4)).copy()
    if kind == "prismatic":
        out[:, :3, 3] += q[:, None] * s
    elif kind == "revolute":
        c = np.asarray(pivot, float)
        R = se3.rot_axis(s, q)
        out[:, :3, :3] = R @ ref[:3, :3]
        out[:, :3, 3] = c + (R @ (ref[:3, 3] - c))
    elif kind == "planar":
        u, v = se3.plane_basis(s)
        out[:, :3, :3] = se3.rot_axis(s, q[:, 2]) @ ref[:3, :3]
        out[:, :3, 3] += q[:, :1] * u + q[:, 1:2] * v
    elif kind != "fixed":
        raise ValueError(f"unknown joint model {kind!r}")
    return out


def whitening(X: np.ndarray, sp: float, sr: float, parent_noisy: bool,
              child_axes=None, parent_axes=None) -> np.ndarray:
    """(T, 6, 6) matrices L with L @ r ~ N(0, I) for the residual r of ``residuals``.

    Noise model: each tracked pose has position noise e ~ N(0, R S_p R^T) (S_p diagonal in
    the body's own axes; sp^2 I when no axes are given) and orientation noise R exp(n),
    n ~ N(0, S_r) (body axes; sr^2 I). For a relative pose X = W_P^-1 W_C = [R, p] with a
    tracked parent, to first order dp = R_P^T (e_C - e_P) + p x n_P and dtheta (left,
    parent frame) = -n_P + R n_C, so
    cov = [[R S_pC R^T + S_pP + [p]x S_rP [p]x^T, -[p]x S_rP], [., S_rP + R S_rC R^T]]
    (all in the parent frame, so only X is needed); the world as parent is noise-free.
    Per-axis noise matters for thin parts: a capsule tracked in noisy depth is located
    along its own axis only by its end caps (realistic-noise cartpole: 2.9 mm along the
    pole, 0.5-0.9 mm across, estimated from the track).
    """
    T = len(X)
    if child_axes is None and not parent_noisy:
        return np.broadcast_to(np.diag([1 / sp] * 3 + [1 / sr] * 3), (T, 6, 6))
    cp, cr = (np.full(3, sp), np.full(3, sr)) if child_axes is None else map(np.asarray, child_axes)
    R = X[:, :3, :3]
    rot = lambda d: R @ (np.asarray(d, float)[:, None] ** 2 * np.swapaxes(R, 1, 2))  # noqa: E731  R diag(d^2) R^T
    C = np.zeros((T, 6, 6))
    C[:, :3, :3] = rot(cp)
    C[:, 3:, 3:] = rot(cr)
    if parent_noisy:
        pp, pr = (np.full(3, sp), np.full(3, sr)) if parent_axes is None else map(np.asarray, parent_axes)
        p = X[:, :3, 3]
        P = np.zeros((T, 3, 3))
        P[:, 0, 1], P[:, 0, 2], P[:, 1, 2] = -p[:, 2], p[:, 1], -p[:, 0]
        P[:, 1, 0], P[:, 2, 0], P[:, 2, 1] = p[:, 2], -p[:, 1], p[:, 0]
        Sr = np.diag(np.asarray(pr, float) ** 2)
        C[:, :3, :3] += np.diag(np.asarray(pp, float) ** 2) + P @ Sr @ np.swapaxes(P, 1, 2)
        C[:, :3, 3:] = -P @ Sr
        C[:, 3:, :3] = -Sr @ np.swapaxes(P, 1, 2)
        C[:, 3:, 3:] += Sr
    return np.linalg.inv(np.linalg.cholesky(C))


def residuals(X: np.ndarray, Xhat: np.ndarray, Lw: np.ndarray) -> np.ndarray:
    """(T, 6) whitened residual: child-origin position, then rotation (left, parent frame)."""
    dp = X[:, :3, 3] - Xhat[:, :3, 3]
    dr = se3.log_so3(X[:, :3, :3] @ np.swapaxes(Xhat[:, :3, :3], 1, 2))
    return np.einsum("tij,tj->ti", Lw, np.concatenate([dp, dr], 1))


def chi2(X, Xhat, Lw) -> np.ndarray:
    return (residuals(X, Xhat, Lw) ** 2).sum(1)


def q_sigma(kind: str, axis, pivot, ref, sp: float, sr: float) -> float:
    """Standard deviation of one frame's joint coordinate (Fisher information)."""
    if kind == "prismatic":
        return sp
    if kind == "revolute":
        x = ref[:3, 3] - np.asarray(pivot)
        r_perp2 = x @ x - (x @ axis) ** 2
        return 1.0 / np.sqrt(1.0 / sr**2 + r_perp2 / sp**2)
    return sp  # planar: translation coordinates


# ----------------------------------------------------------------- hypotheses
def _hypothesis(kind: str, X: np.ndarray, idx: np.ndarray, min_step: tuple[float, float],
                spin_axis: int | None = None, great_circle: bool = False):
    """Closed-form (axis, pivot, ref) from frames idx (2 or 3 of them), or None. spin_axis:
    the child's body axis about which its rotation is not seen (a rod's own axis), or None;
    a revolute hypothesis then comes from that axis's direction (``_revolute_from_directions``)."""
    i, j = idx[0], idx[1]
    ref = X[i]
    if kind == "fixed":
        return np.array([0.0, 0.0, 1.0]), ref[:3, 3].copy(), ref
    if kind == "revolute" and spin_axis is not None:
        return _revolute_from_directions(X, idx, spin_axis, min_step[1], great_circle)
    if kind == "revolute" and len(idx) >= 3:  # the two frames turned farthest apart: the best-posed axis
        i, j = max(((i, j), (i, idx[2]), (j, idx[2])),
                   key=lambda ij: float(se3.rotation_angle(X[ij[1], :3, :3] @ X[ij[0], :3, :3].T)))
        ref = X[i]
    dR = X[j, :3, :3] @ X[i, :3, :3].T
    dp = X[j, :3, 3] - dR @ X[i, :3, 3]
    w = se3.log_so3(dR)
    th = np.linalg.norm(w)
    if kind == "prismatic":
        d = X[j, :3, 3] - X[i, :3, 3]
        n = np.linalg.norm(d)
        return None if n < min_step[0] else (d / n, X[i, :3, 3].copy(), ref)
    if kind == "revolute":
        if th < min_step[1]:
            return None
        s = w / th
        return s, _pivot(dR, dp, s), ref
    if kind == "planar":
        if th >= 3 * min_step[1]:
            n = w / th
        else:
            k = idx[2]
            n = np.cross(X[j, :3, 3] - X[i, :3, 3], X[k, :3, 3] - X[i, :3, 3])
            if np.linalg.norm(n) < min_step[0] ** 2:
                return None
            n = n / np.linalg.norm(n)
        return n, X[i, :3, 3].copy(), ref
    raise ValueError(kind)


def _revolute_from_directions(X: np.ndarray, idx: np.ndarray, k: int, min_angle: float,
                              great_circle: bool = False):
    """Revolute (axis, pivot, ref) from 3 frames idx of a child whose spin about its body
    axis k is not seen: that axis's direction d (column k of X's rotation, parent frame)
    turns about the hinge axis s on a cone, so s is normal to the plane of the three tips
    of d (``great_circle``: of the first two and the origin, for a hinge across the rod,
    well posed when d turns by little), the angle from frame idx[0] to idx[1] is that of d
    projected on the plane normal to s, and the pivot solves (I - dR) c = dp as for a fully
    seen rotation. None where d turns by less than about min_angle (rad)."""
    i, j, m = idx[:3]
    d = X[[i, j, m], :3, k]
    n = np.cross(d[0], d[1]) if great_circle else np.cross(d[1] - d[0], d[2] - d[0])
    if np.linalg.norm(n) < (min_angle if great_circle else min_angle**2):
        return None
    s = n / np.linalg.norm(n)
    u0, u1 = d[0] - (d[0] @ s) * s, d[1] - (d[1] @ s) * s
    th = np.arctan2(np.cross(u0, u1) @ s, u0 @ u1)
    if abs(th) < min_angle:
        return None
    dR = se3.rot_axis(s, th)
    dp = X[j, :3, 3] - dR @ X[i, :3, 3]
    return s, _pivot(dR, dp, s), X[i]


def _pivot(dR: np.ndarray, dp: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The point c (3,) of the plane through the origin normal to the unit axis s that best solves
    (I - dR) c = dp (least squares in that plane), dR (3, 3) a rotation about s, dp (3,) the
    translation of the same motion: the pivot of a hinge hypothesis. s spans the null space of
    I - dR; a minimum-norm solve of the full 3-D system may keep the rounding noise of that
    singular value, about 1e-17, as a real one and put c 1e12 m along s (7 % of random
    3-5 deg hypotheses)."""
    u, v = se3.plane_basis(s)
    B = np.stack([u, v], 1)
    return B @ np.linalg.lstsq((np.eye(3) - dR) @ B, dp, rcond=None)[0]


def spin_axis(rot_sigma) -> int | None:
    """The one body axis whose rotation noise rot_sigma (3,) rad exceeds 10 x both others' (a
    rod's own axis, its spin not seen), or None."""
    if rot_sigma is None:
        return None
    r = np.asarray(rot_sigma, float)
    k = int(np.argmax(r))
    return k if r[k] > 10 * np.sort(r)[1] else None


# ----------------------------------------------------------------- refinement
def _unpack(kind, x, s0, c0, ref0):
    u, v = se3.plane_basis(s0)
    s = s0 + x[0] * u + x[1] * v
    s = s / np.linalg.norm(s)
    k = 2
    c = c0
    if kind == "revolute":
        c = c0 + x[2] * u + x[3] * v
        k = 4
    ref = se3.make(se3.exp_so3(x[k:k + 3]) @ ref0[:3, :3], ref0[:3, 3] + x[k + 3:k + 6])
    return s, c, ref


def _refine(kind, X, mask, s0, c0, ref0, sp, sr, Lw):
    Xi, Li = X[mask], Lw[mask]
    if kind == "fixed":
        ref = se3.mean_pose(Xi)
        return s0, ref[:3, 3].copy(), ref
    n = (4 if kind == "revolute" else 2) + 6

    def f(x):
        s, c, ref = _unpack(kind, x, s0, c0, ref0)
        q = solve_q(kind, Xi, s, c, ref, sp, sr)
        return residuals(Xi, predict(kind, s, c, ref, q), Li).ravel()

    sol = least_squares(f, np.zeros(n), method="trf", x_scale="jac", max_nfev=60, loss="soft_l1", f_scale=3.0)
    return _unpack(kind, sol.x, s0, c0, ref0)


def _canonical(kind, s, c, ref):
    """Pivot of a revolute joint: the axis point closest to the child origin of ref."""
    if kind == "revolute":
        x = ref[:3, 3] - c
        c = c + (x @ s) * s
    return s, c


# ----------------------------------------------------------------- RANSAC + selection
def fit_model(kind: str, X: np.ndarray, valid: np.ndarray, cfg: FitSettings, rng: np.random.Generator) -> JointFit:
    """RANSAC + refinement of one model kind; ``fits`` says whether it explains X: at least
    ``min_inlier_ratio`` of the valid frames within ``inlier_chi2``, and (a joint with
    coordinates) a 5-95 % spread of q of at least ``min_motion_sigma`` times q's noise,
    that noise scaled by the fit's own ``birge_ratio`` where it exceeds ``max_birge_ratio``."""
    Lw = whitening(X, cfg.sigma_pos, cfg.sigma_rot, cfg.parent_noisy, cfg.child_axes, cfg.parent_axes)
    sp, sr = cfg.sigma_pos, cfg.sigma_rot
    if cfg.parent_noisy:  # isotropic stand-ins, only to weight the closed-form q
        d = float(np.median(np.linalg.norm(X[valid, :3, 3], axis=1))) if valid.any() else 0.0
        sp, sr = float(np.sqrt(2 * sp**2 + (sr * d) ** 2)), float(np.sqrt(2) * sr)
    idx_valid = np.flatnonzero(valid)
    n_valid = len(idx_valid)
    T = len(X)
    thr = cfg.inlier_chi2
    min_step = (6 * sp, 6 * sr)
    spin = spin_axis(cfg.child_axes[1]) if kind == "revolute" and cfg.child_axes is not None else None
    best, best_score = None, np.inf
    n_samples = 1 if kind == "fixed" else 3
    iters = min(cfg.iterations, n_valid) if kind == "fixed" else cfg.iterations
    for it in range(iters):
        if n_valid < n_samples:
            break
        if kind == "fixed":
            idx = idx_valid[[rng.integers(n_valid)]] if it else idx_valid[[n_valid // 2]]
            idx = np.array([idx[0], idx[0]])
        else:
            idx = rng.choice(idx_valid, size=n_samples, replace=False)
        # a child with an unseen spin: hypotheses from its full rotation and from its seen axis
        for hyp in [_hypothesis(kind, X, idx, min_step)] + ([] if spin is None else [
                _hypothesis(kind, X, idx, min_step, spin), _hypothesis(kind, X, idx, min_step, spin, True)]):
            if hyp is None:
                continue
            s, c, ref = hyp
            q = solve_q(kind, X, s, c, ref, sp, sr)
            e = chi2(X, predict(kind, s, c, ref, q), Lw)
            score = np.minimum(e[valid], thr).sum()
            if score < best_score:
                best, best_score = hyp, score
    empty = np.zeros((T,) if DOF[kind] == 1 else (T, DOF[kind]))
    if best is None:
        return JointFit(kind, np.array([0.0, 0.0, 1.0]), np.zeros(3), np.eye(4), empty, np.full(T, np.inf),
                        np.zeros(T, bool), np.inf, False, "no hypothesis (no motion)")
    s, c, ref = best
    for _ in range(2):
        q = solve_q(kind, X, s, c, ref, sp, sr)
        inl = valid & (chi2(X, predict(kind, s, c, ref, q), Lw) <= thr)
        # refining a model that explains far too few frames cannot make it fit: save the time
        if inl.sum() < max(n_samples, 3) or inl.sum() < (cfg.min_inlier_ratio - 0.25) * n_valid:
            break
        s, c, ref = _refine(kind, X, inl, s, c, ref, sp, sr, Lw)
    s, c = _canonical(kind, s, c, ref)
    q = solve_q(kind, X, s, c, ref, sp, sr)
    e = chi2(X, predict(kind, s, c, ref, q), Lw)
    inl = valid & (e <= thr)
    cost = (frame_cost(e[valid], thr, cfg.robust_scale).sum() + cfg.latent_penalty * DOF[kind] * n_valid
            + np.log(6 * max(n_valid, 1)) * K_GEOM[kind])
    ratio = inl.sum() / max(n_valid, 1)
    fits, why = ratio >= cfg.min_inlier_ratio, f"inlier ratio {ratio:.2f}"
    if fits and DOF[kind] >= 1:
        # q's own noise, scaled by the fit's Birge ratio where its residuals exceed the
        # stated noise (slowly varying tracking errors that third differences miss)
        b = birge_ratio(e[inl], 6 - DOF[kind])
        b = b if b > cfg.max_birge_ratio else 1.0  # within the ratio's own scatter: the noise as stated
        qq = q[inl] if q.ndim == 1 else q[inl][:, 2 if kind == "planar" else 0]
        spread = np.percentile(qq, 95) - np.percentile(qq, 5)
        sq = b * (sr if kind == "planar" else q_sigma(kind, s, c, ref, sp, sr))
        if kind == "planar":
            qt = q[inl][:, :2]
            spread = max(spread / sq, np.ptp(np.percentile(qt, [5, 95], axis=0), axis=0).max() / (b * sp))
            sq = 1.0
        if spread < cfg.min_motion_sigma * sq:
            fits, why = False, f"no significant motion (spread {spread / sq:.1f} sigma, Birge ratio {b:.2f})"
    return JointFit(kind, s, c, ref, q, e, inl, float(cost), bool(fits), why)


def frame_cost(e: np.ndarray, thr: float, scale: float = 0.0) -> np.ndarray:
    """Cost of each frame's chi-square e (n,), truncated at ``thr``: e itself, or, for ``scale``
    k > 0, Huber's loss on the whitened residual's norm r = sqrt(e) at r = sqrt(k): e where
    e <= k, 2 sqrt(k e) - k beyond (linear in r). Frames far off a model (a few frames of
    tracking error) then weigh less against its complexity penalty than frames that fit it."""
    e = np.minimum(e, thr)
    return np.where(e <= scale, e, 2 * np.sqrt(scale * e) - scale) if scale > 0 else e


def birge_ratio(e: np.ndarray, k: int) -> float:
    """max(1, sqrt(reduced chi-square)) of a fit: e (n,) per-frame chi-square of its inlier
    frames, each with k residual degrees of freedom (6 - the joint's coordinates). Robust:
    median(e) against the median of a chi-square with k degrees of freedom
    (``chi2_median``). 1 when the residuals are no larger than the stated noise says; above
    1, the factor by which the noise is underestimated, and by which the uncertainty of
    the joint coordinate is scaled (Birge 1932)."""
    if len(e) == 0 or k <= 0:
        return 1.0
    return float(np.sqrt(max(1.0, np.median(e) / chi2_median(k))))


def chi2_median(k: int) -> float:
    """Median of a chi-square with k degrees of freedom (Wilson-Hilferty)."""
    return k * (1 - 2 / (9 * k)) ** 3


def select(X: np.ndarray, valid: np.ndarray, cfg: FitSettings, kinds=("fixed", "prismatic", "revolute")
           ) -> tuple[JointFit | None, dict[str, JointFit]]:
    """Fit every kind; the best is the fitting one of lowest cost (None if none fits)."""
    rng = np.random.default_rng(cfg.seed)
    fits = {k: fit_model(k, X, valid, cfg, rng) for k in kinds}
    ok = [f for f in fits.values() if f.fits]
    return (min(ok, key=lambda f: f.cost) if ok else None), fits


def estimate_noise(world_from_body: np.ndarray, valid: np.ndarray | None = None) -> tuple[float, float]:
    """Per-component noise (metres, radians) of tracked poses, from the data alone.

    world_from_body: (T, M, 4, 4); valid: (T, M) bool. White noise of variance s^2
    gives third differences of variance 20 s^2, while smooth motion sampled fast
    enough contributes little, so s = 1.4826 MAD(third differences) / sqrt(20)
    (median over all bodies and components: robust to a few fast frames). Rotations
    use second differences of the body-frame increments log(R_t^T R_t+1).
    """
    W = np.asarray(world_from_body, float)
    T, M = W.shape[:2]
    valid = np.ones((T, M), bool) if valid is None else valid
    dp, dr = [], []
    for b in range(M):
        d = _third_differences(W[:, b], valid[:, b], body_axes=False)
        if d is not None:
            dp.append(d[0].ravel())
            dr.append(d[1].ravel())
    if not dp:
        return 0.0, 0.0
    return float(difference_noise(np.concatenate(dp))), float(difference_noise(np.concatenate(dr)))


def difference_noise(d: np.ndarray) -> np.ndarray | float:
    """Noise std behind third differences d (n,) or (n, k) (per column): white noise of std s
    gives third differences of std sqrt(20) s; a robust spread (1.4826 x median absolute
    deviation) ignores the few differences that real motion makes large."""
    d = np.asarray(d, float)
    return 1.4826 * np.median(np.abs(d - np.median(d, 0)), 0) / np.sqrt(20)


def _third_differences(W: np.ndarray, ok: np.ndarray, body_axes: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
    """One body's (n, 3) position third differences (in its own axes, else the world's)
    and (n, 3) rotation second differences (body frame), over runs of 4 valid frames;
    None if there are none."""
    run = ok[3:] & ok[2:-1] & ok[1:-2] & ok[:-3]
    if len(W) < 4 or not run.any():
        return None
    p, R = W[:, :3, 3], W[:, :3, :3]
    d3 = p[3:] - 3 * p[2:-1] + 3 * p[1:-2] - p[:-3]
    if body_axes:
        d3 = np.einsum("tji,tj->ti", R[1:-2], d3)  # R^T d3
    w = se3.log_so3(np.swapaxes(R[:-1], 1, 2) @ R[1:])
    return d3[run], (w[2:] - 2 * w[1:-1] + w[:-2])[run]


def estimate_body_noise(world_from_body: np.ndarray, valid: np.ndarray | None = None,
                        min_frames: int = 20) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Per body, the noise along each of its own axes: ((3,) m, (3,) rad), by the same
    third-difference MAD as ``estimate_noise``; None for a body seen in fewer than
    ``min_frames`` runs of 4 valid frames (too little to say)."""
    W = np.asarray(world_from_body, float)
    T, M = W.shape[:2]
    valid = np.ones((T, M), bool) if valid is None else valid
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for b in range(M):
        d = _third_differences(W[:, b], valid[:, b])
        out.append(None if d is None or len(d[0]) < min_frames else (difference_noise(d[0]), difference_noise(d[1])))
    return out
