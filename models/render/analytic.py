"""Analytic ray-casting backend: every pixel's ray meets every primitive in closed form.

One pass is a handful of element-wise torch ops over (M bodies, N rays); the z-buffer
is a ``min`` over bodies, so occlusions between bodies are exact and the depth of
the winning body is differentiable w.r.t. its pose (surface interiors). Silhouette
edges get gradients through the ray margin (``primitives.ray_margin``).
"""
from __future__ import annotations

import torch

from vid2sim.datasets.recording import Camera
from vid2sim.models.render.primitives import Primitive, ray_hit, ray_margin
from vid2sim.models.render.types import Rendered


class AnalyticRenderer:
    """Renders posed primitives in ``camera``.

    primitives: M shapes (``Primitive.from_shape``); colors: (M, 3) RGB in [0, 1] or None;
    tau: soft-silhouette width (m) for ``sigmoid(margin / tau)``.
    """

    name = "analytic"

    def __init__(self, camera: Camera, primitives: list[Primitive], colors=None, tau: float = 0.002,
                 dtype: torch.dtype = torch.float64, margin_iters: int = 14):
        self.camera = camera
        self.primitives = list(primitives)
        self.dtype = dtype
        self.tau = tau
        self.margin_iters = margin_iters
        self.colors = None if colors is None else torch.as_tensor(colors, dtype=dtype).reshape(len(self.primitives), 3)
        self.T_camera_world = torch.as_tensor(camera.camera_from_world, dtype=dtype)
        v, u = torch.meshgrid(torch.arange(camera.height, dtype=dtype), torch.arange(camera.width, dtype=dtype), indexing="ij")
        self.all_pixels = torch.stack([u.reshape(-1), v.reshape(-1)], -1)

    def rays(self, pixels: torch.Tensor) -> torch.Tensor:
        """pixels: (N, 2) (u, v) -> (N, 3) camera-frame directions with z = 1 (ray parameter = depth)."""
        c = self.camera
        pixels = pixels.to(self.dtype)
        return torch.stack([(pixels[:, 0] - c.cx) / c.fx, (pixels[:, 1] - c.cy) / c.fy, torch.ones_like(pixels[:, 0])], -1)

    def render(self, T_world_body: torch.Tensor, pixels: torch.Tensor | None = None,
               silhouette: bool = False) -> Rendered:
        """T_world_body: (M, 4, 4) -> ``Rendered`` for ``pixels`` (N, 2) (default: the whole image, row-major)."""
        pixels = self.all_pixels if pixels is None else pixels
        d_cam = self.rays(pixels)
        T_cb = self.T_camera_world @ T_world_body.to(self.dtype)
        hits, margins = [], []
        for m, prim in enumerate(self.primitives):
            R, t = T_cb[m, :3, :3], T_cb[m, :3, 3]
            o_b = -(R.T @ t)
            d_b = d_cam @ R  # row-wise R^T d
            o_b = o_b.expand_as(d_b)
            hits.append(ray_hit(prim, o_b, d_b))
            if silhouette:
                margins.append(ray_margin(prim, o_b, d_b, self.margin_iters))
        hit = torch.stack(hits, 0)  # (M, N)
        depth, body = hit.min(0)
        bg = torch.isinf(depth)
        body = torch.where(bg, torch.full_like(body, -1), body)
        depth = torch.where(bg, torch.zeros_like(depth), depth)
        sil = None
        if silhouette:
            # Soft coverage of each body, hidden where a nearer body's surface is hit first.
            margin = torch.stack(margins, 0)
            visible = (hit <= hit.detach().min(0).values.unsqueeze(0)) | bg.unsqueeze(0)
            sil = torch.sigmoid(margin / self.tau) * visible.to(self.dtype)
        color = None
        if self.colors is not None:
            color = torch.where(bg.unsqueeze(-1), torch.zeros(3, dtype=self.dtype), self.colors[body.clamp(min=0)])
        return Rendered(pixels=pixels, depth=depth, body=body, hit=hit, silhouette=sil, color=color)
