"""Known actuators' pixels explained (docs/formats.md §1.2): neither a part nor clutter.

A recording with ``actuation.npz`` knows where its actuators (a robot's pusher tip) were
in every frame and their shapes. ``explain_actuators`` wraps such a recording so that
segment and track see, in every frame, no depth reading where an actuator is the nearest
surface (its shape ray-cast at its known pose through the recording's camera,
``models.render.depth.DepthRenderer``), and a library without the actuators' shapes.
Pixels where a part is in front of the actuator keep their reading. ``hidden(i)`` gives
those pixels, so that colour evidence there (the tool's own colour) is set aside too.

``off_actuators`` drops the segmenter's detections that lie mostly on those pixels: the hole
an actuator leaves in the depth has the tool's outline, and is found as a part of its shape.

It does not track the actuator (its pose is known) nor model its contacts (identify does).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import cv2
import numpy as np

from vid2sim.datasets.recording import Recording

if TYPE_CHECKING:
    from vid2sim.models.segmenter.model import Detection

MARGIN_M = 0.015  # a reading this much nearer than the actuator's surface is a part in front of it
RING_PX = 1       # the actuator's outline grows by this many pixels (edge pixels mix tool and scene)
ACTUATOR_SHARE = 0.5  # in (0, 1]: a detection with more than this share of its pixels hidden is the actuator


class ExplainedRecording(Recording):
    """``rec`` with its actuators' pixels read as holes (depth 0) and their shapes out of
    ``shapes``; every other attribute is ``rec``'s."""

    def __init__(self, rec: Recording):
        from vid2sim.models.render.depth import DepthRenderer

        self._rec, act = rec, rec.actuation
        self.path, self.camera, self.num_frames = rec.path, rec.camera, rec.num_frames
        self.has_depth, self.has_color, self.actuation = rec.has_depth, rec.has_color, act
        self.actuator_shapes = {n: rec.shapes[n] for n in act.shapes}
        self.shapes = {n: s for n, s in rec.shapes.items() if n not in self.actuator_shapes}
        self._renderer = DepthRenderer(rec.camera, [rec.shapes[n] for n in act.shapes])
        self._cache: dict[int, np.ndarray] = {}

    def __getattr__(self, name):   # anything else (file lists, decoders) is the wrapped recording's
        return getattr(self.__dict__["_rec"], name)

    def actuator_depth(self, i: int) -> np.ndarray:
        """(H, W) float32 camera depth (m) of the actuators alone in frame i; inf where none."""
        z, ids = self._renderer.render(self.actuation.poses(i))
        return np.where(ids >= 0, z, np.inf).astype(np.float32)

    def hidden(self, i: int) -> np.ndarray:
        """(H, W) bool: pixels of frame i whose nearest surface is an actuator (its outline
        grown by ``RING_PX``), i.e. whose reading is nearer than ``MARGIN_M`` in front of it."""
        if i not in self._cache:
            z_act = self.actuator_depth(i)
            if RING_PX > 0:   # the nearest actuator depth within the ring
                k = np.ones((2 * RING_PX + 1,) * 2, np.uint8)
                z_act = cv2.erode(np.where(np.isfinite(z_act), z_act, 1e6).astype(np.float32), k)
                z_act[z_act >= 1e6] = np.inf
            z_obs = self._rec.depth_raw(i).astype(np.float32) * np.float32(self.camera.depth_scale) \
                if self.has_depth else np.zeros(z_act.shape, np.float32)
            self._cache = {i: np.isfinite(z_act) & ((z_obs <= 0) | (z_obs > z_act - MARGIN_M))}
        return self._cache[i]

    def depth_raw(self, i: int) -> np.ndarray:
        d = self._rec.depth_raw(i).copy()
        d[self.hidden(i)] = 0
        return d

    def color(self, i: int) -> np.ndarray:
        return self._rec.color(i)

    def close(self) -> None:
        self._rec.close()

    def fingerprint(self) -> str:
        return self._rec.fingerprint()


def explain_actuators(rec: Recording) -> Recording:
    """``rec`` itself without known actuators, else its ``ExplainedRecording``."""
    if getattr(rec, "actuation", None) is None or isinstance(rec, ExplainedRecording):
        return rec
    return ExplainedRecording(rec)


def hidden_pixels(rec: Recording, i: int) -> np.ndarray | None:
    """(H, W) bool actuator pixels of frame i for an ``ExplainedRecording``, else None."""
    return rec.hidden(i) if isinstance(rec, ExplainedRecording) else None


def off_actuators(rec: Recording, i: int, dets: list[Detection], s: int = 1) -> list[Detection]:
    """``dets`` (detections of frame i with a ``mask``: (H/s, W/s) bool at 1/s of the frame)
    without those more than ``ACTUATOR_SHARE`` of whose pixels are actuator pixels of frame i
    (``hidden``, the s x s blocks at least half hidden): no depth reading there, so such a
    detection is the hole the actuator leaves, not a part. ``dets`` itself without actuators."""
    hidden = hidden_pixels(rec, i)
    if hidden is None or not hidden.any() or not dets:
        return dets
    h, w = dets[0].mask.shape
    if hidden.shape != (h, w):
        hidden = cv2.resize(hidden.astype(np.float32), (w, h), interpolation=cv2.INTER_AREA) >= 0.5
    return [d for d in dets if (d.mask & hidden).sum() <= ACTUATOR_SHARE * max(int(d.mask.sum()), 1)]


def fill_hidden(depth: np.ndarray, hidden: np.ndarray | None, iterations: int = 2000) -> np.ndarray:
    """``depth`` (H, W) m with the ``hidden`` pixels (and their 1-px ring) filled by harmonic
    interpolation from the readings around them (Jacobi iterations of the 4-neighbour mean,
    exact for a plane): the static scene behind an actuator, for a background model."""
    if hidden is None or not hidden.any():
        return depth
    hole = cv2.dilate(hidden.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    hole |= depth <= 0
    v, u = np.nonzero(cv2.dilate(hidden.astype(np.uint8), np.ones((5, 5), np.uint8)))
    y0, y1, x0, x1 = max(v.min() - 1, 0), v.max() + 2, max(u.min() - 1, 0), u.max() + 2
    out = depth.astype(np.float64).copy()
    d, h = out[y0:y1, x0:x1], hole[y0:y1, x0:x1]
    known = ~h
    if not known.any():
        return depth
    d[h] = d[known].mean()
    pad = np.pad(d, 1, mode="edge")
    w = np.pad(np.ones_like(d), 1)
    for _ in range(iterations):
        pad[1:-1, 1:-1] = d
        s = pad[:-2, 1:-1] * w[:-2, 1:-1] + pad[2:, 1:-1] * w[2:, 1:-1] + pad[1:-1, :-2] * w[1:-1, :-2] \
            + pad[1:-1, 2:] * w[1:-1, 2:]
        n = w[:-2, 1:-1] + w[2:, 1:-1] + w[1:-1, :-2] + w[1:-1, 2:]
        d = np.where(h, s / n, d)
    out[y0:y1, x0:x1] = d
    return out.astype(depth.dtype)
