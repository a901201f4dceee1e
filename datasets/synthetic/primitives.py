"""The segmentation training set: depth (and colour) of random primitives, with instance masks.

Each sample is a pinhole view of a few boxes, capsules, spheres and cylinders of random
sizes and poses, optionally in front of a floor or wall plane, rendered by Open3D's
``RaycastingScene`` (exact first hits, so instance masks are per-pixel geometry ids).
The segmenter's input (a normal map) is computed from the rendered *depth* by
``vid2sim.models.segmenter.normals`` exactly as at inference time, so training and use see
the same image statistics; this module deliberately does not compute normal maps itself.

Samples are a pure function of ``(seed, index)``: the training script draws indices
``0, 1, 2, ...`` of seed 0, and the benchmark holds back seed 1 (``HELD_OUT_SEED``), which
training never touches.

Sensor noise (``noise="realistic"``) follows the foundation issue: depth quantisation,
Gaussian noise growing with depth squared, missing depth at depth edges, RGB noise.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vid2sim.datasets.shapes import CLASSES

TRAIN_SEED = 0
HELD_OUT_SEED = 1


@dataclass(frozen=True)
class PrimitiveSample:
    """One rendered view.

    depth: (H, W) float32 metres (z along the optical axis), 0 = no reading.
    rgb: (H, W, 3) uint8.
    K: (3, 3) intrinsics.
    masks: (N, H, W) bool visible pixels of each instance (instances with too few visible
        pixels are dropped). labels: (N,) int class index into ``CLASSES``.
    dims: per instance the primitive's parameters (box size, radius/length) in metres.
    poses: (N, 4, 4) per instance p_camera = T p_primitive (axis of a capsule/cylinder along z).
    """

    depth: np.ndarray
    rgb: np.ndarray
    K: np.ndarray
    masks: np.ndarray
    labels: np.ndarray
    dims: list[tuple[float, ...]]
    poses: np.ndarray


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    w, x, y, z = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def primitive_mesh(kind: str, dims: tuple[float, ...]):
    """Legacy Open3D triangle mesh of a primitive centred at the origin, axis along z."""
    import open3d as o3d

    if kind == "box":
        m = o3d.geometry.TriangleMesh.create_box(*dims)
        m.translate(-0.5 * np.asarray(dims, float))
        return m
    if kind == "sphere":
        return o3d.geometry.TriangleMesh.create_sphere(dims[0], resolution=24)
    r, length = dims
    if kind == "cylinder":
        return o3d.geometry.TriangleMesh.create_cylinder(r, length, resolution=40, split=1)
    if kind == "capsule":
        m = o3d.geometry.TriangleMesh.create_cylinder(r, length, resolution=40, split=1)
        for sign in (-1, 1):
            cap = o3d.geometry.TriangleMesh.create_sphere(r, resolution=24)
            cap.translate((0, 0, sign * length / 2))
            m += cap
        return m
    raise ValueError(f"unknown primitive {kind!r}")


def _random_dims(kind: str, rng: np.random.Generator, scale: float) -> tuple[float, ...]:
    if kind == "box":
        return tuple(float(x) for x in scale * np.exp(rng.uniform(np.log(0.03), np.log(0.5), 3)))
    if kind == "sphere":
        return (float(scale * np.exp(rng.uniform(np.log(0.02), np.log(0.2)))),)
    r = float(scale * np.exp(rng.uniform(np.log(0.012), np.log(0.1))))
    length = float(scale * np.exp(rng.uniform(np.log(0.08), np.log(0.9))))
    return (r, max(length, 1.5 * r if kind == "cylinder" else 0.5 * r))


def primitive_extents(kind: str, dims: tuple[float, ...]) -> tuple[float, float, float]:
    """Full extents (x, y, z) in the primitive's frame (axis along z)."""
    if kind == "box":
        return tuple(dims)  # type: ignore[return-value]
    if kind == "sphere":
        return (2 * dims[0],) * 3
    r, length = dims
    return (2 * r, 2 * r, length + (2 * r if kind == "capsule" else 0.0))


def render_depth(meshes: list, K: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Ray-cast camera-frame meshes; returns depth (H, W) float32 (0 = miss) and geometry ids (H, W) int (-1 = miss)."""
    import open3d as o3d

    w, h = size
    scene = o3d.t.geometry.RaycastingScene()
    for m in meshes:
        scene.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(m))
    u, v = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    # Rays with unit z component, so the hit parameter is the z depth (docs/formats.md §1).
    d = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u)], -1)
    rays = np.concatenate([np.zeros_like(d), d], -1).astype(np.float32)
    hit = scene.cast_rays(o3d.core.Tensor(rays))
    t = hit["t_hit"].numpy()
    ids = hit["geometry_ids"].numpy().astype(np.int64)
    miss = ~np.isfinite(t)
    ids[miss] = -1
    return np.where(miss, 0.0, t).astype(np.float32), ids


def add_depth_noise(depth: np.ndarray, rng: np.random.Generator, depth_scale: float = 0.001) -> np.ndarray:
    """Realistic structured-light depth: sigma = 1.5 mm * z^2, holes at depth edges, quantisation."""
    out = depth.astype(np.float64).copy()
    valid = out > 0
    out[valid] += rng.normal(size=valid.sum()) * 0.0015 * out[valid] ** 2
    # Missing readings along depth discontinuities (shadowing), a pixel or two wide.
    z = np.where(valid, depth, 0)
    jump = np.zeros_like(valid)
    dz_x = np.abs(np.diff(z, axis=1)) > 0.03 * np.maximum(z[:, 1:], z[:, :-1])
    dz_y = np.abs(np.diff(z, axis=0)) > 0.03 * np.maximum(z[1:], z[:-1])
    jump[:, 1:] |= dz_x
    jump[:, :-1] |= dz_x
    jump[1:] |= dz_y
    jump[:-1] |= dz_y
    drop = jump & (rng.random(jump.shape) < 0.6)
    # A few random speckle holes.
    drop |= rng.random(jump.shape) < 0.003
    out[drop] = 0
    out = np.round(out / depth_scale) * depth_scale
    return np.clip(out, 0, None).astype(np.float32)


def _shade(ids: np.ndarray, normals_cam: np.ndarray, colours: np.ndarray, rng: np.random.Generator,
           noise: bool) -> np.ndarray:
    h, w = ids.shape
    rgb = np.zeros((h, w, 3), np.float32) + colours[-1]  # last colour = background
    hit = ids >= 0
    lambert = 0.35 + 0.65 * np.clip(-normals_cam[..., 2], 0, 1)
    rgb[hit] = colours[ids[hit]] * lambert[hit, None]
    if noise:
        rgb += rng.normal(scale=6.0, size=rgb.shape)
    return np.clip(rgb, 0, 255).astype(np.uint8)


def make_sample(index: int, seed: int = TRAIN_SEED, size: tuple[int, int] = (320, 240),
                noise: str = "none", min_pixels: int = 30) -> PrimitiveSample:
    """Render sample ``index`` of stream ``seed``. size = (W, H); noise: "none" | "realistic" | "mixed".

    "mixed" draws clean or realistic with probability 1/2 (what training uses).
    """
    import open3d as o3d

    rng = np.random.default_rng([seed, index])
    w, h = size
    f = rng.uniform(0.85, 1.35) * w
    K = np.array([[f, 0, (w - 1) / 2 + rng.uniform(-5, 5)], [0, f, (h - 1) / 2 + rng.uniform(-5, 5)], [0, 0, 1.0]])
    if noise == "mixed":
        noise = "realistic" if rng.random() < 0.5 else "none"
    n = int(rng.integers(1, 7))
    meshes, labels, dims, poses = [], [], [], []
    scale = rng.uniform(0.5, 1.6)  # scene scale: tabletop to room-sized mechanisms
    for _ in range(n):
        kind_i = int(rng.integers(len(CLASSES)))
        kind = CLASSES[kind_i]
        d = _random_dims(kind, rng, 1.0)
        z = rng.uniform(0.7, 2.6) * scale
        # Rescale so the largest extent spans 12..60 % of the image width, as parts of a
        # mechanism framed by the camera do.
        extent = max(primitive_extents(kind, d))
        want = rng.uniform(0.12, 0.6) * w * z / f
        d = tuple(x * want / extent for x in d)
        m = primitive_mesh(kind, d)
        T = np.eye(4)
        T[:3, :3] = _random_rotation(rng)
        m.rotate(T[:3, :3], center=(0, 0, 0))
        uv = rng.uniform([0.08 * w, 0.08 * h], [0.92 * w, 0.92 * h])
        T[:3, 3] = ((uv[0] - K[0, 2]) / f * z, (uv[1] - K[1, 2]) / f * z, z)
        m.translate(T[:3, 3])
        meshes.append(m)
        poses.append(T)
        labels.append(kind_i)
        dims.append(d)
    # Background as in a lab: nothing, a wall behind, a floor below, or both (a corner).
    bg = str(rng.choice(["none", "wall", "floor", "both"], p=[0.3, 0.2, 0.2, 0.3]))
    zmax = max(float(np.asarray(m.vertices)[:, 2].max()) for m in meshes)
    if bg in ("wall", "both"):  # behind everything, slightly tilted
        plane = o3d.geometry.TriangleMesh.create_box(40, 40, 0.01)
        plane.translate((-20, -20, 0))
        tilt = o3d.geometry.get_rotation_matrix_from_xyz(rng.uniform(-0.4, 0.4, 3) * [1, 1, 0])
        plane.rotate(tilt, center=(0, 0, 0))
        plane.translate((0, 0, zmax + rng.uniform(0.05, 1.5) * scale))
        meshes.append(plane)
    if bg in ("floor", "both"):  # below the objects, seen obliquely
        plane = o3d.geometry.TriangleMesh.create_box(40, 40, 0.01)
        plane.translate((-20, -20, 0))
        plane.rotate(o3d.geometry.get_rotation_matrix_from_xyz((np.pi / 2 + rng.uniform(-0.6, 0.3), 0, 0)),
                     center=(0, 0, 0))
        plane.translate((0, rng.uniform(0.35, 1.0) * scale, 0))
        meshes.append(plane)
    depth, ids = render_depth(meshes, K, size)
    # Instance masks of the primitives only (the plane, if any, is background).
    masks, keep_labels, keep_dims, keep_poses = [], [], [], []
    for i in range(n):
        mk = ids == i
        if mk.sum() >= min_pixels:
            masks.append(mk)
            keep_labels.append(labels[i])
            keep_dims.append(dims[i])
            keep_poses.append(poses[i])
    ids = np.where(ids >= n, -1, ids)
    # Shading from the exact normals would need the raycast normals; finite-difference
    # normals are good enough for a plausible colour image.
    from vid2sim.models.segmenter.normals import depth_to_normals

    cols = rng.uniform(30, 230, (n + 1, 3)).astype(np.float32)
    nrm = depth_to_normals(depth, K, smooth=False)
    rgb = _shade(np.where(ids >= 0, ids, -1), nrm, cols, rng, noise == "realistic")
    if noise == "realistic":
        depth = add_depth_noise(depth, rng)
    masks_a = np.stack(masks) if masks else np.zeros((0, h, w), bool)
    return PrimitiveSample(depth, rgb, K, masks_a, np.asarray(keep_labels, np.int64), keep_dims,
                           np.asarray(keep_poses, float).reshape(-1, 4, 4))
