"""Depth, colour and body masks of a synthetic clip, by ray casting.

Rendering uses Open3D's ``RaycastingScene`` (Embree BVH over finely tessellated
primitives), deliberately not the tracker's differentiable renderer, so tracking is
judged against pixels it did not make. Rays go through pixel centres (OpenCV
convention: pixel (u, v) looks along ((u - cx)/fx, (v - cy)/fy, 1)); with that
unnormalised direction the hit distance *is* the z-depth.

Ray casting gives depth exact up to the tessellation (< 0.5 mm for these sizes) and pixel
geometry exactly ``Camera.project``'s, which the ground-truth checks rely on (why not
PyBullet's TinyRenderer: docs/decisions.md, "Settings and their measured reasons").

A floor (checkerboard) and a back wall give every pixel a background reading, as
in a room; they are intersected analytically. Shading is Lambertian with a light
near the camera, plus ambient.
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
    """Triangle mesh (V (n, 3), F (m, 3)) of a shape in its body frame (centred); a mesh shape's own."""
    G = o3d.geometry.TriangleMesh
    if shape.type == "mesh":  # the file's triangles, in the body frame (centre of mass at the origin)
        m = shape.mesh()
        return np.asarray(m.vertices, np.float64).copy(), np.asarray(m.faces).astype(np.uint32)
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


class Renderer:
    """Renders (depth z in metres, RGB uint8, body mask uint8) of one camera.

    meshes: body-frame meshes in body order (mask value i + 1); colours: RGB in [0, 1];
    floor_z: height of the background floor; wall_distance: horizontal distance of the
    back wall from the camera; tip: optional (Shape, colour).

    The static background (floor, wall) is intersected analytically once; per frame
    only the rays inside the bounding rectangle of the projected bodies are cast.
    """

    def __init__(self, camera: Camera, meshes: list[tuple[np.ndarray, np.ndarray]],
                 colours: list[tuple[float, float, float]], floor_z: float, wall_distance: float,
                 tip: tuple[Shape, tuple[float, float, float]] | None = None):
        self.camera = camera
        self.meshes = meshes
        self.tip_mesh = shape_mesh(tip[0]) if tip is not None else None
        T = camera.world_from_camera
        self.eye = T[:3, 3].copy()
        self.d_world = camera.pixel_rays() @ T[:3, :3].T  # (H, W, 3), unit z-component in camera frame
        fwd = T[:3, 2].copy()
        fwd_h = np.array([fwd[0], fwd[1], 0.0])
        fwd_h = fwd_h / np.linalg.norm(fwd_h) if np.linalg.norm(fwd_h) > 1e-6 else np.array([0.0, 1.0, 0.0])
        side = np.cross(fwd_h, [0.0, 0.0, 1.0])
        # Palette: index 0 floor, 1 wall, 2.. bodies, last tip.
        self.albedo = np.array([(0.6, 0.6, 0.6), (0.78, 0.78, 0.82), *colours, (0.25, 0.25, 0.28)], np.float32)
        self.light = -fwd + np.array([0.0, 0.0, 1.0]) + 0.3 * side
        self.light /= np.linalg.norm(self.light)

        # Background: the nearer of the floor plane z = floor_z and the wall plane
        # (normal fwd_h, wall_distance ahead of the camera); t is the z-depth.
        with np.errstate(divide="ignore", invalid="ignore"):
            t_floor = (floor_z - self.eye[2]) / self.d_world[..., 2]
            t_wall = wall_distance / (self.d_world @ fwd_h)
        t_floor = np.where(t_floor > 0, t_floor, np.inf)
        t_wall = np.where(t_wall > 0, t_wall, np.inf)
        floor = t_floor <= t_wall
        t_bg = np.minimum(t_floor, t_wall)
        self.bg_depth = np.where(np.isfinite(t_bg), t_bg, 0.0).astype(np.float32)
        self.bg_pal = np.where(floor, 0, 1)
        n_bg = np.where(floor[..., None], np.array([0.0, 0.0, 1.0]), -fwd_h)
        albedo = self.albedo[self.bg_pal]
        p = self.eye + self.d_world * self.bg_depth[..., None]
        check = (np.floor(p[..., 0] / 0.1) + np.floor(p[..., 1] / 0.1)) % 2  # texture for flow and the eye
        albedo = np.where(floor[..., None], albedo * (0.8 + 0.3 * check)[..., None], albedo)
        self.bg_rgb = self._shade(albedo, n_bg)

    def _shade(self, albedo: np.ndarray, n: np.ndarray) -> np.ndarray:
        lambert = np.clip(n @ self.light, 0.0, 1.0)
        return albedo * (0.35 + 0.65 * lambert)[..., None]

    def render(self, world_from_body: np.ndarray, T_world_tip: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """world_from_body: (M, 4, 4) -> depth (H, W) float32 m, rgb (H, W, 3) uint8, mask (H, W) uint8."""
        cam = self.camera
        scene = o3d.t.geometry.RaycastingScene(nthreads=1)
        owner, verts = [], []  # geometry id -> palette index; world vertices
        items = [(V, F, world_from_body[m], 2 + m) for m, (V, F) in enumerate(self.meshes)]
        if self.tip_mesh is not None and T_world_tip is not None:
            items.append((*self.tip_mesh, T_world_tip, len(self.albedo) - 1))
        for V, F, T, pal in items:
            Vw = V @ T[:3, :3].T + T[:3, 3]
            scene.add_triangles(Vw.astype(np.float32), F)
            owner.append(pal)
            verts.append(Vw)
        owner = np.asarray(owner)
        depth, pal = self.bg_depth.copy(), self.bg_pal.copy()
        rgb = self.bg_rgb.copy()
        uv, z = cam.project(np.concatenate(verts))
        if (z > 1e-3).all():  # cast only inside the bodies' projected bounding rectangle
            u0, v0 = np.maximum(np.floor(uv.min(0)).astype(int) - 1, 0)
            u1 = min(int(np.ceil(uv[:, 0].max())) + 2, cam.width)
            v1 = min(int(np.ceil(uv[:, 1].max())) + 2, cam.height)
        else:
            u0, v0, u1, v1 = 0, 0, cam.width, cam.height
        if u1 <= u0 or v1 <= v0:
            return depth, np.clip(rgb * 255.0 + 0.5, 0, 255).astype(np.uint8), np.zeros(depth.shape, np.uint8)
        d = self.d_world[v0:v1, u0:u1]
        rays = np.concatenate([np.broadcast_to(self.eye, d.shape), d], -1).astype(np.float32)
        hit = scene.cast_rays(o3d.core.Tensor(rays), nthreads=1)
        t = hit["t_hit"].numpy()
        gid = hit["geometry_ids"].numpy().astype(np.int64)
        bg = self.bg_depth[v0:v1, u0:u1]
        front = np.isfinite(t) & (gid < len(owner)) & ((bg == 0) | (t < bg))
        n = hit["primitive_normals"].numpy()
        n[np.sum(n * d, -1) > 0] *= -1  # face the camera
        p_sub = owner[np.where(front, gid, 0)]
        sub = (slice(v0, v1), slice(u0, u1))
        depth[sub] = np.where(front, t, depth[sub])
        pal[sub] = np.where(front, p_sub, pal[sub])
        rgb[sub] = np.where(front[..., None], self._shade(self.albedo[p_sub], n), rgb[sub])
        rgb = np.clip(rgb * 255.0 + 0.5, 0, 255).astype(np.uint8)
        mask = np.zeros(pal.shape, np.uint8)
        body = (pal >= 2) & (pal < len(self.albedo) - 1)
        mask[body] = (pal[body] - 1).astype(np.uint8)
        mask[pal == len(self.albedo) - 1] = TIP_ID
        return depth, rgb, mask
