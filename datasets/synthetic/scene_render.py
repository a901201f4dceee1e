"""The two independent renderers of random scenes (``scene.py``).

Both return per frame depth (H, W) float32 z-depth in metres (0 = nothing within
``FAR_M``), RGB (H, W, 3) uint8 and the true mask (H, W) uint8: body i -> i + 1, the
pusher tip -> ``TIP_ID`` (255), a distractor -> ``DISTRACTOR_ID`` (254), floor, wall,
table and void -> 0.

- ``SceneRaycaster``: Open3D ``RaycastingScene`` through pixel centres (OpenCV
  convention, exactly ``Camera.project``); floor and wall planes analytic; table and
  static distractors cast once; per frame only the rays inside the projected box of
  the moving geometry.
- ``TinyRenderer``: PyBullet's software rasteriser (``ER_TINY_RENDERER``, DIRECT mode;
  static geometry rendered once, the moving geometry per frame, composited by depth)
  with the library's shapes (boxes as PyBullet boxes; spheres, cylinders and capsules as
  ``CURVED_RESOLUTION``-segment triangle meshes with their true normals, ``curved_mesh``:
  PyBullet's own curved visual shapes are coarse polygons whose capsule ends fall up to
  5 mm short of the true surface in an oblique view of a 25 mm capsule), its
  own shading (``lightDirection`` / ambient / diffuse, no shadows) and its segmentation
  buffer for the ids. The OpenGL frustum is built from the same intrinsics; measured
  against the ray caster, TinyRenderer's pixel (u, v) samples the ray-cast image at
  (u, v + 1) in OpenGL window coordinates, hence the frustum's one-row offset
  (``_projection``; tests/test_scenes.py checks mask IoU and depth against ray casting).
  Its nonlinear depth buffer is linearised to z-depth. Floors and walls are untextured
  there (a plain colour); the ray caster's floor is a 10 cm checkerboard.
"""
from __future__ import annotations

import numpy as np
import open3d as o3d
from scipy.spatial.transform import Rotation

from vid2sim.datasets.recording import Camera
from vid2sim.datasets.shapes import Shape
from vid2sim.datasets.synthetic.render import TIP_ID, shape_mesh
from vid2sim.datasets.synthetic.scene import DISTRACTOR_ID, TABLE_HEIGHT_M, Scene

FAR_M = 15.0  # depth beyond this is no reading
NEAR_M = 0.05  # TinyRenderer's near plane
FLOOR_RGB = (0.55, 0.55, 0.52)
WALL_RGB = (0.8, 0.78, 0.74)
TABLE_RGB = (0.55, 0.4, 0.25)
TIP_RGB = (0.25, 0.25, 0.28)
CURVED_RESOLUTION = 64  # segments around a curved primitive rendered by TinyRenderer (0.12 % radius error)


def _table_boxes(table) -> list[tuple[np.ndarray, np.ndarray]]:
    """(centre (3,), size (3,)) of the table top and its four legs."""
    c, s = table
    top = c[2] + s[2] / 2
    leg_h = TABLE_HEIGHT_M - s[2]
    out = [(np.asarray(c, float), np.asarray(s, float))]
    for sx in (-1, 1):
        for sy in (-1, 1):
            out.append((np.array([c[0] + sx * (s[0] / 2 - 0.05), c[1] + sy * (s[1] / 2 - 0.05), top - s[2] - leg_h / 2]),
                        np.array([0.05, 0.05, leg_h])))
    return out


class _Items:
    """Geometry of a scene in one list: (shape, mask id, colour, pose(k) callable | static pose)."""

    def __init__(self, scene: Scene, shapes: list[Shape], tip: Shape | None):
        self.bodies = [(s, i + 1, scene.colours[i]) for i, s in enumerate(shapes)]
        self.tip = (tip, TIP_ID, TIP_RGB) if tip is not None else None
        self.static = []  # (Shape, T, id, colour)
        if scene.table is not None:
            for j, (c, s) in enumerate(_table_boxes(scene.table)):
                T = np.eye(4)
                T[:3, 3] = c
                self.static.append((Shape(f"table{j}", "box", size=tuple(s)), T, 0, TABLE_RGB))
        self.moving = []  # (Distractor, id, colour)
        for d in scene.distractors:
            if d.moving:
                self.moving.append(d)
            else:
                self.static.append((d.shape, d.T0, DISTRACTOR_ID, d.colour))


def _rays(camera: Camera) -> np.ndarray:
    """(H, W, 3) world directions through pixel centres with unit camera-z component."""
    return camera.pixel_rays() @ camera.world_from_camera[:3, :3].T


def _to_u8(rgb: np.ndarray) -> np.ndarray:
    return np.clip(rgb * 255.0 + 0.5, 0, 255).astype(np.uint8)


class SceneRaycaster:
    """Ray-cast renderer of a random scene; ``render(world_from_body, tip_pose, t)``."""

    def __init__(self, scene: Scene, shapes: list[Shape], tip: Shape | None = None):
        cam = self.camera = scene.camera
        self.scene = scene
        self.items = _Items(scene, shapes, tip)
        self.eye = cam.world_from_camera[:3, 3].copy()
        self.d_world = _rays(cam)
        self.meshes = {id(s): shape_mesh(s) for s, *_ in self.items.bodies}
        if tip is not None:
            self.meshes[id(tip)] = shape_mesh(tip)
        for d in self.items.moving:
            self.meshes[id(d.shape)] = shape_mesh(d.shape)
        self._static_background()

    def _shade(self, albedo: np.ndarray, n: np.ndarray) -> np.ndarray:
        lam = np.clip(n @ self.scene.light, 0.0, 1.0)
        return albedo * (self.scene.ambient + (1 - self.scene.ambient) * lam)[..., None]

    def _cast(self, geoms: list[tuple[Shape, np.ndarray]], d: np.ndarray):
        """Cast rays ``d`` (h, w, 3) from the eye at posed shapes; returns t (inf = miss), index, normals."""
        scene = o3d.t.geometry.RaycastingScene(nthreads=1)
        for s, T in geoms:
            V, F = self.meshes[id(s)] if id(s) in self.meshes else shape_mesh(s)
            scene.add_triangles((V @ T[:3, :3].T + T[:3, 3]).astype(np.float32), F)
        rays = np.concatenate([np.broadcast_to(self.eye, d.shape), d], -1).astype(np.float32)
        hit = scene.cast_rays(o3d.core.Tensor(rays), nthreads=1)
        n = hit["primitive_normals"].numpy()
        n[np.sum(n * d, -1) > 0] *= -1
        gid = hit["geometry_ids"].numpy().astype(np.int64)
        t = hit["t_hit"].numpy()
        return t, np.where(np.isfinite(t), gid, 0), n

    def _static_background(self) -> None:
        sc, d = self.scene, self.d_world
        H, W = d.shape[:2]
        t = np.full((H, W), np.inf)
        rgb = np.broadcast_to(np.asarray(sc.void_colour, float), (H, W, 3)).copy()
        ids = np.zeros((H, W), np.uint8)
        with np.errstate(divide="ignore", invalid="ignore"):
            if sc.floor_z is not None:
                tf = (sc.floor_z - self.eye[2]) / d[..., 2]
                tf = np.where(tf > 0, tf, np.inf)
                p = self.eye + d * np.where(np.isfinite(tf), tf, 0)[..., None]
                check = (np.floor(p[..., 0] / 0.1) + np.floor(p[..., 1] / 0.1)) % 2
                alb = np.asarray(FLOOR_RGB) * (0.8 + 0.3 * check)[..., None]
                rgb = np.where(np.isfinite(tf)[..., None], self._shade(alb, np.array([0.0, 0, 1])), rgb)
                t = tf
            if sc.wall is not None:
                n, c = sc.wall
                tw = (c - self.eye @ n) / (d @ n)
                tw = np.where(tw > 0, tw, np.inf)
                front = tw < t
                rgb = np.where(front[..., None], self._shade(np.asarray(WALL_RGB), n), rgb)
                t = np.where(front, tw, t)
        if self.items.static:
            geoms = [(s, T) for s, T, _, _ in self.items.static]
            ts, gid, n = self._cast(geoms, d)
            front = ts < t
            alb = np.asarray([c for *_, c in self.items.static], float)[gid]
            rgb = np.where(front[..., None], self._shade(alb, n), rgb)
            ids = np.where(front, np.asarray([i for _, _, i, _ in self.items.static], np.uint8)[gid], ids)
            t = np.where(front, ts, t)
        self.bg_t, self.bg_rgb, self.bg_ids = t, rgb, ids

    def render(self, world_from_body: np.ndarray, tip_pose: np.ndarray | None = None, t_s: float = 0.0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """world_from_body: (M, 4, 4); tip_pose: (4, 4) or None; t_s: clip time (s) of moving distractors."""
        cam = self.camera
        posed = [(s, T, i, c) for (s, i, c), T in zip(self.items.bodies, world_from_body)]
        if self.items.tip is not None and tip_pose is not None:
            posed.append((self.items.tip[0], tip_pose, TIP_ID, TIP_RGB))
        posed += [(d.shape, d.pose(t_s), DISTRACTOR_ID, d.colour) for d in self.items.moving]
        geoms = [(s, T) for s, T, _, _ in posed]
        ids = [i for _, _, i, _ in posed]
        cols = [c for *_, c in posed]
        t, rgb, mask = self.bg_t.copy(), self.bg_rgb.copy(), self.bg_ids.copy()
        verts = np.concatenate([self.meshes[id(s)][0] @ T[:3, :3].T + T[:3, 3] for s, T in geoms])
        uv, z = cam.project(verts)
        u0, v0, u1, v1 = 0, 0, cam.width, cam.height
        if (z > 1e-3).all():
            u0, v0 = np.maximum(np.floor(uv.min(0)).astype(int) - 1, 0)
            u1 = min(int(np.ceil(uv[:, 0].max())) + 2, cam.width)
            v1 = min(int(np.ceil(uv[:, 1].max())) + 2, cam.height)
        if u1 > u0 and v1 > v0:
            sub = (slice(v0, v1), slice(u0, u1))
            th, gid, n = self._cast(geoms, self.d_world[sub])
            front = th < t[sub]
            t[sub] = np.where(front, th, t[sub])
            rgb[sub] = np.where(front[..., None], self._shade(np.asarray(cols, float)[gid], n), rgb[sub])
            mask[sub] = np.where(front, np.asarray(ids, np.uint8)[gid], mask[sub])
        depth = np.where(np.isfinite(t) & (t < FAR_M), t, 0.0).astype(np.float32)
        return depth, _to_u8(rgb), mask


def _projection(cam: Camera, near: float, far: float) -> np.ndarray:
    """(4, 4) OpenGL projection of ``cam``'s intrinsics for TinyRenderer (see the module docstring)."""
    W, H = cam.width, cam.height
    l, r = -cam.cx * near / cam.fx, (W - cam.cx) * near / cam.fx
    t, b = (cam.cy + 1) * near / cam.fy, -(H - cam.cy - 1) * near / cam.fy
    return np.array([[2 * near / (r - l), 0, (r + l) / (r - l), 0], [0, 2 * near / (t - b), (t + b) / (t - b), 0],
                     [0, 0, -(far + near) / (far - near), -2 * far * near / (far - near)], [0, 0, -1, 0]])


def curved_mesh(shape: Shape, resolution: int = CURVED_RESOLUTION) -> tuple[np.ndarray, np.ndarray]:
    """Unshared triangle corners V (3m, 3) of a sphere, cylinder or capsule (body frame, m) and their normals N (3m, 3).

    Normals are the true surface's (radial on a sphere, a cylinder's side and a capsule; axial on a
    cylinder's flat ends), so TinyRenderer shades the polygons as the smooth shape.
    """
    Vs, F = shape_mesh(shape, resolution)
    V = Vs[F].reshape(-1, 3)
    if shape.type == "sphere":
        N = V.copy()
    elif shape.type == "capsule":
        N = V - np.clip(V[:, 2], -shape.length / 2, shape.length / 2)[:, None] * np.array([0.0, 0.0, 1.0])
    else:
        tri = V.reshape(-1, 3, 3)
        face_n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        flat = np.abs(face_n[:, 2]) > 0.99 * np.linalg.norm(face_n, axis=1)
        N = np.where(np.repeat(flat, 3)[:, None], np.repeat(np.sign(face_n[:, 2]), 3)[:, None] * [0.0, 0.0, 1.0],
                     V * [1.0, 1.0, 0.0])
    inner = np.linalg.norm(N, axis=1) < 1e-9  # a capsule's hidden cylinder end discs: their centres
    N[inner] = np.sign(V[inner, 2:3]) * [0.0, 0.0, 1.0]
    return V, N / np.linalg.norm(N, axis=1, keepdims=True)


class TinyRenderer:
    """PyBullet TinyRenderer of a random scene; same interface as SceneRaycaster. Call ``close()``."""

    def __init__(self, scene: Scene, shapes: list[Shape], tip: Shape | None = None):
        import pybullet as p

        self.p, self.scene, self.camera = p, scene, scene.camera
        self.cid = p.connect(p.DIRECT)
        self.ids: dict[int, int] = {}  # pybullet body uid -> mask id
        V = np.diag([1.0, -1, -1, 1]) @ scene.camera.camera_from_world
        self.view = V.T.flatten().tolist()
        self.proj = _projection(scene.camera, NEAR_M, FAR_M).T.flatten().tolist()
        # The static part (floor, wall, table, resting distractors) is rendered once; per
        # frame only the moving geometry is, and the two are composited by depth.
        static = []
        big = 60.0
        if scene.floor_z is not None:
            T = np.eye(4)
            T[:3, 3] = [*scene.camera.world_from_camera[:2, 3], scene.floor_z - 0.01]
            static.append(self._add(Shape("floor", "box", size=(big, big, 0.02)), T, FLOOR_RGB, 0))
        if scene.wall is not None:
            n, c = scene.wall
            x = np.cross(n, [0.0, 0, 1])  # right-handed (x, n, z)
            T = np.eye(4)
            T[:3, :3] = np.stack([x / np.linalg.norm(x), n, [0, 0, 1]], 1)
            eye = scene.camera.world_from_camera[:3, 3]
            T[:3, 3] = eye - (eye @ n - c + 0.01) * n
            static.append(self._add(Shape("wall", "box", size=(big, 0.02, big)), T, WALL_RGB, 0))
        for s, T, i, col in _Items(scene, shapes, tip).static:
            static.append(self._add(s, T, col, i))
        self.bg = self._snap()
        self.away = np.eye(4)  # behind the camera: clipped
        self.away[:3, 3] = scene.camera.world_from_camera[:3, 3] - 100 * scene.camera.world_from_camera[:3, 2]
        for uid in static:
            self._place(uid, self.away)
        self.bodies = [self._add(s, self.away, scene.colours[i], i + 1) for i, s in enumerate(shapes)]
        self.tip = self._add(tip, self.away, TIP_RGB, TIP_ID) if tip is not None else None
        self.moving = [(d, self._add(d.shape, d.T0, d.colour, DISTRACTOR_ID)) for d in scene.distractors if d.moving]

    def _add(self, shape: Shape, T: np.ndarray, colour, mask_id: int) -> int:
        p, kw = self.p, {"rgbaColor": [*colour, 1.0], "physicsClientId": self.cid}
        if shape.type == "mesh":  # the file, scaled, its centre of mass at the body origin
            vs = p.createVisualShape(p.GEOM_MESH, fileName=str(shape.mesh_path().resolve()), meshScale=[shape.scale] * 3,
                                     visualFramePosition=(-shape.mesh_offset()).tolist(), **kw)
        elif shape.type == "box":
            vs = p.createVisualShape(p.GEOM_BOX, halfExtents=[x / 2 for x in shape.size], **kw)
        else:  # sphere, cylinder, capsule: fine triangles (PyBullet's own are coarse polygons)
            V, N = curved_mesh(shape)
            vs = p.createVisualShape(p.GEOM_MESH, vertices=V.tolist(), indices=list(range(len(V))), normals=N.tolist(), **kw)
        uid = p.createMultiBody(0, -1, vs, basePosition=T[:3, 3].tolist(),
                                baseOrientation=Rotation.from_matrix(T[:3, :3]).as_quat().tolist(),
                                physicsClientId=self.cid)
        self.ids[uid] = mask_id
        return uid

    def _place(self, uid: int, T: np.ndarray) -> None:
        self.p.resetBasePositionAndOrientation(uid, T[:3, 3].tolist(), Rotation.from_matrix(T[:3, :3]).as_quat().tolist(),
                                               physicsClientId=self.cid)

    def _snap(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Render what is placed now: z-depth (inf = nothing), RGB float in [0, 1], mask ids."""
        p, cam, sc = self.p, self.camera, self.scene
        W, H = cam.width, cam.height
        img = p.getCameraImage(W, H, viewMatrix=self.view, projectionMatrix=self.proj, renderer=p.ER_TINY_RENDERER,
                               lightDirection=(sc.light * 10).tolist(), lightColor=[1, 1, 1], lightDistance=10,
                               lightAmbientCoeff=sc.ambient, lightDiffuseCoeff=1 - sc.ambient, lightSpecularCoeff=0.05,
                               shadow=0, physicsClientId=self.cid)
        rgb = np.reshape(np.asarray(img[2], np.uint8), (H, W, 4))[..., :3] / 255.0
        zbuf = np.reshape(np.asarray(img[3], np.float64), (H, W))
        seg = np.reshape(np.asarray(img[4], np.int64), (H, W))
        z = FAR_M * NEAR_M / (FAR_M - (FAR_M - NEAR_M) * zbuf)
        hit = (seg >= 0) & (zbuf < 1.0)
        lut = np.zeros(max(self.ids, default=0) + 1, np.uint8)
        for uid, i in self.ids.items():
            lut[uid] = i
        mask = np.where(hit, lut[np.clip(seg, 0, len(lut) - 1)], 0).astype(np.uint8)
        rgb = np.where(hit[..., None], rgb, np.asarray(sc.void_colour))
        return np.where(hit, z, np.inf), rgb, mask

    def render(self, world_from_body: np.ndarray, tip_pose: np.ndarray | None = None, t_s: float = 0.0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """world_from_body: (M, 4, 4); tip_pose: (4, 4) or None; t_s: clip time (s) of moving distractors."""
        for uid, T in zip(self.bodies, world_from_body):
            self._place(uid, T)
        if self.tip is not None:
            self._place(self.tip, tip_pose if tip_pose is not None else self.away)
        for d, uid in self.moving:
            self._place(uid, d.pose(t_s))
        z, rgb, mask = self._snap()
        zb, rgbb, maskb = self.bg
        front = z < zb
        z = np.where(front, z, zb)
        rgb = np.where(front[..., None], rgb, rgbb)
        mask = np.where(front, mask, maskb)
        depth = np.where(np.isfinite(z) & (z < FAR_M * 0.999), z, 0.0).astype(np.float32)
        return depth, _to_u8(rgb), mask.astype(np.uint8)

    def close(self) -> None:
        if self.cid is not None:
            self.p.disconnect(physicsClientId=self.cid)
            self.cid = None
