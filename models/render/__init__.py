"""Differentiable rendering of posed library shapes in a recording's ``Camera``.

One small interface, ``make_renderer(camera, shapes, colors) -> renderer`` with
``renderer.render(T_world_body (M, 4, 4), pixels=None, silhouette=False) -> Rendered``
(depth, visible body id, per-body hit depth, soft silhouette, flat colour), all
differentiable w.r.t. ``T_world_body`` by autograd. A GPU rasteriser (nvdiffrast)
is one more file exposing a class with the same ``render`` and one line in
``make_renderer``.

The one backend, ``analytic`` (``analytic.py``), casts rays in closed form against
sphere / capsule / cylinder / box: exact geometry and occlusions, and the same closed
forms give every residual's Jacobian directly (depth by the implicit-function theorem,
silhouette margin by the envelope theorem; tests check both against autograd), so the
tracker (``pipeline/track.py``, through ``align.py``) gets a whole Gauss-Newton step
without one backward pass per pose parameter. Silhouette gradients exist at any
distance from the edge (``ray_margin``), which the colour-silhouette residuals need.
Why not a triangle rasteriser (DEODR) is in docs/decisions.md ("Settings and their
measured reasons").

Meshes (``type: mesh``) go through the same backend and the same functions: a mesh
``Primitive`` carries its ``mesh.MeshGeometry`` and ``ray_hit`` / ``sdf`` / ``ray_margin``
hand it to ``mesh.py`` (BVH ray casting and closest points, Open3D by default; the
engines measured are in ``mesh_backends.py`` and docs/decisions.md, "Mesh parts"), with
depth derivatives from the hit triangle's plane and margin derivatives by the envelope
theorem, as for the primitives.
This package does no lighting model: colour is a flat per-body albedo.
"""
from __future__ import annotations

from vid2sim.datasets.recording import Camera
from vid2sim.datasets.shapes import Shape
from vid2sim.models.render.analytic import AnalyticRenderer
from vid2sim.models.geometry_torch import perturb, so3_exp
from vid2sim.models.render.primitives import Primitive, ray_hit, ray_margin, sdf, sdf_and_grad
from vid2sim.models.render.types import Rendered

BACKENDS = ("analytic",)

__all__ = ["AnalyticRenderer", "BACKENDS", "Primitive", "Rendered", "make_renderer", "perturb", "ray_hit",
           "ray_margin", "sdf", "sdf_and_grad", "so3_exp"]


def make_renderer(camera: Camera, shapes: list[Shape], colors=None, backend: str = "analytic", **kw):
    """The renderer for ``shapes`` (one per body, in body order) in ``camera``."""
    if backend == "analytic":
        return AnalyticRenderer(camera, [Primitive.from_shape(s) for s in shapes], colors, **kw)
    raise ValueError(f"unknown renderer backend {backend!r} (one of {', '.join(BACKENDS)})")
