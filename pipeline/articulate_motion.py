"""Articulate's reading of the tracks: which frames are a tracker's glitches, and whether a
fitted joint's coordinate moves at all.

``poorly_fit_frames``: frames where the tracker's own depth residual stands out from the
recording's usual level; articulate treats them as lost. ``glitch_frames``: frames where a
body's tracked position jumps off the path its neighbouring frames trace and comes back;
articulate treats them as lost. ``still_reason``: a prismatic or
revolute joint fitted to a pair shows motion only where its coordinate's spread is significant
against the pair's full noise model (``coordinate_sigma``: each body's noise along its own
axes, the rotations its shape cannot show) and against the coordinate's own frame-to-frame
jitter (``steady_motion_sigma``). ``at_rest``: a body whose weld to the world holds in every
frame it is seen in. Not here: the joint fits themselves
(``vid2sim.models.joints.fit``), the tree (``vid2sim.pipeline.articulate``).
"""
from __future__ import annotations

from itertools import combinations

import numpy as np
from scipy.ndimage import median_filter

from vid2sim.models.joints import fit

STEADY_WINDOW = 5  # frames of the running median a joint coordinate's motion is read from (steady_motion_sigma)
STEADY_MIN_RUNS = 8  # runs of 4 consecutive inlier frames needed to measure a coordinate's jitter
POOR_FIT_MAX_SHARE = 0.5  # at most this share of the frames are set aside as poorly fit (poorly_fit_frames)
GLITCH_MAX_SHARE = 0.25  # at most this share of a body's frames are set aside as glitches (glitch_frames)


def poorly_fit_frames(residual: np.ndarray, ratio: float, margin_m: float,
                      max_share: float = POOR_FIT_MAX_SHARE, seen: np.ndarray | None = None) -> np.ndarray:
    """(T,) bool: frames whose tracking residual (T,) (m: rms distance of the bodies' depth
    points to their fitted shapes, ``PoseTracks.residual``) exceeds both ``ratio`` times and
    ``margin_m`` more than its usual level, the 25th percentile over the frames. That level is
    set by the depth noise; a frame well above it has a body fitted off its points (far, noisy
    depth: the tracker slips for a few frames, by 2-25 cm, then recovers), and its poses are
    not evidence for a joint. At most ``max_share`` of the frames, the worst, are flagged;
    ratio <= 0 flags none. ``seen`` (T,) bool: frames where some body was found (default all);
    the usual level and the share are taken over those only and no other frame is flagged (a
    frame where every body is lost holds no fit, and its residual is the tracker's stand-in)."""
    r = np.asarray(residual, float)
    seen = np.ones(len(r), bool) if seen is None else np.asarray(seen, bool)
    if ratio <= 0 or not seen.any():
        return np.zeros(len(r), bool)
    usual = np.percentile(r[seen], 25)
    poor = seen & (r > ratio * usual) & (r > usual + margin_m)
    cap = int(max_share * seen.sum())
    if poor.sum() > cap:
        keep = np.argsort(-np.where(poor, r, -np.inf), kind="stable")[:cap]
        poor = np.zeros(len(r), bool)
        poor[keep] = True
    return poor


def _off_path(p: np.ndarray, ok: np.ndarray, medians: float) -> tuple[np.ndarray, float]:
    """How far each position p (T, 3) lies off the path of its neighbours: quadratics in time
    through two of the three nearest ``ok`` frames on each side (leave-one-out predictions; two
    of three, so that a glitch beside a frame does not put that frame off the path too). ->
    ((T,) the least distance (m) from those quadratics that pass their own four frames within
    ``medians`` times the median residual of the quadratics through the two nearest on each
    side, nan where none does, the frame is not ok or lacks the neighbours; the median
    distance from the quadratics through the two nearest on each side, the scale of the body's
    jitter). A kink in the path (a landing) leaves no quadratic across it that passes its
    frames, so it is no glitch and the frames beside it stay."""
    idx = np.flatnonzero(ok)
    n = len(idx)
    near = np.arange(n)[:, None] + np.array([-3, -2, -1, 1, 2, 3])  # (n, 6) neighbours' places in idx
    have = (near >= 0) & (near < n)
    dist, res = np.full((9, len(p)), np.nan), np.full((9, len(p)), np.nan)
    fours = [left + right for left in combinations(range(3), 2) for right in combinations(range(3, 6), 2)]
    for k, four in enumerate(fours):
        use = have[:, four].all(1)
        if not use.any():
            continue
        nb, t = idx[near[use][:, four]], idx[use]                     # (u, 4) and (u,) frame numbers
        dt = (nb - t[:, None]).astype(float)
        A = np.stack([np.ones_like(dt), dt, dt**2], -1)
        coef = np.linalg.pinv(A) @ p[nb]                              # (u, 3, 3): value, velocity, acceleration
        dist[k, t] = np.linalg.norm(p[t] - coef[:, 0], axis=1)
        res[k, t] = np.linalg.norm(A @ coef - p[nb], axis=(1, 2))
    nearest = fours.index((1, 2, 3, 4))
    if np.isnan(dist[nearest]).all():
        return np.full(len(p), np.nan), np.nan
    smooth = res <= medians * np.nanmedian(res[nearest])
    least = np.where(smooth, dist, np.inf).min(0)
    least[~np.isfinite(least)] = np.nan
    return least, float(np.nanmedian(dist[nearest]))


def glitch_frames(W: np.ndarray, valid: np.ndarray, medians: float, floor_m: float,
                  max_share: float = GLITCH_MAX_SHARE) -> np.ndarray:
    """(T, M) frames where a body's tracked position jumps off the path its neighbouring frames
    trace and comes back: a tracker's glitch (tree5, RealSense-like seed 20: arm_b 54 and 20 mm
    off the truth in frames 10 and 12, 3-7 mm in the frames around). Per body, the frame
    farthest from the path of its valid neighbours (``_off_path``) is a glitch while that
    distance exceeds ``medians`` times the body's median distance, and ``floor_m``; it is set
    aside and the distances computed again, at most ``max_share`` of the body's frames. Smooth
    motion at 30 fps leaves under a mm (a 0.3-m pendulum at 60 mm a frame: 0.5 mm); white noise
    of std s about 2 s (median), so a glitch is beyond 6 s. A frame beside a glitch is none
    (set aside, the glitch leaves its neighbours' path short: at a landing, frame after frame
    went), so two glitches in a row are one at most. W: (T, M, 4, 4) world_from_body; valid:
    (T, M) frames the body is seen."""
    out = np.zeros(valid.shape, bool)
    for m in range(W.shape[1]):
        ok = valid[:, m].copy()
        for _ in range(int(max_share * ok.sum())):
            d, scale = _off_path(W[:, m, :3, 3], ok, medians)
            if np.isnan(d).all():
                break
            d[np.convolve(out[:, m], np.ones(3), "same") > 0] = np.nan  # beside a glitch: its own path is short
            if np.isnan(d).all():
                break
            t = int(np.nanargmax(d))
            if d[t] <= max(medians * scale, floor_m):
                break
            ok[t], out[t, m] = False, True
    return out


def coordinate_sigma(f: fit.JointFit, X: np.ndarray, st: fit.FitSettings) -> float:
    """Standard deviation (m or rad) of one frame's coordinate of the 1-dof joint ``f`` under the
    pair's full noise model (``fit.whitening`` with each body's noise along its own axes and
    the rotations its shape cannot show): 1 / sqrt(|L J|^2), J (6,) the derivative of the child's
    pose (position, rotation) along q, L the whitening, median information over the fit's
    inlier frames. X: (T, 4, 4) the child in the parent's frame. A slider along a rod's axis
    (10 mm there) or a hinge turning only a ball's unseen orientation is measured against that
    noise, not the isotropic stand-in ``fit.q_sigma`` uses."""
    Lw = fit.whitening(X, st.sigma_pos, st.sigma_rot, st.parent_noisy, st.child_axes, st.parent_axes)[f.inliers]
    s = np.asarray(f.axis, float)
    J = np.zeros((len(Lw), 6))
    if f.kind == "prismatic":
        J[:, :3] = s
    else:
        p = fit.predict(f.kind, f.axis, f.pivot, f.ref, f.q)[f.inliers, :3, 3]
        J[:, :3], J[:, 3:] = np.cross(s, p - np.asarray(f.pivot, float)), s
    info = (np.einsum("tij,tj->ti", Lw, J) ** 2).sum(1)
    return float(1.0 / np.sqrt(np.median(info))) if len(info) else np.inf


def steady_motion_sigma(f: fit.JointFit, window: int = STEADY_WINDOW) -> float | None:
    """How far a 1-dof joint's coordinate moves, in sigmas of its own frame-to-frame jitter:
    the 5-95 % spread of q over the fit's inlier frames after a running median of ``window``
    frames, over that median's noise, sqrt(pi / (2 window)) sigma_j for white noise of std
    sigma_j (the median's efficiency); sigma_j from q's third differences over runs of 4
    consecutive inlier frames (``fit.difference_noise``, the estimator of the pose noise,
    here of the joint's own coordinate). A joint that moves tracks a smooth q: its third
    differences are small and the running median keeps its range (pendulums, rails,
    drawers). A weld whose small parts jitter by more than the noise model says can fit a
    slider along the jitter whose q scatters from frame to frame. None where q has fewer
    than ``STEADY_MIN_RUNS`` such runs (too little to say)."""
    q = f.q[f.inliers]
    if f.kind == "revolute":
        q = np.unwrap(q)
    step = np.diff(np.flatnonzero(f.inliers)) == 1
    run4 = step[2:] & step[1:-1] & step[:-2]
    if run4.sum() < STEADY_MIN_RUNS:
        return None
    sigma_j = float(fit.difference_noise((q[3:] - 3 * q[2:-1] + 3 * q[1:-2] - q[:-3])[run4]))
    smooth = median_filter(q, size=window, mode="nearest")
    spread = float(np.percentile(smooth, 95) - np.percentile(smooth, 5))
    noise = sigma_j * np.sqrt(np.pi / (2 * window))
    return spread / noise if noise > 0 else np.inf


def still_reason(f: fit.JointFit, X: np.ndarray, st: fit.FitSettings, min_sigma: float) -> str:
    """Why the fitting 1-dof joint ``f`` shows no motion ('' where it does): where a body of the
    pair has noise along its own axes (``st.child_axes`` / ``parent_axes``), its coordinate's
    5-95 % spread below ``min_sigma`` of its noise under the pair's full noise model
    (``coordinate_sigma``, times the fit's Birge ratio where that exceeds
    ``max_birge_ratio``, as ``fit.fit_model`` does; with isotropic noise fit's own test
    stands); or its running median below ``min_sigma`` of its own jitter
    (``steady_motion_sigma``)."""
    q = f.q[f.inliers]
    q = np.unwrap(q) if f.kind == "revolute" else q
    spread = float(np.percentile(q, 95) - np.percentile(q, 5))
    b = fit.birge_ratio(f.chi2[f.inliers], 5)
    if st.child_axes is not None or st.parent_axes is not None:
        sq = coordinate_sigma(f, X, st) * (b if b > st.max_birge_ratio else 1.0)
        if spread < min_sigma * sq:
            return f"no significant motion against the bodies' noise along it ({spread / sq:.1f} sigma)"
    z = steady_motion_sigma(f)
    if z is not None and z < min_sigma:
        return f"q jitters: its running median moves {z:.1f} sigma of its jitter"
    return ""


def at_rest(f: fit.JointFit | None, seen: int, max_birge: float) -> bool:
    """Whether ``f``, a body's weld to the world, holds in every one of the ``seen`` frames the
    body is seen in (each frame's chi-square within the fit's inlier gate) with residuals no
    larger than the noise says (``fit.birge_ratio`` at most ``max_birge``): the body stays at
    one pose within its noise, so it is at rest. A part that turns a few noise sigmas (pushed's
    link1 pivoting 5 deg on 2-mm, 1-deg tracks: Birge ratio 1.5-1.7) is not."""
    return f is not None and f.kind == "fixed" and f.fits and int(f.inliers.sum()) >= seen \
        and fit.birge_ratio(f.chi2[f.inliers], 6) <= max_birge
