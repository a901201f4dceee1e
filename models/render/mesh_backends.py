"""Triangle queries behind ``mesh.py``: which triangle a ray meets first, which triangle is
closest to a point, and whether a point is inside. Three interchangeable engines, each
built from (V, 3) vertices and (F, 3) faces in the body frame; inputs are (N, 3) float64
numpy arrays, outputs (N,) int64 triangle indices (-1: no hit) or (N,) bool.

- ``open3d``: Open3D ``RaycastingScene`` (Embree BVH; closest points and ray-parity occupancy
  in C++, float32), single-threaded. The tracker's engine (docs/decisions.md, "Mesh parts").
- ``trimesh``: trimesh's Embree ray intersector (embreex) and its R-tree closest-point query.
- ``brute``: hand-written, no acceleration structure: Moller-Trumbore against every
  triangle in torch, closest point against every triangle (trimesh's vectorised
  point-triangle routine), ray parity by counting Moller-Trumbore hits.

``mesh.py`` refines every answer in float64 on the triangle found, so the engines differ
only in speed and in which of two near-tied triangles they pick.
"""
from __future__ import annotations

import numpy as np
import torch

ENGINES = ("open3d", "trimesh", "brute")


class Open3DEngine:
    def __init__(self, vertices: np.ndarray, faces: np.ndarray):
        import open3d as o3d

        self._o3d = o3d
        self.scene = o3d.t.geometry.RaycastingScene(nthreads=1)
        self.scene.add_triangles(vertices.astype(np.float32), faces.astype(np.uint32))

    def _t(self, x: np.ndarray):
        return self._o3d.core.Tensor(np.ascontiguousarray(x, np.float32))

    def cast(self, o: np.ndarray, d: np.ndarray) -> np.ndarray:
        ans = self.scene.cast_rays(self._t(np.concatenate([o, d], 1)), nthreads=1)
        pid = ans["primitive_ids"].numpy().astype(np.int64)
        return np.where(np.isfinite(ans["t_hit"].numpy()), pid, -1)

    def closest(self, q: np.ndarray) -> np.ndarray:
        return self.scene.compute_closest_points(self._t(q), nthreads=1)["primitive_ids"].numpy().astype(np.int64)

    def inside(self, q: np.ndarray) -> np.ndarray:
        return self.scene.compute_occupancy(self._t(q), nthreads=1, nsamples=3).numpy() > 0.5


class TrimeshEngine:
    def __init__(self, vertices: np.ndarray, faces: np.ndarray):
        import trimesh

        self.mesh = trimesh.Trimesh(vertices, faces, process=False)
        from trimesh.ray.ray_pyembree import RayMeshIntersector

        self.ray = RayMeshIntersector(self.mesh)

    def cast(self, o: np.ndarray, d: np.ndarray) -> np.ndarray:
        return np.asarray(self.ray.intersects_first(o, d), np.int64)

    def closest(self, q: np.ndarray) -> np.ndarray:
        import trimesh

        return np.asarray(trimesh.proximity.closest_point(self.mesh, q)[2], np.int64)

    def inside(self, q: np.ndarray) -> np.ndarray:
        return np.asarray(self.ray.contains_points(q), bool)


class BruteEngine:
    CHUNK = 1 << 20  # ray-triangle or point-triangle pairs per vectorised batch

    def __init__(self, vertices: np.ndarray, faces: np.ndarray):
        self.tri_np = vertices[faces]
        self.tri = torch.from_numpy(self.tri_np)

    def _mt(self, o: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """(n, F) ray parameter of every ray against every triangle (inf: no hit)."""
        v0, e1, e2 = self.tri[:, 0], self.tri[:, 1] - self.tri[:, 0], self.tri[:, 2] - self.tri[:, 0]
        p = torch.cross(d[:, None].expand(-1, len(v0), -1), e2[None].expand(len(d), -1, -1), dim=-1)
        det = (p * e1[None]).sum(-1)
        inv = 1.0 / torch.where(det.abs() < 1e-18, torch.full_like(det, 1e-18), det)
        s = o[:, None] - v0[None]
        u = (s * p).sum(-1) * inv
        qv = torch.cross(s, e1[None].expand_as(s), dim=-1)
        v = (d[:, None] * qv).sum(-1) * inv
        t = (e2[None] * qv).sum(-1) * inv
        ok = (det.abs() >= 1e-18) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t > 0)
        return torch.where(ok, t, torch.full_like(t, float("inf")))

    def _chunks(self, n: int):
        step = max(1, self.CHUNK // len(self.tri))
        return range(0, n, step), step

    def cast(self, o: np.ndarray, d: np.ndarray) -> np.ndarray:
        out = np.full(len(o), -1, np.int64)
        starts, step = self._chunks(len(o))
        for i in starts:
            t = self._mt(torch.from_numpy(o[i:i + step]), torch.from_numpy(d[i:i + step]))
            v, k = t.min(1)
            out[i:i + step] = torch.where(torch.isfinite(v), k, -1).numpy()
        return out

    def closest(self, q: np.ndarray) -> np.ndarray:
        from trimesh.triangles import closest_point

        F = len(self.tri_np)
        out = np.empty(len(q), np.int64)
        starts, step = self._chunks(len(q))
        for i in starts:
            qq = q[i:i + step]
            c = closest_point(np.tile(self.tri_np, (len(qq), 1, 1)), np.repeat(qq, F, 0))
            dist = np.linalg.norm(c - np.repeat(qq, F, 0), axis=1).reshape(len(qq), F)
            out[i:i + step] = dist.argmin(1)
        return out

    def inside(self, q: np.ndarray) -> np.ndarray:
        votes = np.zeros(len(q), int)
        for d in ((0.577, 0.577, 0.578), (-0.6, 0.64, -0.48), (0.3, -0.8, 0.52)):  # 3 rays, majority
            starts, step = self._chunks(len(q))
            for i in starts:
                o = torch.from_numpy(q[i:i + step])
                t = self._mt(o, torch.tensor(d, dtype=o.dtype).expand_as(o))
                votes[i:i + step] += (torch.isfinite(t).sum(1) % 2).numpy()
        return votes >= 2


def make_engine(name: str, vertices: np.ndarray, faces: np.ndarray):
    """The engine ``name`` (one of ENGINES) over the mesh."""
    engines = {"open3d": Open3DEngine, "trimesh": TrimeshEngine, "brute": BruteEngine}
    if name not in engines:
        raise ValueError(f"unknown mesh engine {name!r} (one of {', '.join(ENGINES)})")
    return engines[name](vertices, faces)
