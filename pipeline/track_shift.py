"""Track's first step away from the segmentation frame: where each part went, from the images.

The frames next to the segmentation frame are tracked with no velocity yet: a part that moves a
large share of its size per frame (a thrown pair at 100 mm a frame, a third of its box's length)
starts that far from where it is, and the Gauss-Newton steps can slide it onto a neighbour's
points instead (``track.py``). Here each part's pixels in the segmentation frame (under its mask;
colour where the recording has it, else depth) are looked for in the next frame, shifted in the
image by up to ``reach_m`` at the part's depth, by the least squared difference; the matched
pixels' depth readings in the two frames give the part's world translation (the median of the
per-pixel differences). The tracker aligns from this start and from the parts at rest, and
keeps, body by body, whichever explains the frame better.
"""
from __future__ import annotations

import logging
import math

import cv2
import numpy as np
import torch

from vid2sim.pipeline.track_fit import FLOAT
from vid2sim.pipeline.track_scene import TrackScene

log = logging.getLogger(__name__)

MIN_PAIRS = 10     # matched pixels with a depth reading in both frames that a translation needs


def match_shift(img_a: np.ndarray, img_b: np.ndarray, mask: np.ndarray, reach_px: int) -> tuple[int, int, float, float] | None:
    """Pixel shift (du, dv) within ``reach_px`` each way that best moves the pixels of ``img_a`` under
    ``mask`` ((H, W) bool) onto ``img_b`` (images (H, W) or (H, W, C), the same units), by the
    root-mean-square difference over the mask; returns the shift, that difference and the
    difference at no shift; None for an empty mask or a search window the mask does not fit."""
    H, W = mask.shape
    vs, us = np.nonzero(mask)
    if len(vs) == 0:
        return None
    y0, y1, x0, x1 = vs.min(), vs.max() + 1, us.min(), us.max() + 1
    sy0, sy1 = max(y0 - reach_px, 0), min(y1 + reach_px, H)
    sx0, sx1 = max(x0 - reach_px, 0), min(x1 + reach_px, W)
    tmpl = np.ascontiguousarray(img_a[y0:y1, x0:x1], dtype=np.float32)
    tmask = mask[y0:y1, x0:x1].astype(np.float32)
    if tmpl.ndim == 3:
        tmask = np.repeat(tmask[..., None], tmpl.shape[2], 2)
    search = np.ascontiguousarray(img_b[sy0:sy1, sx0:sx1], dtype=np.float32)
    if search.shape[0] < tmpl.shape[0] or search.shape[1] < tmpl.shape[1]:
        return None
    cost = cv2.matchTemplate(search, tmpl, cv2.TM_SQDIFF, mask=np.ascontiguousarray(tmask)) / float(tmask.sum())
    cost = np.nan_to_num(cost, nan=np.inf, posinf=np.inf)
    v, u = np.unravel_index(int(np.argmin(cost)), cost.shape)
    return int(sx0 + u - x0), int(sy0 + v - y0), float(np.sqrt(cost[v, u])), float(np.sqrt(cost[y0 - sy0, x0 - sx0]))


def part_shifts(scene: TrackScene, frames: tuple[tuple[np.ndarray, np.ndarray | None], ...], masks: np.ndarray,
                reach_m: float) -> torch.Tensor:
    """(M, 3) world translation (m) of each part from frame a to frame b; zero where no shift
    matches better than none, or the translation comes out longer than ``reach_m``.

    ``frames`` ((depth_a, rgb_a), (depth_b, rgb_b)): depth in m (0: no reading), RGB or None;
    ``masks`` (M, H, W) the parts in frame a. Each part's pixels in frame a (colour, else depth)
    are matched in frame b within ``reach_m`` (at the part's median depth, ``match_shift``); the
    translation is the median over the part's pixels of the world points at the matched pixels of
    frame b minus those of frame a (``scene.origin`` + depth x ``scene.dirs``).
    """
    (d_a, rgb_a), (d_b, rgb_b) = frames
    img_a, img_b = (d_a, d_b) if rgb_a is None or rgb_b is None else (rgb_a, rgb_b)
    H, W = d_a.shape
    out = torch.zeros(len(masks), 3, dtype=FLOAT)
    for k, mask in enumerate(masks > 0):
        z = d_a[mask & (d_a > 0)]
        if z.size < MIN_PAIRS:
            continue
        found = match_shift(img_a, img_b, mask, int(math.ceil(reach_m * scene.cam.fx / float(np.median(z)))))
        if found is None or not found[2] < found[3]:
            continue
        du, dv = found[:2]
        inner = cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
        vs, us = np.nonzero(inner & (d_a > 0))
        vb, ub = vs + dv, us + du
        inside = (vb >= 0) & (vb < H) & (ub >= 0) & (ub < W)
        vs, us, vb, ub = vs[inside], us[inside], vb[inside], ub[inside]
        # a matched pixel that sees past the part (a thin part's edge onto the wall behind) is no motion of it
        ok = (d_b[vb, ub] > 0) & (np.abs(d_b[vb, ub] - d_a[vs, us]) < reach_m)
        if int(ok.sum()) < MIN_PAIRS:
            continue
        fa, fb = torch.as_tensor(vs[ok] * W + us[ok]), torch.as_tensor(vb[ok] * W + ub[ok])
        p_a = scene.origin + torch.as_tensor(d_a[vs[ok], us[ok]], dtype=FLOAT)[:, None] * scene.dirs[fa]
        p_b = scene.origin + torch.as_tensor(d_b[vb[ok], ub[ok]], dtype=FLOAT)[:, None] * scene.dirs[fb]
        shift = (p_b - p_a).median(dim=0).values
        if float(shift.norm()) <= reach_m:
            out[k] = shift
    return out


def first_step(tracker, depth: np.ndarray, rgb: np.ndarray | None, T_rest: torch.Tensor,
                T_hold: torch.Tensor, shift: torch.Tensor) -> tuple:
    """``track._Tracker.frame``'s result for a frame next to the segmentation frame (no velocity yet, no
    motion prior): aligned from the parts at rest (``T_rest`` (M, 4, 4)) and, where some part's image
    moved (``shift`` (M, 3) m, ``track_shift.py``) by more than ``gate_final_m``, also from the parts
    moved by it; each body keeps the start whose aligned pose explains the frame better (``mix``)."""
    cfg = tracker.cfg
    rest = tracker.frame(depth, T_rest, T_hold, use_prior=False, rgb=rgb)
    moved = np.flatnonzero((shift.norm(dim=1) > cfg.gates.gate_final_m).numpy())
    if len(moved) == 0:
        return rest
    T_shift = T_rest.clone()
    T_shift[:, :3, 3] += shift
    went = tracker.frame(depth, T_shift, T_hold, use_prior=False, rgb=rgb)
    cost = tracker.cost_fn(depth, rgb, [rest[0], went[0]], cfg.gates.max_rays)
    c_rest = cost(rest[0])
    # a body lost from the moved start (out of view, unsupported) is no better start: only found ones are tried
    T, swapped, c = mix(cost, rest[0], went[0], [m for m in moved if not went[1][m]], c_rest)
    log.info("track: first step from the segmentation frame: the images moved the parts %s mm; cost %.0f at rest, "
             "%.0f with %s moved", np.round(1000 * shift.norm(dim=1).numpy()).astype(int).tolist(), c_rest, c,
             np.flatnonzero(swapped).tolist() or "no body")
    if not swapped.any():
        return rest
    return tracker.frame(depth, T, T_hold, use_prior=False, rgb=rgb)


def mix(cost, T: torch.Tensor, other: torch.Tensor, bodies, c: float) -> tuple[torch.Tensor, np.ndarray, float]:
    """Greedy per-body choice between two pose sets: from ``T`` (cost ``c``), each body in
    ``bodies`` takes its pose from ``other`` where that lowers ``cost`` of the whole frame.
    Returns (poses, (M,) bool taken from ``other``, their cost)."""
    taken = np.zeros(len(T), bool)
    for m in bodies:
        Tm = T.clone()
        Tm[m] = other[m]
        cm = cost(Tm)
        if cm < c:
            T, c, taken[m] = Tm, cm, True
    return T, taken, c
