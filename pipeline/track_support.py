"""Which depth points support a tracked body: the tolerance of the "lost" test.

A point supports the body it is assigned to when its distance to that body's surface is within
``lost.inlier_m`` or ``lost.inlier_sigmas`` depth noise standard deviations (sigma = k z^2) at the
body's depth where the tracking starts, whichever is larger. A fixed tolerance alone would count a
correct fit of a far body as unsupported wherever the depth noise is wider than it; the start depth,
not the depth of a trial pose or of the points, keeps a far wall's points from supporting a near body
placed on the wall. This module decides support only; when a body is lost, and what follows, is
``track.py``'s.
"""
from __future__ import annotations

import numpy as np
import torch

from vid2sim.pipeline.track_config import TrackConfig
from vid2sim.pipeline.track_scene import TrackScene


def inlier_tolerances(cfg: TrackConfig, scene: TrackScene, T_start: torch.Tensor | np.ndarray) -> np.ndarray:
    """(M,) m: for each body, the largest distance to its surface at which a depth point supports it;
    ``T_start`` (M, 4, 4) the bodies' world poses where the tracking starts (their camera depth sets sigma)."""
    T = np.asarray(T_start, float)
    if cfg.lost.inlier_sigmas <= 0:
        return np.full(len(T), cfg.lost.inlier_m)
    z = np.maximum(scene.cam.project(T[:, :3, 3])[1], 0.0)
    return np.maximum(cfg.lost.inlier_m, cfg.lost.inlier_sigmas * scene.sigma(z))
