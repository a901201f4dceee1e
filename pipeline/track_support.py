"""Which depth points support a tracked body: the tolerance of the "lost" test.

A point supports the body it is assigned to when its distance to that body's surface is within
``lost.inlier_m`` or ``lost.inlier_sigmas`` depth noise standard deviations at its depth
(sigma = k z^2), whichever is larger. A fixed tolerance alone would count a correct fit of a
far body as unsupported wherever the depth noise is wider than it. This module decides support
only; when a body is lost, and what follows, is ``track.py``'s.
"""
from __future__ import annotations

import torch

from vid2sim.models.render.align import Observation
from vid2sim.pipeline.track_config import TrackConfig


def inlier_tolerance(cfg: TrackConfig, obs: Observation) -> torch.Tensor | float:
    """(N,) m per ray of ``obs``: the largest distance to a body's surface at which that ray's depth point
    supports the body; a float (``lost.inlier_m``) where ``obs`` carries no depth noise (``obs.sigma`` None)."""
    if obs.sigma is None or cfg.lost.inlier_sigmas <= 0:
        return cfg.lost.inlier_m
    return (cfg.lost.inlier_sigmas * obs.sigma).clamp(min=cfg.lost.inlier_m)


def supporting(cfg: TrackConfig, obs: Observation, assigned: torch.Tensor, point_res: torch.Tensor,
               m: int) -> torch.Tensor:
    """(N,) bool rays of ``obs`` whose depth point is assigned to body ``m`` (``assigned`` (N,)) and lies
    within ``inlier_tolerance`` of its surface (``point_res`` (N,) m, inf where unassigned)."""
    return (assigned == m) & (point_res < inlier_tolerance(cfg, obs))
