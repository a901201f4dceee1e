"""Track's second look at a body whose fit turned much worse than in the frames before.

A part that lands, bounces or is hit changes its motion within a frame: the constant-acceleration
prediction (``track_motion.py``) then starts it tens of millimetres from where it went, and the
Gauss-Newton steps can settle on a wrong placement nearby (a capsule 0.2 m off, turned 30-70 deg,
on the floor's and its neighbour's points) that keeps enough supporting points not to count as
lost. Its fit is then much worse than in the frames before: the rms of its points' residuals
(``_Tracker.frame``'s per-body residual, m) jumps, or it is seen on far fewer pixels.

Here a found body is judged by its fit against its last ``HISTORY`` frames that were not judged much
worse (``FitHistory``): its residual in depth noise sigmas at its distance (``relative``) over
``lost.recheck_ratio`` times their median and that median by ``lost.recheck_floor``, or the pixels it is
seen on under ``lost.recheck_pixels`` of theirs (on noisy depth the gate holds a wrong placement's
residual near the noise, but it is seen on a fraction of its pixels). Such a body is aligned again with the whole frame from more starts, taken at its
last good frame and turned as there: that pose (at rest: it stopped), that pose moved on at its velocity
there for the frames since, and that pose moved as its image moved since (``_starts``). One is kept where
the body is found there, no found body is lost by it and the frame's cost falls
(``track_refind.best_start``), so a wrong judgement costs time, not a pose. Of the orientations that
show the part alike (a box a half turn about one of its axes, a capsule end over end), the one nearest
the frame's own fit is kept (``nearest_twin``): from a start left behind by a fast turn, the steps may
settle on either.
"""
from __future__ import annotations

import logging
from collections import deque

import numpy as np
import torch

from vid2sim.pipeline.track_refind import LastSeen, best_start, body_mask, colour_of, image_start

log = logging.getLogger(__name__)

HISTORY = 5       # accepted residuals per body that its typical residual is the median of
MIN_HISTORY = 3   # a body is judged once it has this many
# a box turned a half turn about one of its axes, a rod about an axis across it, looks the same
HALF_TURNS = {"box": ((1, 1, 1), (1, -1, -1), (-1, 1, -1), (-1, -1, 1)), "capsule": ((1, 1, 1), (1, -1, -1)),
              "cylinder": ((1, 1, 1), (1, -1, -1))}


def relative(cfg, scene, T: torch.Tensor, residual: np.ndarray) -> np.ndarray:
    """(M,) each body's residual (M,) m in units of the depth noise at its distance from the camera
    (``noise.depth_noise_k`` z^2, at least ``noise.depth_noise_floor_m``; poses T (M, 4, 4)): a body
    moving away on noisy depth fits worse without fitting wrongly."""
    z = (T[:, :3, 3] - torch.as_tensor(scene.origin, dtype=T.dtype)).norm(dim=1).numpy()
    return residual / np.maximum(cfg.noise.depth_noise_k * z ** 2, cfg.noise.depth_noise_floor_m)


class FitHistory:
    """Per body, along one tracking direction: its relative residuals (``relative``) and the pixels it
    was seen on in its last ``HISTORY`` frames that were not judged much worse than the ones before
    (``much_worse``), and the frame, pose and velocity where it last had such a fit (``good``, a
    ``track_refind.LastSeen``). A body judged much worse in ``HISTORY`` frames in a row starts its
    history again from there (its view changed: the second looks found no better fit)."""

    def __init__(self, T: torch.Tensor, frame: int):
        self.res = [deque(maxlen=HISTORY) for _ in range(len(T))]
        self.worse = np.zeros(len(T), int)   # frames in a row judged much worse
        self.good = LastSeen(T, frame)

    def typical(self) -> tuple[np.ndarray, np.ndarray]:
        """(M,) median relative residual and (M,) median pixels seen on of each body's accepted frames
        (NaN where fewer than ``MIN_HISTORY``)."""
        med = np.array([np.median(np.array(r), 0) if len(r) >= MIN_HISTORY else (np.nan, np.nan) for r in self.res])
        return med[:, 0], med[:, 1]

    def update(self, cfg, i: int, T: torch.Tensor, rel: np.ndarray, pixels: np.ndarray, lost: np.ndarray,
               velocity: torch.Tensor) -> None:
        """After frame i tracked at T (M, 4, 4) with relative residuals ``rel`` (M,), pixels seen on ``pixels``
        (M,) and ``lost`` (M,) bool: the found bodies whose fit is not much worse than before add theirs,
        and their pose and ``velocity`` (M, 6)."""
        worse = much_worse(cfg, self, rel, pixels, lost)
        log.debug("track: frame %d: relative residuals %s, pixels %s, typical %s", i, np.round(rel, 2).tolist(),
                  pixels.tolist(), [np.round(x, 2).tolist() for x in self.typical()])
        self.worse = np.where(worse, self.worse + 1, 0)
        for m in np.flatnonzero(self.worse >= HISTORY):
            self.res[m].clear()
            self.worse[m], worse[m] = 0, False
        keep = ~lost & ~worse
        for m in np.flatnonzero(keep):
            self.res[m].append((float(rel[m]), float(pixels[m])))
        self.good.update(i, T, keep, velocity)


def much_worse(cfg, history: FitHistory, rel: np.ndarray, pixels: np.ndarray, lost: np.ndarray) -> np.ndarray:
    """(M,) bool: found bodies whose relative residual ``rel`` (M,) exceeds ``lost.recheck_ratio`` times
    their typical one and that by ``lost.recheck_floor``, or that are seen on fewer pixels ``pixels`` (M,)
    than ``lost.recheck_pixels`` of their typical number."""
    typ, typ_px = history.typical()
    with np.errstate(invalid="ignore"):
        worse = (rel > cfg.lost.recheck_ratio * typ) & (rel > typ + cfg.lost.recheck_floor)
        return ~lost & np.isfinite(typ) & (worse | (pixels < cfg.lost.recheck_pixels * typ_px))


def nearest_twin(prim, R: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Of the orientations (3, 3) that show ``prim`` as R does (R turned a half turn about a box's axis,
    a rod's about an axis across it: ``HALF_TURNS``), the one nearest ``ref`` (3, 3)."""
    twins = [R * torch.tensor(d, dtype=R.dtype) for d in HALF_TURNS.get(prim.kind, ((1, 1, 1),))]
    return max(twins, key=lambda S: float(torch.trace(S @ ref.T)))


def _starts(tracker, rec, good: LastSeen, i: int, m: int, now: tuple, read: dict) -> list[torch.Tensor]:
    """Start poses (4, 4) for body m at frame i, all turned as at its last good frame j: that pose, that
    pose moved on at its velocity there for the frames since, and that pose moved as its image moved
    (``track_refind.image_start``). Not turned on at its spin: a symmetric part (a box turned a half
    turn) fits as well there, and its track would jump between the two."""
    j, pose = int(good.frame[m]), good.pose[m]
    moved = pose.clone()
    moved[:3, 3] += abs(i - j) * good.velocity[m, :3]
    out = [pose, moved, image_start(tracker, rec, i, now, j, pose, body_mask(tracker.scene, good.pose, m), read)]
    return [T for T in out if T is not None]


def recheck(tracker, rec, history: FitHistory, i: int, depth: np.ndarray, rgb: np.ndarray | None,
            result: tuple) -> tuple:
    """``_Tracker.frame``'s result (T, lost, residual (M,), pixels (M,), vis) for frame i (``depth``;
    ``rgb``: its colour where the tracker read it, else read here only if some body is judged), with
    each body whose fit is much worse than before (``much_worse``) aligned
    again from the starts of the module doc, taken at the body's last good fit (``history.good``)."""
    cfg, scene = tracker.cfg, tracker.scene
    before = relative(cfg, scene, result[0], result[2])
    bad = much_worse(cfg, history, before, result[3], result[1])
    if not bad.any():
        return result
    use_rgb = rgb if cfg.noise.w_color > 0 else None
    now = (depth, colour_of(rec, i, rgb))
    read: dict = {}
    good, px = history.good, result[3].copy()
    for m in np.flatnonzero(bad):
        T = result[0]
        cands = _starts(tracker, rec, good, i, m, now, read)
        cands = [c for c in cands if float((c[:3, 3] - T[m, :3, 3]).norm()) > cfg.gates.gate_final_m]
        result = best_start(tracker, depth, use_rgb, result, m, cands, result[1])
        if result[0] is not T:
            result[0][m, :3, :3] = nearest_twin(tracker.scene.prims[m], result[0][m, :3, :3], T[m, :3, :3])
    after = relative(cfg, scene, result[0], result[2])
    log.info("track: frame %d: bodies %s fit to %s depth sigmas on %s pixels, in their last good frames %s on %s; "
             "aligned again: %s on %s", i, np.flatnonzero(bad).tolist(), np.round(before[bad], 2).tolist(),
             px[bad].tolist(), *[np.round(x[bad], 2).tolist() for x in history.typical()],
             np.round(after[bad], 2).tolist(), result[3][bad].tolist())
    return result
