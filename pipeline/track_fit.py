"""Track's start: fit one primitive to a mask's point cloud from several orientations.

Used for the segmentation frame's start poses and to re-acquire a body (``track.py``).
Each orientation hypothesis (principal axes of the points; for a box also the world axes,
every assignment of the axes to its edges) is aligned by a few damped Gauss-Newton steps of
the renderer (``models/render/align.py``) and the pose that explains the points best,
with a penalty for covering background, is kept.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from vid2sim.models.render import Primitive
from vid2sim.models.render.align import Observation, gauss_newton_step

if TYPE_CHECKING:
    from vid2sim.pipeline.track import TrackConfig

FLOAT = torch.float64  # dtype of every pose, ray and residual tensor of the tracker


def rot_hypotheses(prim: Primitive, pts: np.ndarray) -> list[np.ndarray]:
    """Candidate body orientations (3, 3) from the principal axes of a point cloud."""
    c = pts - pts.mean(0)
    _, _, Vt = np.linalg.svd(c, full_matrices=False)
    axes = Vt  # rows: principal directions, largest variance first
    if prim.kind == "sphere":
        return [np.eye(3)]
    if prim.kind in ("capsule", "cylinder"):
        z = axes[0]
        x = axes[1] - axes[1] @ z * z
        x /= np.linalg.norm(x)
        return [np.stack([x, np.cross(z, x), z], 1)]
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


def fit_primitive(cfg: "TrackConfig", prim: Primitive, obs: Observation) -> tuple[float, torch.Tensor]:
    """Fit one primitive to the foreground points of ``obs`` from every orientation hypothesis.

    Returns (cost, (4, 4) world pose): cost = mean clipped squared point residual plus a
    penalty per free-space ray (a pose that covers background is wrong).
    """
    p = obs.points[obs.foreground].numpy()
    view = p.mean(0) - obs.origin.numpy()
    view /= np.linalg.norm(view)
    # The visible surface lies in front of the centre by about half the shape's depth.
    centre = p.mean(0) + view * (min(prim.half_size) if prim.kind in ("box", "mesh") else prim.radius)
    best = (float("inf"), None)
    for R in rot_hypotheses(prim, p):
        T = torch.eye(4, dtype=FLOAT)
        T[:3, :3], T[:3, 3] = torch.as_tensor(R), torch.as_tensor(centre)
        T = T[None]
        kw = dict(gate=prim.bounding_radius * 2, scale=cfg.noise.huber_m, freespace_tol=cfg.noise.freespace_tol_m, damping=cfg.steps.damping,
                  grazing=False)  # see gauss_newton_step
        for _ in range(cfg.init_iterations):
            T = gauss_newton_step([prim], T, obs, w_depth=cfg.noise.w_depth, w_silhouette=cfg.noise.w_silhouette, **kw).T
        res = gauss_newton_step([prim], T, obs, active=torch.zeros(1, dtype=torch.bool), **kw)
        r = res.point_res[torch.isfinite(res.point_res)]
        cost = float(torch.minimum(r, torch.tensor(cfg.gates.gate_m)).square().mean()) + cfg.gates.gate_m ** 2 * float(
            res.freespace.sum()) / max(len(r), 1) if len(r) else float("inf")
        if best[1] is None or cost < best[0]:  # no finite cost at all: the first hypothesis, cost inf
            best = (cost if np.isfinite(cost) else float("inf"), T[0])
    return best
