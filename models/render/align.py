"""Analysis-by-synthesis pose alignment: Gauss-Newton on rendered-vs-observed residuals.

Given posed primitives, the observed depth (as back-projected world points) and the
rays of a region of interest, one ``gauss_newton_step`` renders the scene (all bodies
together, so occlusions are right), builds three robust residual families and solves
one damped Gauss-Newton (Levenberg-Marquardt) step per body:

- depth, point-to-surface: each observed foreground point is assigned to the body
  whose surface is nearest (within ``gate``) and contributes ``sdf_b(p)``; its
  Jacobian w.r.t. the world twist (v, w) of the body is ``(-n, -(p - t) x n)`` with
  ``n`` the world surface normal (the SDF gradient): the model-to-depth term of
  DART (Schmidt et al., RSS 2014).
- silhouette, free space: a ray that renders body b but observes a surface well
  *behind* it (or, with ``observed_label``, another label) contributes the ray margin
  ``margin_b`` (``primitives.ray_margin``), pulling the silhouette edge off that ray.
- silhouette, coverage (RGB mode only): a ray observed as body b that does not render
  b contributes ``min(margin_b, 0)``.

Margins' Jacobians come from autograd with one pose copy per ray (each residual
depends only on its own copy, so one backward pass yields every Jacobian row).
Weights are Huber IRLS weights. Symmetric directions (a capsule's roll) have no
information; the LM damping keeps them where they are.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from vid2sim.models.render.poses import perturb
from vid2sim.models.render.primitives import Primitive, ray_margin, sdf_and_grad

PLANAR_DOFS = (0, 2, 4)  # world x, world z translation and rotation about world y


@dataclass
class Observation:
    """One frame seen through the rays of a region of interest (N rays, world frame).

    origin: (3,) camera centre; dirs: (N, 3) ray directions scaled so that the ray
    parameter is the camera depth; depth: (N,) observed depth, 0 = none;
    foreground: (N,) bool rays not explained by the static background;
    label: (N,) long observed body label (-1 none) or None (depth mode).
    """

    origin: torch.Tensor
    dirs: torch.Tensor
    depth: torch.Tensor
    foreground: torch.Tensor
    label: torch.Tensor | None = None

    @property
    def points(self) -> torch.Tensor:
        return self.origin + self.depth.unsqueeze(-1) * self.dirs


@dataclass
class StepResult:
    T: torch.Tensor  # (M, 4, 4) updated poses
    assigned: torch.Tensor  # (N,) body each observed point was assigned to, -1 none
    point_res: torch.Tensor  # (N,) |sdf| of the assigned body (inf where unassigned)
    visible: torch.Tensor  # (N,) rendered body per ray, -1 background
    freespace: torch.Tensor  # (N,) bool rays whose observation contradicts the render
    step_norm: float


def huber_weights(r: torch.Tensor, scale: float) -> torch.Tensor:
    a = r.abs()
    return torch.where(a <= scale, torch.ones_like(a), scale / a.clamp(min=1e-12))


def point_residuals(prim: Primitive, T: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p: (N, 3) world points -> sdf (N,), Jacobian (N, 6) w.r.t. the world twist (v, w) of T."""
    R, t = T[:3, :3], T[:3, 3]
    d, g = sdf_and_grad(prim, (p - t) @ R)
    n = g @ R.T
    return d, torch.cat([-n, -torch.cross(p - t, n, dim=-1)], -1)


def margin_residuals(prim: Primitive, T: torch.Tensor, origin: torch.Tensor,
                     dirs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dirs: (N, 3) world rays from ``origin`` -> margin (N,), Jacobian (N, 6) w.r.t. (v, w) of T."""
    n = dirs.shape[0]
    if n == 0:
        return dirs.new_zeros(0), dirs.new_zeros(0, 6)
    with torch.enable_grad():
        xi = torch.zeros(n, 6, dtype=dirs.dtype, requires_grad=True)
        Tn = perturb(T.expand(n, 4, 4), xi)
        R, t = Tn[:, :3, :3], Tn[:, :3, 3]
        o_b = torch.einsum("nij,ni->nj", R, origin - t)
        d_b = torch.einsum("nij,ni->nj", R, dirs)
        m = ray_margin(prim, o_b, d_b)
        (J,) = torch.autograd.grad(m.sum(), xi)
    return m.detach(), J


def render_hits(prims: list[Primitive], T: torch.Tensor, origin: torch.Tensor, dirs: torch.Tensor) -> torch.Tensor:
    """(M, N) first-hit depth of each body along world rays (inf on a miss), no graph."""
    from vid2sim.models.render.primitives import ray_hit

    hits = []
    with torch.no_grad():
        for m, prim in enumerate(prims):
            R, t = T[m, :3, :3], T[m, :3, 3]
            hits.append(ray_hit(prim, ((origin - t) @ R).expand_as(dirs), dirs @ R))
    return torch.stack(hits, 0)


def gauss_newton_step(prims: list[Primitive], T: torch.Tensor, obs: Observation, *, gate: float,
                      scale: float = 0.004, freespace_tol: float = 0.02, w_depth: float = 1.0,
                      w_silhouette: float = 1.0, damping: float = 1e-3, planar: bool = False,
                      active: torch.Tensor | None = None) -> StepResult:
    """One LM step for all bodies; ``active`` (M,) bool bodies to update (others stay)."""
    M = len(prims)
    hit = render_hits(prims, T, obs.origin, obs.dirs)
    near, visible = hit.min(0)
    visible = torch.where(torch.isinf(near), torch.full_like(visible, -1), visible)
    valid = obs.depth > 0
    pts = obs.points

    # Point-to-surface residuals of the foreground observations, each to its nearest body.
    fg = valid & obs.foreground
    idx = fg.nonzero().squeeze(-1)
    sd = torch.full((M, idx.numel()), float("inf"), dtype=T.dtype)
    jac = []
    for m, prim in enumerate(prims):
        d, J = point_residuals(prim, T[m], pts[idx])
        sd[m] = d
        jac.append(J)
    best = sd.abs().min(0) if M else None
    assigned = torch.full_like(visible, -1)
    point_res = torch.full(visible.shape, float("inf"), dtype=T.dtype)
    if idx.numel():
        ok = best.values < gate
        assigned[idx[ok]] = best.indices[ok]
        point_res[idx] = torch.where(ok, best.values, torch.full_like(best.values, float("inf")))

    # Free space: the render puts body b on a ray whose observation lies well behind it.
    if obs.label is None:
        freespace = (visible >= 0) & valid & (obs.depth > near + freespace_tol)
    else:
        freespace = (visible >= 0) & (obs.label != visible)
    dofs = list(PLANAR_DOFS) if planar else list(range(6))
    T_new = T.clone()
    step_norm = 0.0
    for m, prim in enumerate(prims):
        if active is not None and not bool(active[m]):
            continue
        sel = (best.indices == m) & (best.values < gate) if idx.numel() else torch.zeros(0, dtype=torch.bool)
        r1, J1 = sd[m][sel], jac[m][sel]
        w1 = w_depth * huber_weights(r1, scale)
        rays = (freespace & (visible == m)).nonzero().squeeze(-1)
        r2, J2 = margin_residuals(prim, T[m], obs.origin, obs.dirs[rays])
        w2 = w_silhouette * huber_weights(r2, scale)
        if obs.label is not None:
            cover = ((obs.label == m) & (visible != m)).nonzero().squeeze(-1)
            r3, J3 = margin_residuals(prim, T[m], obs.origin, obs.dirs[cover])
            r3 = r3.clamp(max=0)
            r2, J2 = torch.cat([r2, r3]), torch.cat([J2, J3])
            w2 = torch.cat([w2, w_silhouette * huber_weights(r3, scale)])
        r, J, w = torch.cat([r1, r2]), torch.cat([J1, J2])[:, dofs], torch.cat([w1, w2])
        if r.numel() < len(dofs):
            continue
        H = (J * w.unsqueeze(-1)).T @ J
        g = (J * w.unsqueeze(-1)).T @ r
        H = H + damping * (torch.diag(torch.diag(H)) + 1e-6 * torch.eye(len(dofs), dtype=H.dtype) * w.sum())
        delta = -torch.linalg.solve(H, g)
        xi = torch.zeros(6, dtype=T.dtype)
        xi[dofs] = delta
        T_new[m] = perturb(T[m], xi)
        step_norm = max(step_norm, float(delta.abs().max()))
    return StepResult(T_new, assigned, point_res, visible, freespace, step_norm)
