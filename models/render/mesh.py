"""Triangle-mesh parts for the ray-casting renderer: hit depth, signed distance, ray margin.

The same three quantities as ``primitives.py`` gives in closed form for the primitives,
for a watertight mesh in its body frame (``Shape.mesh()``: centre of mass at the origin),
so that a mesh part goes through the same renderer and Gauss-Newton alignment:

- ``ray_hit(g, o, d)``: first ray parameter ``s > 0`` on the surface, ``inf`` on a miss.
  Open3D's ``RaycastingScene`` (Embree BVH, float32; ``mesh_backends``) finds which triangle a ray meets;
  ``s`` is then recomputed in float64 on that triangle's plane,
  ``s = n . (v0 - o) / (n . d)``, which is exact and differentiable by autograd:
  ``ds/do = -n / (n . d)``, ``ds/dd = -s n / (n . d)``, the implicit-function derivative
  of the hit, and through ``o = R^T (c - t)``, ``d = R^T d_w`` the pose derivative.
- ``sdf_and_grad(g, q)``: signed distance (negative inside) and its gradient, the unit
  vector from the closest surface point (Open3D's closest-point query, BVH) to ``q``
  times the sign; the face normal where ``q`` lies on the surface. The sign comes from
  the face normal where the closest point is inside a face, else from Open3D's
  ray-parity occupancy (3 rays, majority).
- ``ray_margin_and_grad(g, o, d)``: ``-min_s sdf(o + s d)`` as for the primitives, the
  signed ray-to-surface distance that the silhouette residuals use. A mesh's SDF is not
  convex along a ray, so ``s*`` is found by a grid of ``MARGIN_SAMPLES`` points over the
  bounding sphere's chord and a golden-section refinement in the best grid cell; the
  derivatives come from the envelope theorem at ``s*`` (``-n``, ``-s* n``).

Which back end (Open3D, trimesh + Embree, a hand-written torch Moller-Trumbore caster)
and why: docs/decisions.md, "Mesh parts"; ``scripts/bench_mesh_backends.py`` measures them.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

from vid2sim.models.render.golden import golden_section
from vid2sim.models.render.mesh_backends import make_engine

MARGIN_SAMPLES = 24  # grid points along a ray's chord of the bounding sphere for min_s sdf
MARGIN_REFINE = 20  # golden-section steps inside the best grid cell (cell shrinks 0.618x each)
ENGINE = "open3d"  # triangle-query engine of new MeshGeometry objects (mesh_backends.ENGINES)
_ON_SURFACE_M = 1e-7  # m: closer than this to the surface, the gradient is the face normal


class MeshGeometry:
    """A watertight triangle mesh in its body frame, with its triangle-query engine.

    vertices: (V, 3) m; faces: (F, 3) vertex indices, counter-clockwise seen from outside.
    """

    def __init__(self, vertices: np.ndarray, faces: np.ndarray):
        self.vertices = np.ascontiguousarray(vertices, np.float64)
        self.faces = np.ascontiguousarray(faces, np.int64)
        tri = self.vertices[self.faces]
        n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
        self.tri = torch.from_numpy(tri)  # (F, 3, 3)
        self.normals = torch.from_numpy(n / np.linalg.norm(n, axis=1, keepdims=True).clip(1e-30))  # (F, 3) outward
        self.half_size = tuple(float(x) for x in np.abs(self.vertices).max(0))  # symmetric box about the origin
        self.bounding_radius = float(np.linalg.norm(self.vertices, axis=1).max())
        self.engine_name = ENGINE
        self._engine = None

    @property
    def engine(self):
        """The triangle-query engine (``mesh_backends``), built on first use (not pickled)."""
        if self._engine is None:
            self._engine = make_engine(self.engine_name, self.vertices, self.faces)
        return self._engine

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_engine"} | {"_engine": None}


@lru_cache(maxsize=32)
def _geometry_of(path: str, scale: float, mtime_ns: int) -> MeshGeometry:
    from vid2sim.datasets.shapes import _load_mesh

    m = _load_mesh(path, scale, mtime_ns)[0]
    return MeshGeometry(np.asarray(m.vertices), np.asarray(m.faces))


def geometry_of(shape) -> MeshGeometry:
    """The ``MeshGeometry`` of a mesh ``Shape`` (cached per file, scale and modification time)."""
    p = shape.mesh_path().resolve()
    return _geometry_of(str(p), float(shape.scale), p.stat().st_mtime_ns)


def _np(x: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(x.detach().reshape(-1, x.shape[-1]).numpy(), np.float64)


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def ray_hit(g: MeshGeometry, o: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """o, d: (..., 3) body-frame rays -> (...) first hit parameter (inf on a miss), differentiable."""
    shape = torch.broadcast_shapes(o.shape, d.shape)
    o, d = o.expand(shape), d.expand(shape)
    lead = shape[:-1]
    if not math.prod(lead):
        return o.new_zeros(lead)
    pid = torch.from_numpy(g.engine.cast(_np(o), _np(d))).reshape(lead)
    hit = pid >= 0
    pid = torch.where(hit, pid, torch.zeros_like(pid))
    n, v0 = g.normals.to(o.dtype)[pid], g.tri.to(o.dtype)[pid, 0]
    nd = _dot(n, d)
    ok = hit & (nd.abs() > 1e-300)
    s = _dot(n, v0 - o) / torch.where(ok, nd, torch.ones_like(nd))
    return torch.where(ok & (s > 0), s, torch.full_like(s, math.inf))


def _closest(g: MeshGeometry, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q: (N, 3) -> closest surface points (N, 3), face normals there (N, 3), sign (N,) (-1 inside)."""
    pid = torch.from_numpy(g.engine.closest(_np(q)))
    n = g.normals.to(q.dtype)[pid]
    # Open3D's float32 closest point can be tens of micrometres off on long thin triangles;
    # it serves to pick the triangle, on which the closest point is recomputed in float64.
    from trimesh.triangles import closest_point

    c = torch.from_numpy(closest_point(g.tri[pid].numpy(), q.detach().numpy().astype(np.float64))).to(q.dtype)
    v0 = g.tri.to(q.dtype)[pid, 0]
    h = _dot(n, q - v0)
    diff = q - c
    face = (diff - h.unsqueeze(-1) * n).norm(dim=-1) <= 1e-9 + 1e-6 * diff.norm(dim=-1)  # inside the face
    sign = torch.where(h >= 0, 1.0, -1.0).to(q.dtype)
    # an edge or vertex is closest: ray parity decides, where q is within the mesh's bounding box
    in_box = (q.abs() <= q.new_tensor(g.half_size)).all(-1)
    sign = torch.where(~face & ~in_box, torch.ones_like(sign), sign)
    amb = ~face & in_box
    if bool(amb.any()):
        sign[amb] = torch.from_numpy(np.where(g.engine.inside(_np(q[amb])), -1.0, 1.0)).to(q.dtype)
    return c, n, sign


def sdf_and_grad(g: MeshGeometry, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q: (..., 3) body-frame points -> signed distance (...) m and its gradient (..., 3); no graph."""
    lead = q.shape[:-1]
    qf = q.detach().reshape(-1, 3)
    if not qf.shape[0]:
        return q.new_zeros(lead), q.new_zeros(lead + (3,))
    c, n, sign = _closest(g, qf)
    diff = qf - c
    dist = diff.norm(dim=-1)
    on = dist < _ON_SURFACE_M
    grad = torch.where(on.unsqueeze(-1), n, sign.unsqueeze(-1) * diff / dist.clamp(min=_ON_SURFACE_M).unsqueeze(-1))
    return (sign * dist).reshape(lead), grad.reshape(lead + (3,))


def sdf(g: MeshGeometry, q: torch.Tensor) -> torch.Tensor:
    """q: (..., 3) -> (...) signed distance, differentiable w.r.t. q (the closest point held fixed,
    which by the envelope theorem gives the exact gradient)."""
    lead = q.shape[:-1]
    qf = q.reshape(-1, 3)
    if not qf.shape[0]:
        return q.new_zeros(lead)
    c, n, sign = _closest(g, qf.detach())
    dist = (qf - c).norm(dim=-1)
    on = dist.detach() < _ON_SURFACE_M
    # on the surface the norm's gradient is undefined: the plane's signed distance instead
    plane = _dot(n, qf - c)
    safe = torch.where(on, torch.ones_like(dist), dist)
    return torch.where(on, plane, sign * safe).reshape(lead)


def argmin_along_ray(g: MeshGeometry, o: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """o, d: (N, 3) -> (N,) ray parameter s* of min_s sdf(o + s d) over the bounding sphere's chord."""
    with torch.no_grad():
        o, d = o.detach(), d.detach()
        N = o.shape[0]
        dd = _dot(d, d)
        s_c = -_dot(o, d) / dd
        half = g.bounding_radius / dd.sqrt()
        grid = torch.linspace(-1.0, 1.0, MARGIN_SAMPLES, dtype=o.dtype)
        s = s_c[:, None] + half[:, None] * grid[None]  # (N, K)
        f = sdf_and_grad(g, o[:, None] + s[..., None] * d[:, None])[0]
        k = f.argmin(1)
        step = half * (2.0 / (MARGIN_SAMPLES - 1))
        s_k = s[torch.arange(N), k]
        lo, hi = s_k - step, s_k + step
        f_of = lambda x: sdf_and_grad(g, o + x.unsqueeze(-1) * d)[0]  # noqa: E731
        lo, hi = golden_section(f_of, lo, hi, MARGIN_REFINE)
        s_ref = 0.5 * (lo + hi)
        # keep the grid point if the refinement ended worse (a kink at a cell edge)
        better = f_of(s_ref) <= f[torch.arange(N), k]
        return torch.where(better, s_ref, s_k)


def ray_margin(g: MeshGeometry, o: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """o, d: (..., 3) -> (...) ``-min_s sdf(o + s d)`` (m), positive where the ray pierces; differentiable."""
    shape = torch.broadcast_shapes(o.shape, d.shape)
    o, d = o.expand(shape), d.expand(shape)
    lead = shape[:-1]
    of, df = o.reshape(-1, 3), d.reshape(-1, 3)
    s = argmin_along_ray(g, of, df)
    return (-sdf(g, of + s.unsqueeze(-1) * df)).reshape(lead)


def ray_margin_and_grad(g: MeshGeometry, o: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """o, d: (..., 3) -> margin (...), d margin/d o (..., 3), d margin/d d (..., 3); no graph."""
    shape = torch.broadcast_shapes(o.shape, d.shape)
    lead = shape[:-1]
    of, df = o.detach().expand(shape).reshape(-1, 3), d.detach().expand(shape).reshape(-1, 3)
    if not of.shape[0]:
        z = o.new_zeros(lead)
        return z, o.new_zeros(shape), o.new_zeros(shape)
    s = argmin_along_ray(g, of, df)
    f, n = sdf_and_grad(g, of + s.unsqueeze(-1) * df)
    return (-f).reshape(lead), (-n).reshape(shape), (-s.unsqueeze(-1) * n).reshape(shape)
