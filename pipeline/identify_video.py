"""Pixel-space likelihood for the identify stage (``identify.observation=video``).

Heiden et al. 2022 (§4.3.3.4) compare the *rendered* simulation with the observed
frames instead of the tracked joint positions. Here: each particle's simulated joint
positions go through forward kinematics (``models.dynamics.forward_kinematics``) to the
parts' world poses, the parts are ray-cast analytically (``models.render.primitives``,
closed-form and differentiable) at a fixed set of pixels around the mechanism, and the
rendered depth, composited over the static background, is compared with the observed
depth at those pixels (Gaussian, ``IdentifyVideo.pixel_sigma`` metres).

Gradients reach the parameters through the depth inside each part (implicit-function
theorem of the ray-surface hit) and through a soft band just inside each silhouette:
a part's opacity at a pixel is ``1 - exp(-margin / tau)`` with ``margin`` how deep the
ray pierces it (``pierce_margin``: closed form for boxes, capsules and spheres;
golden-section for cylinders, whose gradient is then approximate), composited front to back over the background. The
opacity is 0 exactly where a ray stops hitting the part, so the rendered depth is
continuous in the poses and its gradient is the true one (tested against finite
differences); the price is that pixels a part does not cover give it no gradient (a
part simulated off its observed place is pushed out of the wrong pixels and pulled by
the depth of the right ones it still covers, not pulled from outside).

Pixels: those that any part covers in any observed frame (rendered at the tracked
poses) dilated by ``pixel_margin`` px, restricted to pixels with a depth reading in every
frame, then ``pixels`` of them drawn at random (seeded). The background is the
per-pixel median of the frames where no part covers the pixel (forecast's
``background_from``, on the frames already read here). Deliberately not done: colour (depth only), meshes (analytic
primitives only) and occluders that are not parts of the mechanism.

Rendering runs in ``IdentifyVideo.render_dtype`` (float32 by default, about twice as
fast as float64 for the same depth to 1e-7 m); kinematics and dynamics stay float64.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import torch

from vid2sim.datasets.recording import Recording
from vid2sim.datasets.shapes import Shape
from vid2sim.models.render.analytic import AnalyticRenderer
from vid2sim.models.render.primitives import Primitive, pierce_margin, ray_hit
from vid2sim.pipeline.artifacts import PoseTracks


@dataclass
class PixelObservation:
    """What the video likelihood compares: observed depth (T, N) at ``pixels`` (N, 2) (u, v)."""

    pixels: np.ndarray
    observed: np.ndarray
    background: np.ndarray     # (N,) depth behind the mechanism
    frames: int


def select_pixels(rec: Recording, poses: PoseTracks, bodies: list[str], shapes: dict[str, Shape], frames: int,
                  budget: int, margin: int, seed: int) -> PixelObservation:
    """The pixel set and its observed depth over the first ``frames`` frames (see the module docstring)."""
    from vid2sim.models.render.depth import DepthRenderer, background_from

    shape_of = dict(zip(poses.body_names, poses.shape_names))
    order = [poses.body_names.index(b) for b in bodies]
    renderer = DepthRenderer(rec.camera, [shapes[shape_of[b]] for b in bodies])
    depth, covers = [], []
    for t in range(frames):   # each frame read and rendered once; the background reuses them
        depth.append(rec.depth(t))
        covers.append(renderer.render(poses.world_from_body[t][order])[1] >= 0)
    cover = np.any(covers, axis=0)
    valid = np.all([d > 0 for d in depth], axis=0)
    if not cover.any():
        raise ValueError(f"{rec.path}: identify (video): the tracked parts cover no pixel of the first {frames} frames")
    k = 2 * margin + 1
    region = cv2.dilate(cover.astype(np.uint8), np.ones((k, k), np.uint8)) > 0
    v, u = np.nonzero(region & valid)
    if len(u) < 50:
        raise ValueError(f"{rec.path}: identify (video): only {len(u)} pixels around the mechanism have a depth "
                         f"reading in all of the first {frames} frames (holes?); need at least 50")
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(u), size=min(budget, len(u)), replace=False)
    pick.sort()
    u, v = u[pick], v[pick]
    bg = background_from(depth, covers)
    observed = np.stack([d[v, u] for d in depth]).astype(np.float64)
    return PixelObservation(np.stack([u, v], 1).astype(np.float64), observed, bg[v, u].astype(np.float64), frames)


class DepthObserver:
    """``observe`` for ``Problem``: states (..., S) -> composited depth (..., N) at the chosen pixels."""

    def __init__(self, model, nq: int, rec: Recording, shapes: list[Shape], T_world_body0: np.ndarray,
                 obs: PixelObservation, tau: float = 0.003, dtype: torch.dtype = torch.float32):
        from vid2sim.models.dynamics import forward_kinematics

        self.fk, self.model, self.nq, self.tau = forward_kinematics, model, nq, tau
        self.prims = [Primitive.from_shape(s) for s in shapes]
        self.dtype = dt = dtype
        renderer = AnalyticRenderer(rec.camera, self.prims, dtype=dt)
        self.d_cam = renderer.rays(torch.as_tensor(obs.pixels))      # (N, 3) camera-frame, z = 1
        self.T_camera_world = renderer.T_camera_world
        self.background = torch.as_tensor(obs.background, dtype=dt)
        # model frame -> part (shape) frame: constant, from frame 0 where the model's q = 0
        q0 = torch.zeros(1, model.nq, dtype=torch.float64)
        F0 = forward_kinematics(model, q0)[0]
        self.offset = torch.linalg.solve(F0, torch.as_tensor(T_world_body0, dtype=torch.float64))  # (M, 4, 4)

    def __call__(self, states: torch.Tensor) -> torch.Tensor:
        lead = states.shape[:-1]
        q = states.reshape(-1, states.shape[-1])[:, :self.nq]
        T_world_body = self.fk(self.model, q) @ self.offset                         # (B, M, 4, 4)
        depth = self.composite(self.T_camera_world @ T_world_body.to(self.dtype))
        return depth.to(states.dtype).reshape(*lead, -1)

    def composite(self, T_cam_body: torch.Tensor) -> torch.Tensor:
        """(B, M, 4, 4) camera-frame part poses -> (B, N) depth, soft edges, nearest part in front."""
        R, t = T_cam_body[..., :3, :3], T_cam_body[..., :3, 3]
        o_b = -(R.transpose(-1, -2) @ t[..., None])[..., 0]          # (B, M, 3) camera centre, body frame
        d_b = torch.einsum("nk,bmkj->bmnj", self.d_cam, R)           # (B, M, N, 3) rays, body frame
        layers, alphas = [], []
        for m, prim in enumerate(self.prims):
            o = o_b[:, m, None, :].expand_as(d_b[:, m])
            hit = ray_hit(prim, o, d_b[:, m])                         # (B, N), inf on a miss
            inside = torch.isfinite(hit)
            margin = pierce_margin(prim, o, d_b[:, m]).clamp(min=0.0)  # how deep the ray pierces (m)
            # opacity 0 at the silhouette edge, ~1 a few tau inside: continuous in the pose
            alpha = torch.where(inside, 1 - torch.exp(-margin / self.tau), torch.zeros_like(margin))
            layers.append(torch.where(inside, hit, torch.zeros_like(hit)))
            alphas.append(alpha)
        D, A = torch.stack(layers, 1), torch.stack(alphas, 1)         # (B, M, N)
        order = D.detach().argsort(1)                                 # front to back
        D, A = D.gather(1, order), A.gather(1, order)
        out = torch.zeros_like(D[:, 0])
        trans = torch.ones_like(out)
        for k in range(D.shape[1]):
            out = out + trans * A[:, k] * D[:, k]
            trans = trans * (1 - A[:, k])
        return out + trans * self.background
