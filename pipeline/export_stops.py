"""End stops seen in joint coordinate tracks: where export puts a joint's limits.

A side of a joint (its maximum, +1, or minimum, -1) has a stop when the tracks show one in
either of two ways:

* an impact (``stop_score``): q arrives at its observed extreme and loses its velocity at
  once, staying or bouncing back, a velocity change far larger than the acceleration on
  either side and the track noise explain;
* a rest under load (``dwell_score``): q arrives at its observed extreme with speed and then
  rests there for ``stop_dwell`` frames while the bodies around the joint (its parent, its
  child and the bodies jointed to them; not the world) move on by more than
  ``stop_carried_m``. A free joint carried along by moving neighbours does not stay fixed; a
  turning point does not rest; a joint that rests because the whole mechanism rests shows no
  load. The rest: its scatter about a line looks like white noise (at most 3 times what its
  third differences give); its trend is within the margin (``stop_noise_sigmas`` x that
  scatter or ``stop_tolerance`` of the observed range, whichever is larger); each sample lies
  within twice that many robust stds (median absolute deviation) of the rest's median, or that
  fraction of the range; and no more than the fraction ``stop_outliers`` of the other frames
  (2 at least) lie beyond the rest by more than the margin, in q's running median over 7 frames
  (a tracker's glitch of up to 3 frames, its slow drift). The arrival must be one a smooth
  motion cannot end in: the ``stop_approach`` frames before the rest come from outside it (the
  first half's median below it by at least the margin, none beyond it by more: a joint does not
  pass its stop on the way in, a bounce off the floor does); their speed and deceleration (a
  quadratic) and their position at the last frame, each at its least favourable within 2 noise
  stds, would still carry the joint beyond the rest by more than ``stop_noise_sigmas`` times the
  scatter; and the speed over the last ``stop_window`` of them (so taken) would need more than
  ``stop_accel_ratio`` frames of that braking to shed (a joint braked to rest by friction sheds
  its speed as it arrives). The score is the lesser of the two ratios; the limit is the rest's
  median level.

q is one sample a frame; radians (revolute) or metres (prismatic).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.ndimage import median_filter


def _cfg(cfg):
    if cfg is None:
        from vid2sim.pipeline.export import ExportConfig

        return ExportConfig()
    return cfg


def track_noise(q: np.ndarray) -> float:
    """Standard deviation of white noise on the samples q (T,): the median absolute
    deviation of q's third differences (smooth motion has almost none), over sqrt(20)."""
    d3 = np.diff(np.asarray(q, float), 3)
    if d3.size == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(d3 - np.median(d3))) / math.sqrt(20.0))


def _quadratic_rows(n: int, at_end: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (n,) giving, from n samples one frame apart, the velocity (per frame), the acceleration
    (per frame^2) and the value at the last (``at_end``) or first sample of their least-squares quadratic."""
    s = np.arange(n, dtype=float) - (n - 1 if at_end else 0)
    P = np.linalg.pinv(np.vander(s, 3))  # rows: s^2, s, 1 coefficients
    return P[1], 2.0 * P[0], P[2]


def _velocity_row(n: int, at_end: bool) -> np.ndarray:
    """Row (n,) giving the velocity (per frame) at the last or first of n samples (``_quadratic_rows``)."""
    return _quadratic_rows(n, at_end)[0]


def stop_score(q: np.ndarray, side: int, cfg=None) -> float:
    """How clearly q (T,), one sample a frame, hits an end stop at its observed extreme on
    ``side`` (+1: its maximum, -1: its minimum); above 1 is a stop (``hits_stop``).

    Candidates are the frames t within half a frame's travel plus ``stop_tolerance`` of
    the range (or 3 noise sigmas, ``track_noise``) of the extreme. Quadratics fitted to
    the ``stop_window`` samples before t and after t give the outward velocity v_b at
    t-1 and v_a at t+1; the second differences of those samples (noise std removed)
    bound the joint's acceleration a on either side. A smooth motion changes velocity
    over those 2 frames by about 2a at most (a pendulum's turning point: gravity-like,
    however fast its acceleration varies); an impact somewhere in (t-1, t+1) by far
    more. The score is (v_b - v_a) / (``stop_accel_ratio`` 2a + ``stop_noise_sigmas`` x
    the noise std of v_b - v_a), the best over the candidates. Only arrivals count: v_b
    must carry at least half the change (a bounce loses speed), so a joint kicked away
    from rest at its extreme shows no stop. 0 when no candidate has ``stop_window``
    samples on both sides.
    """
    cfg = _cfg(cfg)
    x = side * np.asarray(q, float)
    w, n = cfg.stop_window, len(x)
    if w < 3 or n < 2 * w + 1:
        return 0.0
    sigma = track_noise(x)
    step = np.abs(np.diff(x))
    reach = 0.5 * np.maximum(np.r_[step, 0.0], np.r_[0.0, step])  # the sample nearest an impact is within half a frame's travel
    near = x + reach >= x.max() - max(cfg.stop_tolerance * float(np.ptp(x)), 3.0 * sigma)
    d2 = np.abs(np.r_[0.0, np.diff(x, 2), 0.0])  # d2[k]: second difference centred on frame k
    vb_row, va_row = _velocity_row(w, True), _velocity_row(w, False)
    noise = cfg.stop_noise_sigmas * sigma * math.sqrt(vb_row @ vb_row + va_row @ va_row)
    best = 0.0
    for t in np.flatnonzero(near[w:n - w]) + w:
        vb, va = vb_row @ x[t - w:t], va_row @ x[t + 1:t + 1 + w]
        jump = vb - va
        if jump <= 0 or vb < 0.5 * jump:
            continue
        # second differences of samples t-w .. t-1 and t+1 .. t+w only (clear of the impact)
        accel = max(float(np.max(np.r_[d2[t - w + 1:t - 1], d2[t + 2:t + w]])) - math.sqrt(6.0) * sigma, 0.0)
        best = max(best, jump / max(cfg.stop_accel_ratio * 2.0 * accel + noise, 1e-12))
    return float(best)


def _travel(v: float, a: float, frames: int) -> float:
    """Distance covered in ``frames`` frames from speed v (per frame) decelerating at a >= 0 (per
    frame^2), never turning back."""
    if v <= 0:
        return 0.0
    if a * frames >= v:
        return v * v / (2.0 * a)
    return v * frames - 0.5 * a * frames * frames


def _dwell_at(x: np.ndarray, t: int, cfg, sigma: float, rows, smooth: np.ndarray) -> tuple[float, float]:
    """(score, level) of a rest under load starting at frame t of x (T,) (side-signed, so the
    extreme is its maximum): 0 unless x[t:t+stop_dwell] is flat and holds the observed
    extreme (judged on ``smooth``, x's running median); else the lesser of the overshoot a smooth
    continuation of the approach would make beyond the resting level, over ``stop_noise_sigmas``
    x the scatter, and the frames its braking would need to shed its arrival speed, over
    ``stop_accel_ratio`` (module docstring). ``rows``: ``_quadratic_rows(stop_approach, True)``."""
    d, m = cfg.stop_dwell, cfg.stop_approach
    rest = x[t:t + d]
    s_idx = np.arange(d, dtype=float)
    slope, icept = np.polyfit(s_idx, rest, 1)
    resid = float(np.std(rest - (slope * s_idx + icept), ddof=2))
    white = math.sqrt(float(np.mean(np.diff(rest, 3) ** 2)) / 20.0)   # the std white noise alone would give
    level = float(np.median(rest))
    scatter = max(resid, white, sigma, 1e-5)
    margin = max(cfg.stop_noise_sigmas * scatter, cfg.stop_tolerance * float(np.ptp(x)))
    r = np.abs(rest - level)
    robust = max(1.4826 * float(np.median(r)), sigma, 1e-5)   # a bounce or a late arrival stands out of this
    if resid > 3.0 * white + 1e-4 or abs(slope) * (d - 1) > margin or r.max() > max(
            2.0 * cfg.stop_noise_sigmas * robust, cfg.stop_tolerance * float(np.ptp(x))):   # moving, not resting
        return 0.0, level
    band = level + margin
    outliers = max(2, int(cfg.stop_outliers * len(x)))
    if int(np.sum(smooth[:t] > band) + np.sum(smooth[t + d:] > band)) > outliers:   # not the observed extreme
        return 0.0, level
    before = x[t - m:t]
    if np.median(before[:m // 2]) > level - margin or smooth[t - m:t].max() > band:   # not an arrival from outside
        return 0.0, level
    v_row, a_row, p_row = rows   # the least favourable within 2 noise stds: the slowest, hardest-braking, furthest back
    v = float(v_row @ before) - 2.0 * scatter * float(np.linalg.norm(v_row))
    a = max(-float(a_row @ before), 0.0) + 2.0 * scatter * float(np.linalg.norm(a_row))
    reach = float(p_row @ before) - 2.0 * scatter * float(np.linalg.norm(p_row)) + _travel(v, a, d)
    w = min(cfg.stop_window, m)   # the arrival's speed over its last frames: a braking that ends in a rest has shed it
    vw = _velocity_row(w, True)
    v_end = float(vw @ x[t - w:t]) - 2.0 * scatter * float(np.linalg.norm(vw))
    shed = v_end / (cfg.stop_accel_ratio * max(a, 1e-12))   # frames the braking would need, over stop_accel_ratio
    return min((reach - level) / (cfg.stop_noise_sigmas * scatter), shed), level


def dwell_score(q: np.ndarray, side: int, moved: np.ndarray | None, cfg=None) -> tuple[float, float]:
    """(score, level): how clearly q (T,) rests under load at its observed extreme on ``side``
    (+1 max, -1 min), above 1 a stop (module docstring), and the resting level there (q's units;
    the median over the whole rest, ``_rest_level``).

    ``moved`` (T, P): world coordinates (m) of points on the bodies around the joint; a rest
    counts only while some coordinate spans more than ``stop_carried_m`` over it. None or
    P = 0 (a joint whose neighbours are only the world): (0, nan)."""
    score, level, _ = _best_rest(q, side, moved, cfg)
    return score, level


def _best_rest(q: np.ndarray, side: int, moved: np.ndarray | None, cfg=None) -> tuple[float, float, int]:
    """(score, level, frame) of ``dwell_score``'s best rest; frame: the first frame of the first rest
    scoring above 1 (-1 where none does)."""
    cfg = _cfg(cfg)
    x = side * np.asarray(q, float)
    d, m, n = cfg.stop_dwell, cfg.stop_approach, len(x)
    if moved is None or moved.size == 0 or d < 3 or m < 3 or n < m + d:
        return 0.0, math.nan, -1
    sigma = track_noise(x)
    rows = _quadratic_rows(m, True)
    smooth = median_filter(x, size=7, mode="nearest")   # a glitch of up to 3 frames is no excursion beyond a rest
    best, where, first = 0.0, math.nan, -1
    for t in range(m, n - d + 1):
        if float(np.ptp(moved[t:t + d], axis=0).max()) <= cfg.stop_carried_m:
            continue
        score, level = _dwell_at(x, t, cfg, sigma, rows, smooth)
        if score > 1.0 and first < 0:
            first = t
        if score > best:
            best, where = score, _rest_level(x, t, d, level)
    return float(best), side * where, first


def _rest_level(x: np.ndarray, t: int, d: int, level: float) -> float:
    """The median of x (T,) over the rest starting at frame t: its first d samples and those after
    them up to the first that leaves the first d samples' level by more than their spread."""
    spread = max(float(np.ptp(x[t:t + d])), 1e-9)
    end = t + d
    while end < len(x) and abs(x[end] - level) <= spread:
        end += 1
    return float(np.median(x[t:end]))


def hits_stop(q: np.ndarray, side: int, cfg=None) -> bool:
    """True when q (T,) shows an end stop at its observed extreme on ``side`` (+1 max, -1 min):
    it arrives there with speed and stays or bounces back (``stop_score`` > 1)."""
    return stop_score(q, side, cfg) > 1.0


def limits(q: np.ndarray, revolute: bool, cfg=None, moved: np.ndarray | None = None) -> tuple[float, float, bool]:
    """(lower, upper, continuous) of a joint from its coordinate track q (T,): a limit only at
    an observed end stop, an impact (at the observed extreme) or a rest under load (at the
    resting level; ``moved`` as in ``dwell_score``); ``continuous`` for a revolute joint with
    none. A revolute joint with a stop on one side only gets the other limit one full turn
    from it (the same stop met from the other side); a prismatic joint's free side lies
    ``free_prismatic_range_m`` beyond its observed extreme."""
    cfg = _cfg(cfg)
    lo, hi = (float(q.min()), float(q.max())) if q.size else (0.0, 0.0)
    stop = {}
    for side in (-1, 1):
        ext = lo if side < 0 else hi
        if hits_stop(q, side, cfg):
            stop[side] = ext
            continue
        score, level = dwell_score(q, side, moved, cfg)
        if score > 1.0:
            stop[side] = level
    if revolute:
        if not stop:
            return lo, hi, True
        lo = stop.get(-1, min(stop.get(1, hi) - 2.0 * math.pi, lo))
        hi = stop.get(1, max(lo + 2.0 * math.pi, hi))
        return lo, hi, False
    free = cfg.free_prismatic_range_m
    return stop.get(-1, lo - free), stop.get(1, hi + free), False


def neighbourhood_points(art, poses, joint, size: float = 0.1) -> np.ndarray:
    """(T, 9 P): world coordinates (m) of the centre and of two points ``size`` m along the body's
    x and y axes, of each of the P bodies around ``joint`` (its parent and child, and the bodies
    jointed to either; the world left out)."""
    ends = {joint.parent, joint.child} - {"world"}
    bodies = set(ends)
    for j in art.joints:
        if j is not joint and ({j.parent, j.child} & ends):
            bodies |= {j.parent, j.child}
    bodies.discard("world")
    idx = [poses.body_names.index(b) for b in sorted(bodies) if b in poses.body_names]
    if not idx:
        return np.zeros((len(poses.world_from_body), 0))
    W = poses.world_from_body[:, idx]                     # (T, P, 4, 4)
    pts = [W[:, :, :3, 3], W[:, :, :3, 3] + size * W[:, :, :3, 0], W[:, :, :3, 3] + size * W[:, :, :3, 1]]
    return np.concatenate([p.reshape(len(W), -1) for p in pts], axis=1)
