"""Depth and body-id images of library primitives at given poses, and compositing them
over a static background: how forecast, identify's pixel likelihood and the report draw
a twin. Exact ray casting of the primitives (``primitives.ray_hit``), not differentiable;
the tracker's differentiable renderer is ``align``.
"""
from __future__ import annotations

import math

import cv2
import numpy as np
import torch

from vid2sim.datasets.recording import Camera
from vid2sim.datasets.shapes import Shape


class DepthRenderer:
    """Depth and body-id images of primitives at given world poses, through ``camera``."""

    def __init__(self, camera: Camera, shapes: list[Shape]):
        from vid2sim.models.render.primitives import Primitive

        self.camera = camera
        self.prims = [Primitive.from_shape(s) for s in shapes]
        self.d_cam = torch.from_numpy(camera.pixel_rays().reshape(-1, 3))
        self.d_unit = self.d_cam / self.d_cam.norm(dim=1, keepdim=True)
        self.T_wc = np.asarray(camera.world_from_camera, float)
        self._last: dict[int, tuple] = {}   # body -> (its pose's bytes, rays near it, their hit distances)
        n = self.d_cam.shape[0]
        self._best = torch.full((n,), math.inf, dtype=torch.float64)   # (H*W,) nearest hit so far, inf between calls
        self._nearest = torch.full((n,), -1, dtype=torch.long)         # (H*W,) its body, -1 between calls

    def render(self, T_world_body: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """T_world_body: (M, 4, 4) -> depth (H, W) float32 m (0 = nothing), ids (H, W) int (-1 = none).

        Each primitive is cast only against the pixel rays that can reach it (``candidates``);
        the others cannot hit it. A body at exactly the pose of the previous call (a part
        fixed to the world) reuses that call's ray hits. The nearest hit per ray is kept in
        buffers the size of the image that only the cast rays touch."""
        H, W = self.camera.height, self.camera.width
        best, nearest = self._best, self._nearest
        cast = []
        for m, prim in enumerate(self.prims):
            key = np.asarray(T_world_body[m], np.float64).tobytes()
            last = self._last.get(m)
            if last is not None and last[0] == key:
                sel, s = last[1], last[2]
            else:
                sel, s = self._hits(prim, T_world_body[m])
                self._last[m] = (key, sel, s)
            if sel.numel() == 0:
                continue
            closer = s < best[sel]
            best[sel[closer]] = s[closer]
            nearest[sel[closer]] = m
            cast.append(sel)
        depth = np.zeros(H * W, np.float32)
        ids = np.full(H * W, -1, np.int64)
        if cast:
            sel = torch.cat(cast)
            b = best[sel]
            depth[sel.numpy()] = torch.where(torch.isfinite(b), b, torch.zeros_like(b)).numpy().astype(np.float32)
            ids[sel.numpy()] = nearest[sel].numpy()
            best[sel] = math.inf     # the buffers are blank again for the next call
            nearest[sel] = -1
        return depth.reshape(H, W), ids.reshape(H, W)

    def _hits(self, prim, T_world_body: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Indices (K,) of the pixel rays near the primitive at pose (4, 4) and their hit
        distances (K,) along the unnormalised camera rays (inf: a miss)."""
        from vid2sim.models.render.primitives import ray_hit

        sel = self.candidates(prim, T_world_body)
        if sel.numel() == 0:
            return sel, torch.zeros(0, dtype=torch.float64)
        T_bc = np.linalg.inv(T_world_body) @ self.T_wc  # camera in body
        R, t = torch.from_numpy(T_bc[:3, :3]), torch.from_numpy(T_bc[:3, 3])
        d = self.d_cam[sel] @ R.T
        with torch.no_grad():
            return sel, ray_hit(prim, t.expand(len(sel), 3), d)

    def candidates(self, prim, T_world_body: np.ndarray) -> torch.Tensor:
        """Indices (K,) of the pixel rays that can hit ``prim`` at pose (4, 4): those within 2 px of
        the image of its bounding box where the box lies wholly in front of the camera, else
        those passing within its bounding sphere (``rays_near``). A box's image is the convex
        hull of its projected corners; the 2-px band covers the hull's rasterisation."""
        half = _box_half(prim)
        if half is None:
            return self.rays_near(T_world_body[:3, 3], prim.bounding_radius)
        T_cb = np.linalg.solve(self.T_wc, np.asarray(T_world_body, float))   # body in camera
        corners = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1], indexing="ij")).reshape(3, -1).T * half
        p = corners @ T_cb[:3, :3].T + T_cb[:3, 3]
        if p[:, 2].min() <= 1e-6:
            return self.rays_near(T_world_body[:3, 3], prim.bounding_radius)
        cam = self.camera
        uv = np.stack([cam.fx * p[:, 0] / p[:, 2] + cam.cx, cam.fy * p[:, 1] / p[:, 2] + cam.cy], 1)
        lo = np.maximum(np.floor(uv.min(0)) - 3, 0).astype(int)
        hi = np.minimum(np.ceil(uv.max(0)) + 3, (cam.width - 1, cam.height - 1)).astype(int)
        if (lo > hi).any():
            return torch.zeros(0, dtype=torch.long)
        box = np.zeros((hi[1] - lo[1] + 1, hi[0] - lo[0] + 1), np.uint8)
        hull = cv2.convexHull(np.round((uv - lo) * 16).astype(np.int32))
        cv2.fillConvexPoly(box, hull, 1, lineType=cv2.LINE_8, shift=4)
        box = cv2.dilate(box, np.ones((5, 5), np.uint8))
        v, u = np.nonzero(box)
        return torch.from_numpy((v + lo[1]) * cam.width + (u + lo[0]))

    def rays_near(self, centre_world: np.ndarray, radius: float) -> torch.Tensor:
        """Indices (K,) into the H*W pixel rays that pass within ``radius`` (m) of ``centre_world``
        (3,), in front of the camera: all of them when the camera is inside that sphere. A sphere
        wholly in front of the camera is first bounded by its image's pixel box."""
        c = np.linalg.solve(self.T_wc, np.append(np.asarray(centre_world, float), 1.0))[:3]
        dist, r = float(np.linalg.norm(c)), 1.01 * float(radius) + 1e-6
        if dist <= r:
            return torch.arange(self.d_unit.shape[0])
        cand = self._pixel_box(c, r) if c[2] > r else None
        if cand is not None and cand.numel() == 0:
            return cand
        d = self.d_unit if cand is None else self.d_unit[cand]
        keep = d @ torch.from_numpy(c / dist) >= math.sqrt(1.0 - (r / dist) ** 2) - 1e-9
        return torch.nonzero(keep)[:, 0] if cand is None else cand[keep]

    def _pixel_box(self, c: np.ndarray, r: float) -> torch.Tensor:
        """Pixel indices (K,) of the box holding the image of the sphere (centre c (3,) in the camera
        frame, radius r < c_z): x / z and y / z of its points lie between the bounds below."""
        cam = self.camera

        def span(a: float, f: float, centre: float, size: int) -> tuple[int, int]:
            hi = (a + r) / (c[2] - r if a + r >= 0 else c[2] + r)
            lo = (a - r) / (c[2] - r if a - r < 0 else c[2] + r)
            return max(0, math.floor(f * lo + centre) - 1), min(size - 1, math.ceil(f * hi + centre) + 1)

        u0, u1 = span(c[0], cam.fx, cam.cx, cam.width)
        v0, v1 = span(c[1], cam.fy, cam.cy, cam.height)
        if u0 > u1 or v0 > v1:
            return torch.zeros(0, dtype=torch.long)
        return (torch.arange(v0, v1 + 1)[:, None] * cam.width + torch.arange(u0, u1 + 1)[None]).reshape(-1)


def _box_half(prim) -> np.ndarray | None:
    """(3,) half-extents (m) of a box about the body origin holding ``prim``; None for a sphere,
    which its bounding sphere holds exactly."""
    if prim.kind in ("box", "mesh"):
        return np.asarray(prim.half_size, float)
    if prim.kind == "cylinder":
        return np.array([prim.radius, prim.radius, prim.half_length])
    if prim.kind == "capsule":
        return np.array([prim.radius, prim.radius, prim.half_length + prim.radius])
    return None


def background_from(depths: list[np.ndarray], covers: list[np.ndarray]) -> np.ndarray:
    """(H, W) depth of the scene without the mechanism: the per-pixel median of ``depths``
    (each (H, W) metres) where the mechanism's rendered silhouette ``covers`` (each (H, W)
    bool, dilated by 2 px) is absent; never-uncovered pixels take the nearest seen value."""
    kernel = np.ones((5, 5), np.uint8)
    stack = np.stack(depths)
    valid = np.stack([~(cv2.dilate(c.astype(np.uint8), kernel) > 0) for c in covers])
    masked = np.where(valid, stack, np.nan)
    seen = valid.any(axis=0)
    bg = np.where(seen, nanmedian0(np.where(seen, masked, 0.0)), 0.0)
    if seen.any() and not seen.all():  # never-uncovered pixels: the nearest seen background
        from scipy.ndimage import distance_transform_edt

        _, (iy, ix) = distance_transform_edt(~seen, return_indices=True)
        bg = bg[iy, ix]
    return bg.astype(np.float32)


def nanmedian0(x: np.ndarray) -> np.ndarray:
    """Median over axis 0 of (N, ...) ``x`` ignoring NaN (NaN where all are), the values of
    ``np.nanmedian(x, axis=0)``; written out because for N < 600 NumPy takes it through
    masked arrays, about 6x slower on a 61-frame 640x480 stack."""
    ordered = np.sort(x, axis=0)                    # NaN sort last
    n = (~np.isnan(x)).sum(axis=0)
    lo = np.take_along_axis(ordered, ((n - 1) // 2)[None], 0)[0]
    hi = np.take_along_axis(ordered, (n // 2)[None], 0)[0]
    with np.errstate(invalid="ignore"):
        return (lo + hi) / 2                        # an odd count: both are the middle value


def composite(depth_mech: np.ndarray, background: np.ndarray) -> np.ndarray:
    """Mechanism in front of the background (a 0 background reading stays 0 unless covered)."""
    front = (depth_mech > 0) & ((background <= 0) | (depth_mech < background))
    return np.where(front, depth_mech, background)
