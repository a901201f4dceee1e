"""Closed-form geometry of the library primitives: signed distance, ray casting, ray margin.

Every function is a batched PyTorch expression in the *body* frame (shape centred at
the origin, capsule/cylinder axis along z, docs/formats.md §1), so it is
differentiable by autograd wherever the geometry is smooth (surface interiors).

Three quantities, each used by the renderer and the tracker:

- ``sdf(prim, q)``: exact Euclidean signed distance (negative inside) of points ``q``.
- ``ray_hit(prim, o, d)``: first ray parameter ``s > 0`` with ``o + s d`` on the
  surface, ``inf`` on a miss (Quilez, "Intersectors", slab + quadric forms).
- ``ray_margin(prim, o, d)``: ``-min_s sdf(o + s d)``, the signed distance between the
  ray (a line) and the shape: positive for rays that pierce the silhouette, the
  lateral miss distance (m) for rays outside it. Continuous across the silhouette
  edge, so a soft silhouette ``sigmoid(margin / tau)`` has edge gradients. Closed
  form for spheres and capsules (line-point / line-segment distance); for boxes and
  cylinders ``s*`` is found by golden-section search without gradient (the SDF of a
  convex set is convex along a line) and the gradient comes from the envelope
  theorem, d/dθ min_s f(s, θ) = ∂f/∂θ at s*, which is exact.

A mesh part (``kind == "mesh"``) carries its ``mesh.MeshGeometry``; every function
here hands it to ``mesh.py`` (BVH ray casting and closest points, same quantities).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from vid2sim.datasets.shapes import Shape
from vid2sim.models.render import mesh as _mesh
from vid2sim.models.render.golden import golden_section
_TINY = 1e-20


@dataclass(frozen=True)
class Primitive:
    """A library shape as the renderer sees it: kind and half-dimensions (m)."""

    kind: str
    radius: float = 0.0
    half_length: float = 0.0  # capsule (without caps) / cylinder, along z
    half_size: tuple[float, float, float] = (0.0, 0.0, 0.0)  # box; mesh: its vertices' largest |x|, |y|, |z|
    mesh: _mesh.MeshGeometry | None = field(default=None, compare=False, repr=False)  # kind "mesh"

    @staticmethod
    def from_shape(shape: Shape) -> "Primitive":
        if shape.type == "sphere":
            return Primitive("sphere", radius=float(shape.radius))
        if shape.type in ("capsule", "cylinder"):
            return Primitive(shape.type, radius=float(shape.radius), half_length=0.5 * float(shape.length))
        if shape.type == "box":
            return Primitive("box", half_size=tuple(0.5 * float(s) for s in shape.size))
        if shape.type == "mesh":
            g = _mesh.geometry_of(shape)
            return Primitive("mesh", half_size=g.half_size, mesh=g)
        raise ValueError(f"shape {shape.name!r}: unknown type {shape.type!r}")

    @property
    def bounding_radius(self) -> float:
        if self.kind == "mesh":
            return self.mesh.bounding_radius
        if self.kind == "box":
            return float(sum(h * h for h in self.half_size) ** 0.5)
        return self.radius + self.half_length


def sdf(prim: Primitive, q: torch.Tensor) -> torch.Tensor:
    """q: (..., 3) body-frame points -> (...) signed distance (m), negative inside."""
    if prim.kind == "mesh":
        return _mesh.sdf(prim.mesh, q)
    if prim.kind == "sphere":
        return _norm(q) - prim.radius
    if prim.kind == "capsule":
        qz = q[..., 2].clamp(-prim.half_length, prim.half_length)
        return _norm(torch.stack([q[..., 0], q[..., 1], q[..., 2] - qz], -1)) - prim.radius
    if prim.kind == "cylinder":
        dr = (q[..., 0] ** 2 + q[..., 1] ** 2 + _TINY).sqrt() - prim.radius
        dz = q[..., 2].abs() - prim.half_length
        outside = (dr.clamp(min=0) ** 2 + dz.clamp(min=0) ** 2 + _TINY).sqrt()
        return outside + torch.maximum(dr, dz).clamp(max=0)
    if prim.kind == "box":
        dq = q.abs() - q.new_tensor(prim.half_size)
        return _norm(dq.clamp(min=0)) + dq.max(-1).values.clamp(max=0)
    raise ValueError(f"unknown primitive kind {prim.kind!r}")


def sdf_and_grad(prim: Primitive, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q: (..., 3) -> sdf (...) and its spatial gradient (..., 3) (unit outward normal), closed form, no graph.

    Equals autograd of ``sdf`` (tested); written out because the tracker calls it for
    every depth point at every Gauss-Newton step.
    """
    q = q.detach()
    if prim.kind == "mesh":
        return _mesh.sdf_and_grad(prim.mesh, q)
    if prim.kind == "sphere":
        n = _norm(q)
        return n - prim.radius, q / n.unsqueeze(-1)
    if prim.kind == "capsule":
        v = q.clone()
        v[..., 2] = q[..., 2] - q[..., 2].clamp(-prim.half_length, prim.half_length)
        n = _norm(v)
        return n - prim.radius, v / n.unsqueeze(-1)
    if prim.kind == "cylinder":
        rho = (q[..., 0] ** 2 + q[..., 1] ** 2 + _TINY).sqrt()
        dr, dz = rho - prim.radius, q[..., 2].abs() - prim.half_length
        sz = torch.where(q[..., 2] >= 0, 1.0, -1.0).to(q.dtype)
        er = torch.stack([q[..., 0] / rho, q[..., 1] / rho, torch.zeros_like(rho)], -1)
        ez = torch.stack([torch.zeros_like(rho), torch.zeros_like(rho), sz], -1)
        a, b = dr.clamp(min=0), dz.clamp(min=0)
        out = (a * a + b * b + _TINY).sqrt()
        corner = (dr > 0) & (dz > 0) & (out > 1e-9)
        g = torch.where(corner.unsqueeze(-1), (a / out).unsqueeze(-1) * er + (b / out).unsqueeze(-1) * ez,
                        torch.where((dr > dz).unsqueeze(-1), er, ez))
        return out * (dr > 0) * (dz > 0) + torch.where(corner, 0.0, torch.maximum(dr, dz)).to(q.dtype), g
    if prim.kind == "box":
        return box_sdf_and_grad(q, q.new_tensor(prim.half_size))
    raise ValueError(f"unknown primitive kind {prim.kind!r}")


def box_sdf_and_grad(q: torch.Tensor, half: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``sdf_and_grad`` of a box of half sizes ``half`` (3,), or of one box per point (..., 3)."""
    sgn = torch.where(q >= 0, 1.0, -1.0).to(q.dtype)
    dq = q.abs() - half
    pos = dq.clamp(min=0)
    out = _norm(pos)
    inside_d, inside_i = dq.max(-1)
    outside = inside_d > 0
    g_in = torch.nn.functional.one_hot(inside_i, 3).to(q.dtype) * sgn
    # A point on a face is "outside" by rounding only: its normal is the face's, not pos/|pos|.
    g = torch.where((outside & (out > 1e-9)).unsqueeze(-1), sgn * pos / out.unsqueeze(-1), g_in)
    return torch.where(outside, out, inside_d), g


def sdf_value(prim: Primitive, q: torch.Tensor) -> torch.Tensor:
    """q: (..., 3) -> ``sdf_and_grad(prim, q)[0]`` (...), the same operations without the gradient's, no graph."""
    q = q.detach()
    if prim.kind == "sphere":
        return _norm(q) - prim.radius
    if prim.kind == "capsule":
        v = q.clone()
        v[..., 2] = q[..., 2] - q[..., 2].clamp(-prim.half_length, prim.half_length)
        return _norm(v) - prim.radius
    if prim.kind == "box":
        dq = q.abs() - q.new_tensor(prim.half_size)
        inside_d = _max3(dq)
        return torch.where(inside_d > 0, _norm(dq.clamp(min=0)), inside_d)
    return sdf_and_grad(prim, q)[0]


def ray_hit(prim: Primitive, o: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """o, d: (..., 3) body-frame ray origins/directions -> (...) first hit parameter, inf on a miss.

    The ray is ``o + s d``; with camera rays ``d = ((u-cx)/fx, (v-cy)/fy, 1)`` in the camera
    frame, ``s`` is the camera depth z. Origins are assumed outside the shape.
    """
    if prim.kind == "mesh":
        return _mesh.ray_hit(prim.mesh, o, d)
    if prim.kind == "sphere":
        return _sphere_hit(o, d, prim.radius)
    if prim.kind == "capsule":
        c = o.new_tensor([0.0, 0.0, prim.half_length])
        s = torch.minimum(_sphere_hit(o - c, d, prim.radius), _sphere_hit(o + c, d, prim.radius))
        return torch.minimum(s, _cylinder_hit(o, d, prim.radius, prim.half_length))
    if prim.kind == "cylinder":
        return _cylinder_hit(o, d, prim.radius, prim.half_length)
    if prim.kind == "box":
        s_in, s_out = _slab(o, d, o.new_tensor(prim.half_size))
        return _interval_hit(s_in, s_out)
    raise ValueError(f"unknown primitive kind {prim.kind!r}")


def ray_margin(prim: Primitive, o: torch.Tensor, d: torch.Tensor, iters: int = 14) -> torch.Tensor:
    """o, d: (..., 3) -> (...) signed ray-to-shape distance (m), positive where the ray pierces.

    ``iters``: golden-section steps for boxes and cylinders (bracket shrinks 0.618x each);
    meshes: ``mesh.ray_margin`` (grid and golden section, its own step counts).
    """
    if prim.kind == "mesh":
        return _mesh.ray_margin(prim.mesh, o, d)
    if prim.kind == "sphere":
        return prim.radius - _line_point_dist(o, d)
    if prim.kind == "capsule":
        return prim.radius - _line_segment_dist(o, d, prim.half_length)
    s_star = _argmin_along_ray(prim, o.detach(), d.detach(), iters)
    return -sdf(prim, o + s_star.unsqueeze(-1) * d)


def pierce_margin(prim: Primitive, o: torch.Tensor, d: torch.Tensor, iters: int = 14) -> torch.Tensor:
    """``ray_margin`` for rays that pierce the shape, closed form for boxes as well.

    Inside a box ``-sdf`` is ``min_i (h_i - |x_i|)``, six linear functions of the ray
    parameter, so ``max_s min`` is the smallest crossing value of a rising and a falling
    line (a 1-D linear programme): 9 pairs, exact value and gradient. (The golden-section
    ``s*`` of ``ray_margin`` stops near the kink where two faces tie, where the envelope
    theorem's gradient is off.) Other kinds: ``ray_margin``. Not meaningful for misses.
    """
    if prim.kind != "box":
        return ray_margin(prim, o, d, iters)
    h = o.new_tensor(prim.half_size)
    ad = d.abs()
    sg = torch.where(d >= 0, torch.ones_like(d), -torch.ones_like(d))
    a_rise, a_fall = h + sg * o, h - sg * o                   # lines a + |d| s and a - |d| s per axis
    num = a_rise[..., :, None] * ad[..., None, :] + a_fall[..., None, :] * ad[..., :, None]
    den = ad[..., :, None] + ad[..., None, :]
    flat = torch.minimum(a_rise[..., :, None], a_fall[..., None, :])   # both lines constant
    v = torch.where(den > 1e-12, num / den.clamp(min=1e-12), flat)
    return v.flatten(-2).min(-1).values


# Free-space rays that pierce a box take _box_pierce_margin_and_grad's closed form when on.
# Off: with it the cabinet's carcass started 14 cm off (tests/test_pipeline_e2e.py; docs/decisions.md).
BOX_CLOSED_FORM = False


def ray_margin_and_grad(prim: Primitive, o: torch.Tensor, d: torch.Tensor,
                        s_star: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """o, d: (..., 3) -> margin (...), d margin/d o (..., 3), d margin/d d (..., 3); no graph.

    Envelope theorem: margin = -sdf(x*), x* = o + s* d, so the derivatives are
    -n and -s* n with n the SDF gradient at x*. s* is the closest approach to the centre
    (sphere) or the segment (capsule) in closed form, else the golden-section minimiser
    (``_argmin_along_ray``; ``s_star`` (...): that minimiser, already found by ``argmin_along_rays``).
    """
    o, d = o.detach(), d.detach()
    if prim.kind == "mesh":
        return _mesh.ray_margin_and_grad(prim.mesh, o, d)
    if prim.kind == "sphere":
        s_star = -_dot(o, d) / _dot(d, d)
    elif prim.kind == "capsule":
        dd, dz, od, oz = _dot(d, d), d[..., 2], _dot(o, d), o[..., 2]
        den = dd - dz * dz
        par = den < 1e-9 * dd
        z = torch.where(par, torch.zeros_like(oz), (dd * oz - dz * od) / torch.where(par, torch.ones_like(den), den))
        z = z.clamp(-prim.half_length, prim.half_length)
        s_star = -(od - z * dz) / dd
    elif prim.kind == "box" and BOX_CLOSED_FORM:
        s_in, s_out = _slab(o, d, o.new_tensor(prim.half_size))
        pierce = s_in < s_out
        if bool(pierce.all()):
            return _box_pierce_margin_and_grad(prim, o, d)
        s_star = _argmin_along_ray(prim, o, d) if s_star is None else s_star
        if bool(pierce.any()):
            f, n = sdf_and_grad(prim, o + s_star.unsqueeze(-1) * d)
            m, g_o, g_d = -f, -n, -s_star.unsqueeze(-1) * n
            m[pierce], g_o[pierce], g_d[pierce] = _box_pierce_margin_and_grad(prim, o[pierce], d[pierce])
            return m, g_o, g_d
    elif s_star is None:
        s_star = _argmin_along_ray(prim, o, d)
    f, n = sdf_and_grad(prim, o + s_star.unsqueeze(-1) * d)
    return -f, -n, -s_star.unsqueeze(-1) * n


def _box_pierce_margin_and_grad(prim: Primitive, o: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``pierce_margin`` of a box and its exact derivatives w.r.t. o and d (N, 3) each, closed form.

    The margin is the crossing value v = (a_i |d_j| + b_j |d_i|) / (|d_i| + |d_j|) of the
    lowest pair (i, j) of the rising lines a_i + |d_i| s (a_i = h_i + sgn(d_i) o_i) and the
    falling lines b_j - |d_j| s (b_j = h_j - sgn(d_j) o_j); differentiating that pair's v
    gives the gradient (at a tie between faces, the weights of the 1-D linear programme's
    dual, not one face's normal). A pair with |d_i| + |d_j| ~ 0 is min(a_i, b_j).
    """
    h = o.new_tensor(prim.half_size)
    ad = d.abs()
    sg = torch.where(d >= 0, torch.ones_like(d), -torch.ones_like(d))
    a_rise, a_fall = h + sg * o, h - sg * o
    num = a_rise[..., :, None] * ad[..., None, :] + a_fall[..., None, :] * ad[..., :, None]
    den = ad[..., :, None] + ad[..., None, :]
    flat = torch.minimum(a_rise[..., :, None], a_fall[..., None, :])
    ok = den > 1e-12
    v = torch.where(ok, num / den.clamp(min=1e-12), flat)
    m, k = v.flatten(-2).min(-1)
    i, j = k // 3, k % 3
    take = lambda x, idx: x.gather(-1, idx.unsqueeze(-1)).squeeze(-1)  # noqa: E731
    adi, adj, sgi, sgj = take(ad, i), take(ad, j), take(sg, i), take(sg, j)
    ai, bj = take(a_rise, i), take(a_fall, j)
    dn = adi + adj
    ok_k = dn > 1e-12
    dn = dn.clamp(min=1e-12)
    # dv/da_i, dv/db_j (flat pair: the smaller line only)
    wa = torch.where(ok_k, adj / dn, (ai <= bj).to(o.dtype))
    wb = torch.where(ok_k, adi / dn, (ai > bj).to(o.dtype))
    g_o = torch.zeros_like(o)
    g_o.scatter_add_(-1, i.unsqueeze(-1), (wa * sgi).unsqueeze(-1))
    g_o.scatter_add_(-1, j.unsqueeze(-1), (-wb * sgj).unsqueeze(-1))
    g_d = torch.zeros_like(d)
    g_d.scatter_add_(-1, i.unsqueeze(-1), torch.where(ok_k, (bj - m) / dn * sgi, torch.zeros_like(m)).unsqueeze(-1))
    g_d.scatter_add_(-1, j.unsqueeze(-1), torch.where(ok_k, (ai - m) / dn * sgj, torch.zeros_like(m)).unsqueeze(-1))
    return m, g_o, g_d


# --- helpers -------------------------------------------------------------------------

def _norm(v: torch.Tensor) -> torch.Tensor:
    # sqrt(x + tiny) keeps the gradient finite at the origin (a sphere's centre, an edge);
    # explicit components: a sum over a size-3 last axis is several times slower on CPU.
    return (v[..., 0] ** 2 + v[..., 1] ** 2 + v[..., 2] ** 2 + _TINY).sqrt()


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def _safe(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x.abs() < _TINY, _TINY, x)


def _interval_hit(s_in: torch.Tensor, s_out: torch.Tensor) -> torch.Tensor:
    hit = (s_in <= s_out) & (s_in > 0)
    return torch.where(hit, s_in, float("inf"))


def _max3(v: torch.Tensor) -> torch.Tensor:
    """(..., 3) -> (...) largest component (explicit components: a reduction over a size-3 axis costs more)."""
    return torch.maximum(torch.maximum(v[..., 0], v[..., 1]), v[..., 2])


def _min3(v: torch.Tensor) -> torch.Tensor:
    return torch.minimum(torch.minimum(v[..., 0], v[..., 1]), v[..., 2])


def _sphere_interval(o, d, r):
    a = _dot(d, d)
    b = _dot(o, d)
    c = _dot(o, o) - r * r
    disc = b * b - a * c
    root = disc.clamp(min=_TINY).sqrt()
    return (-b - root) / a, (-b + root) / a, disc > 0


def _sphere_hit(o, d, r):
    s_in, s_out, ok = _sphere_interval(o, d, r)
    return torch.where(ok & (s_in > 0), s_in, torch.full_like(s_in, float("inf")))


def _slab(o, d, half):
    """Ray vs axis-aligned box |x_i| <= half_i (Kay & Kajiya slabs) -> (s_in, s_out)."""
    inv = 1.0 / _safe(d)
    t1 = (-half - o) * inv
    t2 = (half - o) * inv
    return _max3(torch.minimum(t1, t2)), _min3(torch.maximum(t1, t2))


def _cylinder_hit(o, d, r, h):
    a = _safe(d[..., 0] ** 2 + d[..., 1] ** 2)
    b = o[..., 0] * d[..., 0] + o[..., 1] * d[..., 1]
    c = o[..., 0] ** 2 + o[..., 1] ** 2 - r * r
    disc = b * b - a * c
    root = disc.clamp(min=_TINY).sqrt()
    inv_dz = 1.0 / _safe(d[..., 2])
    t1, t2 = (-h - o[..., 2]) * inv_dz, (h - o[..., 2]) * inv_dz
    s_in = torch.maximum((-b - root) / a, torch.minimum(t1, t2))
    s_out = torch.minimum((-b + root) / a, torch.maximum(t1, t2))
    s = _interval_hit(s_in, s_out)
    return torch.where(disc > 0, s, torch.full_like(s, float("inf")))


def _line_point_dist(o, d):
    """Distance from the origin (the shape centre) to the line o + s d."""
    s = -_dot(o, d) / _dot(d, d)
    return _norm(o + s.unsqueeze(-1) * d)


def _line_segment_dist(o, d, h):
    """Distance between the line o + s d and the segment z in [-h, h] on the z axis."""
    # Closest points of two lines (segment direction e_z), then clamp the segment parameter
    # and re-project onto the line: exact for a line vs a segment (Eberly, "Distance between
    # lines and segments").
    dd = _dot(d, d)
    dz = d[..., 2]
    od = _dot(o, d)
    oz = o[..., 2]
    den = dd - dz * dz  # |d|^2 |e_z|^2 - (d.e_z)^2 >= 0
    par = den < 1e-9 * dd
    z = torch.where(par, torch.zeros_like(oz), (dd * oz - dz * od) / torch.where(par, torch.ones_like(den), den))
    z = z.clamp(-h, h)
    p = torch.stack([torch.zeros_like(z), torch.zeros_like(z), z], -1)
    return _line_point_dist(o - p, d)


def _bracket(prim: Primitive, o: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) (...) of ``_argmin_along_ray``'s search: the bounding sphere's chord, a box's own
    chord on piercing rays."""
    dd = _dot(d, d)
    s_c = -_dot(o, d) / dd
    half = prim.bounding_radius / dd.sqrt()
    lo, hi = s_c - half, s_c + half
    if prim.kind == "box":  # a piercing ray's minimum lies inside its chord: a far tighter bracket
        s_in, s_out = _slab(o, d, o.new_tensor(prim.half_size))
        pierce = s_in < s_out
        lo, hi = torch.where(pierce, s_in, lo), torch.where(pierce, s_out, hi)
    return lo, hi


def _argmin_along_ray(prim: Primitive, o: torch.Tensor, d: torch.Tensor, iters: int = 14) -> torch.Tensor:
    """Golden-section search of min_s sdf(o + s d) (convex in s), bracketed by the bounding sphere."""
    with torch.no_grad():
        lo, hi = _bracket(prim, o, d)
        if o.dtype == torch.float64 and prim.kind in ("box", "cylinder"):   # NumPy: the same values, cheaper
            if o.shape != d.shape:
                o, d = torch.broadcast_tensors(o, d)
            O, D = np.moveaxis(o.numpy(), -1, 0).copy(), np.moveaxis(d.numpy(), -1, 0).copy()   # (3, ...)
            lo, hi = golden_section(_line_sdf_np(prim.kind, O, D, _np_shape(prim, o.ndim - 1)), lo.numpy(), hi.numpy(),
                                    iters)
            return torch.from_numpy(0.5 * (lo + hi))
        lo, hi = golden_section(lambda s: sdf(prim, o + s.unsqueeze(-1) * d), lo, hi, iters)
        return 0.5 * (lo + hi)


def argmin_along_rays(problems: list[tuple[Primitive, torch.Tensor, torch.Tensor]],
                      iters: int = 14) -> list[torch.Tensor]:
    """``_argmin_along_ray`` of each (prim, o (K, 3), d (K, 3)) problem, a (K,) tensor each. The float64
    boxes' and cylinders' searches (and their brackets) run in NumPy as one per kind over all their
    rays, elementwise the same operations as one problem's (so the same values)."""
    out: list[torch.Tensor | None] = [None] * len(problems)
    for kind in ("box", "cylinder"):
        group = [i for i, (p, o, _) in enumerate(problems)
                 if p.kind == kind and o.dtype == torch.float64 and o.ndim == 2 and len(o)]
        if not group:
            continue
        sizes = [len(problems[i][1]) for i in group]
        O = np.concatenate([np.broadcast_to(problems[i][1].numpy(), (k, 3)) for i, k in zip(group, sizes)]).T.copy()
        D = np.concatenate([np.broadcast_to(problems[i][2].numpy(), (k, 3)) for i, k in zip(group, sizes)]).T.copy()
        shapes = [_np_shape(problems[i][0], 1) for i in group]
        shape = np.concatenate([np.broadcast_to(h, (h.shape[0], k)) for h, k in zip(shapes, sizes)], 1)
        radius = np.concatenate([np.full(k, problems[i][0].bounding_radius) for i, k in zip(group, sizes)])
        lo, hi = golden_section(_line_sdf_np(kind, O, D, shape), *_bracket_np(kind, O, D, radius, shape), iters)
        for i, s in zip(group, np.split(0.5 * (lo + hi), np.cumsum(sizes)[:-1])):
            out[i] = torch.from_numpy(s)
    return [s if s is not None else _argmin_along_ray(p, o, d, iters) for s, (p, o, d) in zip(out, problems)]


def _bracket_np(kind: str, O: np.ndarray, D: np.ndarray, radius: np.ndarray,
                shape: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_bracket`` in NumPy of rays O, D (3, K) with bounding radii ``radius`` (K,) and ``_np_shape``'s
    ``shape`` per ray: torch's operations in their order (``x / t`` of a number x being torch's
    ``t.reciprocal() * x``; the square root torch's), so the same values."""
    dd = D[0] * D[0] + D[1] * D[1] + D[2] * D[2]
    s_c = -(O[0] * D[0] + O[1] * D[1] + O[2] * D[2]) / dd
    half = (1.0 / torch.from_numpy(dd).sqrt().numpy()) * radius   # torch's sqrt: NumPy's rounds differently
    lo, hi = s_c - half, s_c + half
    if kind == "box":
        inv = 1.0 / np.where(np.abs(D) < _TINY, _TINY, D)
        t1, t2 = (-shape - O) * inv, (shape - O) * inv
        s_in, s_out = np.minimum(t1, t2).max(0), np.maximum(t1, t2).min(0)
        pierce = s_in < s_out
        lo, hi = np.where(pierce, s_in, lo), np.where(pierce, s_out, hi)
    return lo, hi


def _np_shape(prim: Primitive, ndim: int) -> np.ndarray:
    """A box's half sizes (3, 1, ...) or a cylinder's radius and half length (2, 1, ...) for
    ``_line_sdf_np`` on rays of ``ndim`` batch dimensions."""
    v = prim.half_size if prim.kind == "box" else (prim.radius, prim.half_length)
    return np.asarray(v, dtype=np.float64).reshape((len(v),) + (1,) * ndim)


def _line_sdf_np(kind: str, O: np.ndarray, D: np.ndarray, shape: np.ndarray):
    """s (...) -> ``sdf(prim, o + s d)`` (...) of a box or cylinder in NumPy, with ``sdf``'s
    float64 operations in its order (so the same values); O, D: (3, ...) ray origins and
    directions, ``shape``: ``_np_shape``'s, broadcast against them (one shape per ray, or one for all)."""
    if kind == "box":
        H = shape

        def f(s):
            a = np.abs(O + s * D) - H
            p = np.maximum(a, 0.0)
            p *= p
            return np.sqrt(p[0] + p[1] + p[2] + _TINY) + np.minimum(np.maximum(np.maximum(a[0], a[1]), a[2]), 0.0)
        return f
    r, h = shape[0], shape[1]

    def f(s):
        q = O + s * D
        dr = np.sqrt(q[0] * q[0] + q[1] * q[1] + _TINY) - r
        dz = np.abs(q[2]) - h
        a, b = np.maximum(dr, 0.0), np.maximum(dz, 0.0)
        return np.sqrt(a * a + b * b + _TINY) + np.minimum(np.maximum(dr, dz), 0.0)
    return f
