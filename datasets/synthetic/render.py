"""Depth, colour and body masks of a synthetic clip, by ray casting.

Rendering uses Open3D's ``RaycastingScene`` (Embree BVH over finely tessellated
primitives), deliberately not the tracker's differentiable renderer, so tracking is
judged against pixels it did not make. Rays go through pixel centres (OpenCV
convention: pixel (u, v) looks along ((u - cx)/fx, (v - cy)/fy, 1)); with that
unnormalised direction the hit distance *is* the z-depth. PyBullet's TinyRenderer
was measured as the alternative: slower and its depth buffer is nonlinear
(report in the package docstring).

A floor (checkerboard) and a back wall give every pixel a background reading, as
in a room. Shading is Lambertian with a light near the camera, plus ambient.
"""
from __future__ import annotations

import math

import numpy as np
import open3d as o3d

from vid2sim.datasets.recording import Camera
from vid2sim.datasets.shapes import Shape

TIP_ID = 255  # mask value of the pusher tip (not a tracked body); 0 = background
HFOV_DEG = 60.0


def camera_looking_at(target, azimuth_deg: float, elevation_deg: float, distance: float,
                      size=(320, 240), fps: float = 30.0, hfov_deg: float = HFOV_DEG) -> Camera:
    """Pinhole camera ``distance`` from ``target``; azimuth 0 looks along +y, world z up."""
    az, el = math.radians(azimuth_deg), math.radians(elevation_deg)
    offset = np.array([math.sin(az) * math.cos(el), -math.cos(az) * math.cos(el), math.sin(el)])
    eye = np.asarray(target, float) + distance * offset
    z = -offset  # optical axis
    x = np.cross(z, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    y = np.cross(z, x)  # image down
    T = np.eye(4)
    T[:3, 0], T[:3, 1], T[:3, 2], T[:3, 3] = x, y, z, eye
    w, h = size
    f = (w / 2.0) / math.tan(math.radians(hfov_deg) / 2)
    return Camera(width=int(w), height=int(h), fx=f, fy=f, cx=(w - 1) / 2.0, cy=(h - 1) / 2.0,
                  depth_scale=0.001, fps=float(fps), world_from_camera=T)


def fit_camera(points: np.ndarray, view: tuple[float, float], size=(320, 240), fps: float = 30.0,
               margin: float = 0.06, min_distance: float = 1.0) -> Camera:
    """The closest camera on the ``view`` (azimuth, elevation) ray that sees all ``points``.

    points: (N, 3) world points that must stay inside the image, ``margin`` (fraction of
    the image size) away from its border.
    """
    lo, hi = points.min(0), points.max(0)
    target = (lo + hi) / 2
    w, h = size
    d = min_distance
    while True:
        cam = camera_looking_at(target, view[0], view[1], d, size, fps)
        uv, z = cam.project(points)
        inside = (z > 0.2).all() and (uv[:, 0] > margin * w).all() and (uv[:, 0] < (1 - margin) * w).all() \
            and (uv[:, 1] > margin * h).all() and (uv[:, 1] < (1 - margin) * h).all()
        if inside or d > 20:
            return cam
        d *= 1.02


def shape_mesh(shape: Shape, resolution: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Triangle mesh (V (n, 3), F (m, 3)) of a primitive in its body frame (centred)."""
    G = o3d.geometry.TriangleMesh
    if shape.type == "box":
        m = G.create_box(*shape.size)
        m.translate(-np.asarray(shape.size) / 2)
        meshes = [m]
    elif shape.type == "sphere":
        meshes = [G.create_sphere(shape.radius, resolution=resolution // 2)]
    elif shape.type == "cylinder":
        meshes = [G.create_cylinder(shape.radius, shape.length, resolution=resolution, split=1)]
    elif shape.type == "capsule":
        cyl = G.create_cylinder(shape.radius, shape.length, resolution=resolution, split=1)
        caps = [G.create_sphere(shape.radius, resolution=resolution // 2).translate((0, 0, s * shape.length / 2))
                for s in (-1, 1)]
        meshes = [cyl, *caps]
    else:
        raise ValueError(f"cannot render shape type {shape.type!r}")
    V, F, n = [], [], 0
    for m in meshes:
        v = np.asarray(m.vertices)
        V.append(v)
        F.append(np.asarray(m.triangles) + n)
        n += len(v)
    return np.concatenate(V), np.concatenate(F).astype(np.uint32)


def _quad(corner: np.ndarray, e1: np.ndarray, e2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    V = np.stack([corner, corner + e1, corner + e1 + e2, corner + e2])
    return V, np.array([[0, 1, 2], [0, 2, 3]], np.uint32)


class Renderer:
    """Renders (depth z in metres, RGB uint8, body mask uint8) of one camera.

    meshes: body-frame meshes in body order (mask value i + 1); colours: RGB in [0, 1];
    floor_z: height of the background floor; tip: optional (Shape, colour).
    """

    def __init__(self, camera: Camera, meshes: list[tuple[np.ndarray, np.ndarray]],
                 colours: list[tuple[float, float, float]], floor_z: float, wall_distance: float,
                 tip: tuple[Shape, tuple[float, float, float]] | None = None):
        self.camera = camera
        self.meshes = meshes
        self.tip_mesh = shape_mesh(tip[0]) if tip is not None else None
        T = camera.world_from_camera
        self.eye = T[:3, 3].copy()
        u, v = np.meshgrid(np.arange(camera.width), np.arange(camera.height))
        d_cam = np.stack([(u - camera.cx) / camera.fx, (v - camera.cy) / camera.fy, np.ones_like(u, float)], -1)
        self.d_world = d_cam @ T[:3, :3].T  # (H, W, 3), unit z-component in camera frame
        rays = np.concatenate([np.broadcast_to(self.eye, self.d_world.shape), self.d_world], -1)
        self.rays = o3d.core.Tensor(rays.astype(np.float32))
        fwd = T[:3, 2].copy()
        fwd_h = np.array([fwd[0], fwd[1], 0.0])
        fwd_h = fwd_h / np.linalg.norm(fwd_h) if np.linalg.norm(fwd_h) > 1e-6 else np.array([0.0, 1.0, 0.0])
        side = np.cross(fwd_h, [0.0, 0.0, 1.0])
        self.floor_z = floor_z
        c = np.array([self.eye[0], self.eye[1], floor_z])
        self.floor = _quad(c - 30 * fwd_h - 30 * side, 60 * side, 60 * fwd_h)
        wall_c = np.array([self.eye[0], self.eye[1], floor_z]) + wall_distance * fwd_h
        self.wall = _quad(wall_c - 30 * side, 60 * side, np.array([0.0, 0.0, 30.0]))
        # Palette: index 0 floor, 1 wall, 2.. bodies, last tip.
        self.albedo = np.array([(0.6, 0.6, 0.6), (0.78, 0.78, 0.82), *colours, (0.25, 0.25, 0.28)], np.float32)
        self.light = (-fwd + np.array([0.0, 0.0, 1.0]) + 0.3 * side)
        self.light /= np.linalg.norm(self.light)

    def render(self, world_from_body: np.ndarray, T_world_tip: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """world_from_body: (M, 4, 4) -> depth (H, W) float32 m, rgb (H, W, 3) uint8, mask (H, W) uint8."""
        scene = o3d.t.geometry.RaycastingScene(nthreads=1)
        owner = []  # geometry id -> palette index
        for V, F in (self.floor, self.wall):
            scene.add_triangles(V.astype(np.float32), F)
        owner += [0, 1]
        for m, (V, F) in enumerate(self.meshes):
            T = world_from_body[m]
            scene.add_triangles((V @ T[:3, :3].T + T[:3, 3]).astype(np.float32), F)
            owner.append(2 + m)
        if self.tip_mesh is not None and T_world_tip is not None:
            V, F = self.tip_mesh
            scene.add_triangles((V @ T_world_tip[:3, :3].T + T_world_tip[:3, 3]).astype(np.float32), F)
            owner.append(len(self.albedo) - 1)
        hit = scene.cast_rays(self.rays, nthreads=1)
        t = hit["t_hit"].numpy()
        gid = hit["geometry_ids"].numpy().astype(np.int64)
        valid = np.isfinite(t) & (gid < len(owner))
        owner = np.asarray(owner)
        pal = np.where(valid, owner[np.where(valid, gid, 0)], 1)
        depth = np.where(valid, t, 0.0).astype(np.float32)

        n = hit["primitive_normals"].numpy()
        flip = np.sum(n * self.d_world, -1) > 0
        n[flip] *= -1
        lambert = np.clip(n @ self.light, 0.0, 1.0)
        albedo = self.albedo[pal]
        floor = pal == 0
        if floor.any():  # checkerboard: texture for optical flow and for the eye
            p = self.eye + self.d_world[floor] * depth[floor, None]
            check = (np.floor(p[:, 0] / 0.1) + np.floor(p[:, 1] / 0.1)) % 2
            albedo[floor] *= (0.8 + 0.3 * check)[:, None].astype(np.float32)
        rgb = albedo * (0.35 + 0.65 * lambert)[..., None]
        rgb = np.clip(rgb * 255.0 + 0.5, 0, 255).astype(np.uint8)

        mask = np.zeros(pal.shape, np.uint8)
        body = (pal >= 2) & (pal < len(self.albedo) - 1)
        mask[body] = (pal[body] - 1).astype(np.uint8)
        mask[pal == len(self.albedo) - 1] = TIP_ID
        return depth, rgb, mask
