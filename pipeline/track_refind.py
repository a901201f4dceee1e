"""Track's second look for a lost body: aligned again from where its motion or its image says it went.

A body the frame's alignment loses (``track.py``: too few of its rendered pixels supported by the
depth) is held at its last good pose, and the next frames start it there. A part that moves more than
its own width a frame (a double pendulum's outer link at 74 mm a frame, 50 mm wide) is then far from
that pose after a frame or two, and neither the next frames' steps (their gates reach 30-150 mm) nor
the search among unexplained depth points near the held pose (``_Tracker.reacquire``) finds it.

Here each lost body gets up to two more starts, each aligned with the whole frame (the other bodies
start at their poses of this frame) and kept when the body is supported there again, no tracked body
is lost by it, and the frame's cost falls:

- its motion: the last good pose moved on at the velocity it had there (world twist per frame,
  ``track_motion.predict``) for the frames since;
- its image: its rendered pixels in the last frame it was tracked in (the pixels where it is the
  nearest body), matched in this frame (colour, else depth) within ``prior.first_reach_m`` per frame
  since, up to ``REACH_FRAMES`` frames (``track_shift.part_shifts``); the matched pixels' depth gives
  the translation.
"""
from __future__ import annotations

import numpy as np
import torch

from vid2sim.models.render.align import render_hits
from vid2sim.pipeline.track_motion import predict
from vid2sim.pipeline.track_shift import part_shifts

REACH_FRAMES = 3   # the image search reaches first_reach_m per frame since the body was last tracked, at most this many


class LastSeen:
    """Per body, along one tracking direction: the last frame it was tracked in, its pose (4, 4) and
    its velocity (world twist per frame, (6,)) there."""

    def __init__(self, T: torch.Tensor, frame: int, masks: np.ndarray | None = None):
        M = len(T)
        self.frame = np.full(M, frame)
        self.pose = T.clone()
        self.velocity = torch.zeros(M, 6, dtype=T.dtype)
        # the start of this direction: its frame, poses (M, 4, 4) and the bodies' masks (M, H, W) there (or None)
        self.anchor = (frame, T.clone(), masks)

    def update(self, i: int, T: torch.Tensor, tracked: np.ndarray, velocity: torch.Tensor) -> None:
        """After frame i: bodies ``tracked`` (M,) bool were found at T (M, 4, 4) moving at ``velocity`` (M, 6)."""
        for m in np.flatnonzero(tracked):
            self.frame[m], self.pose[m], self.velocity[m] = i, T[m], velocity[m]


def body_mask(scene, T: torch.Tensor, m: int) -> np.ndarray:
    """(H, W) bool: the pixels where body m is the nearest body at poses T (M, 4, 4)."""
    roi = scene.roi(T, [m])
    flat = np.flatnonzero(roi)
    out = np.zeros(roi.size, bool)
    if flat.size:
        hits = render_hits(scene.prims, T, scene.origin, scene.dirs[flat])
        near = torch.isfinite(hits[m]) & (hits[m] <= hits.min(0).values)
        out[flat] = near.numpy()
    return out.reshape(roi.shape)


def image_start(tracker, rec, i: int, now: tuple, j: int, pose: torch.Tensor, mask: np.ndarray,
                 read: dict) -> torch.Tensor | None:
    """Body pose ``pose`` (4, 4) of frame j moved as its pixels ``mask`` (H, W) of frame j moved by frame i
    (``now``: frame i's depth and colour or None), searched within first_reach_m per frame between.
    ``read``: frames already read in this call, frame -> (depth, colour or None)."""
    cfg = tracker.cfg
    reach = cfg.prior.first_reach_m * min(abs(i - j), REACH_FRAMES)
    if reach <= 0 or mask.sum() < cfg.lost.lost_min_pixels:
        return None
    if j not in read:
        read[j] = (rec.depth(j), rec.color(j) if now[1] is not None else None)
    shift = part_shifts(tracker.scene, (read[j], now), mask[None], reach)[0]
    if float(shift.norm()) == 0:
        return None
    out = pose.clone()
    out[:3, 3] += shift
    return out


def starts(tracker, rec, seen: LastSeen, i: int, m: int, now: tuple, read: dict) -> list[torch.Tensor]:
    """Start poses (4, 4) for lost body m at frame i (``now``: its depth and colour or None; ``read``: as
    ``image_start``): from its motion and from its image (module doc); only those farther than
    ``gate_final_m`` from its last good pose (that one the frame tried)."""
    cfg, scene = tracker.cfg, tracker.scene
    j = int(seen.frame[m])
    good = seen.pose[m]
    out = [predict(good[None], abs(i - j) * seen.velocity[m][None])[0]]
    out.append(image_start(tracker, rec, i, now, j, good, body_mask(scene, seen.pose, m), read))
    a, T_a, masks = seen.anchor
    if masks is not None and a != j:   # lost since a wrong pose: from the direction's start
        out.append(image_start(tracker, rec, i, now, a, T_a[m], masks[m] > 0, read))
    return [T for T in out if T is not None and float((T[:3, 3] - good[:3, 3]).norm()) > cfg.gates.gate_final_m]


def colour_of(rec, i: int, rgb: np.ndarray | None) -> np.ndarray | None:
    """Frame i's colour: ``rgb`` where the tracker already read it, else read from ``rec`` (None where
    the recording has none)."""
    return rgb if rgb is not None or not rec.has_color else rec.color(i)


def refind(tracker, rec, seen: LastSeen, i: int, depth: np.ndarray, rgb: np.ndarray | None, result: tuple) -> tuple:
    """``_Tracker.frame``'s result (T, lost, residual, pixels, vis) for frame i with each lost body aligned again
    from ``starts``; a start is kept when the body is found there, every body found before still is,
    and the frame's cost (``cost_fn``) falls (``best_start``)."""
    lost = result[1]
    now = (depth, colour_of(rec, i, rgb))   # read once for every lost body
    read: dict = {}
    for m in np.flatnonzero(lost):
        result = best_start(tracker, depth, rgb, result, m, starts(tracker, rec, seen, i, m, now, read), lost)
    return result


def best_start(tracker, depth: np.ndarray, rgb: np.ndarray | None, result: tuple, m: int, cands: list,
               lost: np.ndarray) -> tuple:
    """``result`` (T, lost, residual, pixels, vis) of a frame, or the frame aligned again (all bodies, from T) with
    body m started at one of ``cands`` (poses (4, 4)) where m is found there, no body found in
    ``lost`` (M,) bool's terms is lost, and the frame's cost (``cost_fn``, on the rays around every
    candidate) falls below the current one's; the lowest such."""
    if not cands:
        return result
    T = result[0]
    tried = []
    for start in cands:
        T0 = T.clone()
        T0[m] = start
        tried.append(tracker.frame(depth, T0, T, use_prior=False, rgb=rgb))
    cost = tracker.cost_fn(depth, rgb, [T] + [r[0] for r in tried], tracker.cfg.gates.max_rays)
    best = cost(T)
    for r in tried:
        if r[1][m] or (r[1] & ~lost).any():
            continue
        c = cost(r[0])
        if c < best:
            best, result = c, r
    return result

