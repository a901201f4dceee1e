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
- silhouette from colour (where ``observed_label`` is given): a ray whose colour says
  "not b" but renders b is free space as above; a ray whose colour says b but that
  does not render b contributes ``min(margin_b, 0)`` (coverage).
- hidden rays: a ray that renders body b but observes a surface well *in front* of it
  (a distractor nearer the camera) is neither free space (whatever that surface's colour)
  nor a ray b is seen on (``StepResult.seen``): a part behind something nearer is not
  evidence of its absence, so a rod hidden but for one end is not pushed along its axis.

Margins' Jacobians come from autograd with one pose copy per ray (each residual
depends only on its own copy, so one backward pass yields every Jacobian row).
Weights are Huber IRLS weights. Symmetric directions (a capsule's or cylinder's spin
about its axis, a sphere's rotation) have no information and are left out of the step
(``free_basis``), so they stay where they are.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import torch

from vid2sim.models.geometry_torch import so3_exp
from vid2sim.models.render import primitives
from vid2sim.models.render.primitives import (Primitive, argmin_along_rays, box_sdf_and_grad, ray_hit, ray_margin,
                                              ray_margin_and_grad, sdf_and_grad, sdf_value)

PLANAR_DOFS = (0, 2, 4)  # world x, world z translation and rotation about world y


@dataclass
class Observation:
    """One frame seen through the rays of a region of interest (N rays, world frame).

    origin: (3,) camera centre; dirs: (N, 3) ray directions scaled so that the ray
    parameter is the camera depth; depth: (N,) observed depth, 0 = none;
    foreground: (N,) bool rays not explained by the static background;
    label: (N,) long body label from colour (-1 no body, -2 undecided) or None;
    sigma: (N,) depth noise std (m) per ray, or None (then ``scale`` alone sets weights);
    pixel_angle: 1 / focal length: a silhouette residual's noise is one pixel, depth * this;
    weight: (N,) how many rays each ray stands for (when the rays are a sample of a larger
    set: every residual and the cost count a ray this many times), or None (1 each).
    """

    origin: torch.Tensor
    dirs: torch.Tensor
    depth: torch.Tensor
    foreground: torch.Tensor
    label: torch.Tensor | None = None
    sigma: torch.Tensor | None = None
    pixel_angle: float = 0.0
    weight: torch.Tensor | None = None

    @property
    def points(self) -> torch.Tensor:
        return self.origin + self.depth.unsqueeze(-1) * self.dirs

    def subset(self, keep: torch.Tensor) -> "Observation":
        return Observation(self.origin, self.dirs[keep], self.depth[keep], self.foreground[keep],
                           None if self.label is None else self.label[keep],
                           None if self.sigma is None else self.sigma[keep], self.pixel_angle,
                           None if self.weight is None else self.weight[keep])


def relevant_rays(prims: list[Primitive], T: torch.Tensor, obs: Observation, reach: float) -> torch.Tensor:
    """(N,) bool: rays that can matter for poses within ``reach`` (m) of ``T``.

    A ray matters if its foreground point lies within ``reach`` of a body's surface or
    the ray passes within ``reach`` of a body (bounding sphere; exact for capsules).
    """
    keep = torch.zeros(obs.dirs.shape[0], dtype=torch.bool)
    pts_t = obs.points.T.contiguous()   # (3, N): rotated as R^T X (``_body_view``)
    dirs_t = obs.dirs.T.contiguous()
    fg = obs.foreground & (obs.depth > 0)
    for m, prim in enumerate(prims):
        R, t = T[m, :3, :3], T[m, :3, 3]
        o_b = ((obs.origin - t) @ R).expand_as(obs.dirs)
        d_b = (R.T @ dirs_t).T
        if prim.kind in ("sphere", "capsule"):
            margin = ray_margin(prim, o_b, d_b)
        else:
            margin = ray_margin(Primitive("sphere", radius=prim.bounding_radius), o_b, d_b)
        keep |= margin > -reach
        keep |= fg & (sdf_value(prim, (R.T @ (pts_t - t.unsqueeze(-1))).T).abs() < reach)
    return keep


@dataclass
class StepResult:
    T: torch.Tensor  # (M, 4, 4) updated poses
    assigned: torch.Tensor  # (N,) body each observed point was assigned to, -1 none
    point_res: torch.Tensor  # (N,) |sdf| of the assigned body (inf where unassigned)
    visible: torch.Tensor  # (N,) rendered body per ray, -1 background
    freespace: torch.Tensor  # (N,) bool rays whose observation contradicts the render
    step_norm: float
    body_step: torch.Tensor | None = None  # (M,) each body's largest step component; 0 inactive, inf too few points
    cost: float = 0.0  # truncated cost of the *input* poses: sum min(|sdf| / sigma, 3)^2 + 3^2 per free-space ray
    regate: object = None  # gate (M,) -> (assigned, point_res) of the input poses' render with that gate
    resolve: object = None  # damping -> (T, step_norm, body_step) of the same normal equations with that damping
    hidden: torch.Tensor | None = None  # (N,) bool rays whose rendered body lies behind a nearer observed surface

    def seen(self, m: int) -> torch.Tensor:
        """(N,) bool rays on which body m is rendered and not hidden behind a nearer observed surface."""
        on = self.visible == m
        return on if self.hidden is None else on & ~self.hidden

    def with_damping(self, damping: float) -> "StepResult":
        """This step taken with another Levenberg-Marquardt ``damping`` (no new render: the
        residuals and normal equations of the input poses are the same)."""
        T, step_norm, body_step = self.resolve(damping)
        return replace(self, T=T, step_norm=step_norm, body_step=body_step)

    def with_gate(self, gate: torch.Tensor) -> "StepResult":
        """This result with ``assigned`` and ``point_res`` for per-body gates ``gate`` (M,) (the
        render, free space and cost do not depend on the gate)."""
        assigned, point_res = self.regate(gate)
        return replace(self, assigned=assigned, point_res=point_res)


def _at_most(idx: torch.Tensor, n: int) -> tuple[torch.Tensor, float]:
    """An evenly strided subset of at most n indices and the weight that keeps their total."""
    if idx.numel() <= n:
        return idx, 1.0
    step = idx.numel() / n
    return idx[(torch.arange(n) * step).long()], step


def huber_weights(r: torch.Tensor, scale: float) -> torch.Tensor:
    a = r.abs()
    return torch.where(a <= scale, torch.ones_like(a), scale / a.clamp(min=1e-12))


GRAZING_COS_FLOOR = 0.2  # grazing rays' noise across the surface: sigma * max(|cos|, this)


def point_residuals(prim: Primitive, T: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p: (N, 3) world points -> sdf (N,), Jacobian (N, 6) w.r.t. the world twist (v, w) of T."""
    R, t = T[:3, :3], T[:3, 3]
    d, g = sdf_and_grad(prim, (p - t) @ R)
    return d, _twist_jacobian(g, R, p - t)


def _twist_jacobian(g: torch.Tensor, R: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(K, 6) d sdf / d (v, w) of points with body-frame SDF gradients g (K, 3), the body's
    rotation R (3, 3) and their offsets x (K, 3) from its origin (world frame)."""
    n = g @ R.T
    return torch.cat([-n, -torch.cross(x, n, dim=-1)], -1)


def margin_residuals(prim: Primitive, T: torch.Tensor, origin: torch.Tensor,
                     dirs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dirs: (N, 3) world rays from ``origin`` -> margin (N,), Jacobian (N, 6) w.r.t. (v, w) of T.

    With o_b = R^T (c - t), d_b = R^T d and the left twist R <- exp(w) R, t <- t + v:
    dm = -G_o.v + w.(G_o x (c - t) + G_d x d), G = R dm/d(o_b, d_b) (world vectors).
    """
    return margin_residuals_of([prim], [T], origin, [dirs])[0]


def margin_residuals_of(prims: list[Primitive], Ts: list[torch.Tensor], origin: torch.Tensor,
                        dirs: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``margin_residuals`` of several bodies (pose Ts[i] (4, 4), rays dirs[i] (N_i, 3)), with the
    golden-section line searches of all of them run as one (``primitives.argmin_along_rays``)."""
    frames = [(T[:3, :3], T[:3, 3]) for T in Ts]
    o_b = [((origin - t) @ R).expand_as(d) for (R, t), d in zip(frames, dirs)]
    d_b = [d @ R for (R, _), d in zip(frames, dirs)]
    search = [i for i, (p, d) in enumerate(zip(prims, dirs)) if p.kind in ("box", "cylinder") and d.shape[0]]
    s_star = dict(zip(search, argmin_along_rays([(prims[i], o_b[i].detach(), d_b[i].detach()) for i in search])))
    boxes = [i for i in search if prims[i].kind == "box"] if not primitives.BOX_CLOSED_FORM else []
    kept = _box_margins(prims, o_b, d_b, s_star, boxes) if len(boxes) > 1 else {}
    out = []
    for i, ((R, t), d) in enumerate(zip(frames, dirs)):
        if d.shape[0] == 0:
            out.append((d.new_zeros(0), d.new_zeros(0, 6)))
            continue
        m, g_o, g_d = kept[i] if i in kept else ray_margin_and_grad(prims[i], o_b[i], d_b[i], s_star.get(i))
        G_o, G_d = g_o @ R.T, g_d @ R.T
        c = (origin - t).expand_as(d)
        out.append((m, torch.cat([-G_o, torch.cross(G_o, c, dim=-1) + torch.cross(G_d, d, dim=-1)], -1)))
    return out


def _box_margins(prims: list[Primitive], o_b: list[torch.Tensor], d_b: list[torch.Tensor], s_star: dict,
                 boxes: list[int]) -> dict[int, tuple[torch.Tensor, ...]]:
    """``ray_margin_and_grad`` of the boxes ``boxes`` (body-frame rays o_b[i], d_b[i] (K_i, 3) and their
    line searches' minimisers s_star[i] (K_i,)) in one set of operations: the same elementwise
    operations on all their rays, each with its box's half sizes (so the same values)."""
    sizes = [d_b[i].shape[0] for i in boxes]
    O = torch.cat([o_b[i] for i in boxes]).detach()
    D = torch.cat([d_b[i] for i in boxes]).detach()
    S = torch.cat([s_star[i] for i in boxes]).unsqueeze(-1)
    half = torch.cat([O.new_tensor(prims[i].half_size).expand(k, 3) for i, k in zip(boxes, sizes)])
    f, n = box_sdf_and_grad(O + S * D, half)
    parts = zip(torch.split(-f, sizes), torch.split(-n, sizes), torch.split(-S * n, sizes))
    return dict(zip(boxes, parts))


def depth_residuals(prim: Primitive, T: torch.Tensor, origin: torch.Tensor, dirs: torch.Tensor,
                    s: torch.Tensor, min_cos: float = 0.3) -> tuple[torch.Tensor, torch.Tensor]:
    """Rendered depth ``s`` (N,) of rays hitting the body and its Jacobian (N, 6) w.r.t. (v, w) of T.

    Implicit function theorem on sdf(x(s), T) = 0: ds/dθ = -(d sdf/dθ) / (n . dir). Rays
    meeting the surface at a grazing angle (|cos| < ``min_cos``) get s = nan (unusable).
    """
    return _depth_residuals(prim, T, origin, dirs.T.contiguous(), s, dirs.norm(dim=-1), min_cos)


def _depth_residuals(prim: Primitive, T: torch.Tensor, origin: torch.Tensor, dirs_t: torch.Tensor, s: torch.Tensor,
                     dir_norm: torch.Tensor, min_cos: float = 0.3) -> tuple[torch.Tensor, torch.Tensor]:
    """``depth_residuals`` of the rays ``dirs_t`` (3, N) with their lengths ``dir_norm`` (N,) given
    (rotated as R^T X, ``_body_view``)."""
    R, t = T[:3, :3], T[:3, 3]
    x_t = origin.unsqueeze(-1) + s * dirs_t - t.unsqueeze(-1)
    n_t = R @ sdf_and_grad(prim, (R.T @ x_t).T)[1].T.contiguous()   # (3, N) world normals
    n_dir = n_t[0] * dirs_t[0] + n_t[1] * dirs_t[1] + n_t[2] * dirs_t[2]
    n, x = n_t.T, x_t.T
    ok = (n_dir / dir_norm).abs() >= min_cos
    den = torch.where(ok, n_dir, torch.ones_like(n_dir))
    J = torch.cat([n, torch.cross(x, n, dim=-1)], -1) / den.unsqueeze(-1)
    return torch.where(ok, s, torch.full_like(s, float("nan"))), J


def render_hits(prims: list[Primitive], T: torch.Tensor, origin: torch.Tensor, dirs: torch.Tensor) -> torch.Tensor:
    """(M, N) first-hit depth of each body along world rays (inf on a miss), no graph."""
    hits = []
    with torch.no_grad():
        for m, prim in enumerate(prims):
            R, t = T[m, :3, :3], T[m, :3, 3]
            hits.append(ray_hit(prim, ((origin - t) @ R).expand_as(dirs), dirs @ R))
    return torch.stack(hits, 0)


def free_basis(prim: Primitive, T: torch.Tensor, dofs: list[int]) -> torch.Tensor:
    """(len(dofs), r) orthonormal basis of the pose directions (world twists restricted to
    ``dofs``) that change what the shape shows: all of them for a box; all but the spin
    about the axis (body z) for a capsule or cylinder; translations only for a sphere."""
    n = len(dofs)
    if prim.kind in ("capsule", "cylinder"):
        null = torch.zeros(1, 6, dtype=T.dtype)
        null[0, 3:] = T[:3, 2]
    elif prim.kind == "sphere":
        null = torch.zeros(3, 6, dtype=T.dtype)
        null[:, 3:] = torch.eye(3, dtype=T.dtype)
    else:
        return torch.eye(n, dtype=T.dtype)
    # a null twist restricts to a null direction of the ``dofs`` only if it lies within them
    # (planar mode: a rod's spin is a rotation about world y only if the rod is along y)
    off = [i for i in range(6) if i not in dofs]
    U = null[:, dofs]
    U = U[(null[:, off].norm(dim=1) < 1e-6) & (U.norm(dim=1) > 1e-9)]
    if not len(U):
        return torch.eye(n, dtype=T.dtype)
    # complement of span(U): the right singular vectors beyond its rank
    _, S, Vh = torch.linalg.svd(U, full_matrices=True)
    rank = int((S > 1e-6 * S.max()).sum())
    return Vh[rank:].T.contiguous()


HUBER_K = 1.345  # Huber threshold in noise standard deviations (95 % efficiency under Gaussian noise)
MIN_SIGMA_M = 1e-4  # m: floor of every residual's noise standard deviation
GATE_SIGMAS = 3.0  # gates are never tighter than this many noise standard deviations
# The step's cost truncates each point's |sdf| / sigma at GATE_SIGMAS; a free-space ray costs as
# much as one truncated point, GATE_SIGMAS ** 2.


@dataclass
class _Assignment:
    """Every ray of one frame against the rendered poses: what the render shows on it, and
    which body each observed foreground point is nearest to."""

    near: torch.Tensor  # (N,) first rendered depth (inf: nothing)
    visible: torch.Tensor  # (N,) body rendered on the ray, -1 none
    valid: torch.Tensor  # (N,) bool ray has an observed depth
    pts: torch.Tensor  # (N, 3) observed world points
    fg: torch.Tensor  # (N,) bool valid foreground ray
    idx: torch.Tensor  # (P,) indices of the foreground rays: the observed points
    sig: torch.Tensor  # (P,) depth noise std (m) of each point
    sd: torch.Tensor  # (M, P) signed distance of each point to each body
    local: list  # per body, (P, 3) the points in its frame (``jac``)
    best: object  # (values, indices) of the smallest |sd| per point, None without bodies
    assigned: torch.Tensor  # (N,) body each point was assigned to (within the gate), -1 none
    point_res: torch.Tensor  # (N,) |sd| to the assigned body, inf where unassigned
    freespace: torch.Tensor  # (N,) bool rays whose observation contradicts the render
    hidden: torch.Tensor  # (N,) bool rays whose rendered body lies behind a nearer observed surface (not seen there)
    weight: torch.Tensor | None = None  # (N,) ``Observation.weight``, None: 1 each
    ray_sig: torch.Tensor | None = None  # (N,) depth noise std (m) of each ray (``scale`` without obs.sigma)
    ray_floor: torch.Tensor | None = None  # (N,) GATE_SIGMAS * ray_sig: no gate is tighter on a ray
    dir_norm: torch.Tensor | None = None  # (N,) length of each ray's direction
    gap: torch.Tensor | None = None  # (N,) |rendered - observed depth| of each ray
    sig_floor: torch.Tensor | None = None  # (P,) GATE_SIGMAS * sig: no gate is tighter on a point
    point_of: torch.Tensor | None = None  # (N,) each ray's point index (position in idx), -1: none
    dirs_t: torch.Tensor | None = None  # (3, N) the rays' directions

    def jac(self, prim: Primitive, T_m: torch.Tensor, m: int, sel: torch.Tensor) -> torch.Tensor:
        """(K, 6) Jacobians of body m's signed distances ``sd[m][sel]`` (``sel``: (P,) bool with K true,
        or K point indices) w.r.t. its world twist (v, w) at its pose T_m (4, 4), as ``point_residuals``
        gives them."""
        g = sdf_and_grad(prim, self.local[m][sel])[1]
        return _twist_jacobian(g, T_m[:3, :3], self.pts[self.idx[sel]] - T_m[:3, 3])

    def selected(self, m: int, gate: torch.Tensor) -> torch.Tensor:
        """(P,) bool points nearest to body m and within its gate (or GATE_SIGMAS of their noise)."""
        if not self.idx.numel():
            return torch.zeros(0, dtype=torch.bool)
        return (self.best.indices == m) & (self.best.values < torch.maximum(gate, self.sig_floor))

    def cost(self) -> float:
        """Truncated cost of the rendered poses (``StepResult.cost``)."""
        if self.weight is None:
            cost = float((self.best.values / self.sig).clamp(max=GATE_SIGMAS).square().sum()) if self.idx.numel() else 0.0
            return cost + GATE_SIGMAS ** 2 * float(self.freespace.sum())
        k = self.weight[self.idx]
        cost = float(((self.best.values / self.sig).clamp(max=GATE_SIGMAS).square() * k).sum()) if self.idx.numel() else 0.0
        return cost + GATE_SIGMAS ** 2 * float(self.weight[self.freespace].sum())


def _gate_points(visible: torch.Tensor, idx: torch.Tensor, best, sig_floor: torch.Tensor,
                 gate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each point (rays ``idx``) assigned to its nearest body (``best``: values, indices (P,)) where
    nearer than that body's gate (``gate`` (M,)) or ``sig_floor`` (P,), GATE_SIGMAS of its noise:
    the assigned body (N,) (-1 none) and its distance (N,) (inf where unassigned)."""
    assigned = torch.full_like(visible, -1)
    point_res = torch.full(visible.shape, float("inf"), dtype=sig_floor.dtype)
    if idx.numel():
        ok = best.values < torch.maximum(gate[best.indices], sig_floor)
        assigned[idx[ok]] = best.indices[ok]
        point_res[idx] = torch.where(ok, best.values, torch.full_like(best.values, float("inf")))
    return assigned, point_res


def _static(obs: Observation, scale: float, freespace_tol: float) -> tuple:
    """What every step of a frame computes alike from ``obs`` (not from the poses), computed once
    per observation: valid (N,), points (N, 3), fg (N,), idx (P,), sig (P,), the points at idx
    (P, 3), the free-space tolerance (N,) or float, (``_Assignment``'s ray_sig, ray_floor,
    dir_norm) and (its sig_floor, point_of, the rays' directions (3, N) and the points at idx (3, P)).
    Recomputed if a field was replaced."""
    key = (obs.depth, obs.dirs, obs.foreground, obs.sigma, scale, freespace_tol)
    cached = getattr(obs, "_static_cache", None)
    if cached is not None and all(a is b or (not torch.is_tensor(a) and a == b) for a, b in zip(cached[0], key)):
        return cached[1]
    valid = obs.depth > 0
    pts = obs.points
    fg = valid & obs.foreground
    idx = fg.nonzero().squeeze(-1)
    # Residual noise: the depth noise of each point (whitened IRLS: Huber on r / sigma,
    # weight 1 / sigma^2), and a gate no tighter than GATE_SIGMAS so the noise is not truncated.
    sig = torch.full((idx.numel(),), scale, dtype=obs.dirs.dtype) if obs.sigma is None \
        else obs.sigma[idx].clamp(min=MIN_SIGMA_M)
    tol = freespace_tol if obs.sigma is None else obs.sigma.mul(GATE_SIGMAS).clamp(min=freespace_tol)
    ray_sig = obs.sigma if obs.sigma is not None else torch.full_like(obs.depth, scale)
    point_of = torch.full_like(valid, -1, dtype=torch.long)
    point_of[idx] = torch.arange(idx.numel())
    pts_idx = pts[idx]
    out = (valid, pts, fg, idx, sig, pts_idx, tol, (ray_sig, GATE_SIGMAS * ray_sig, obs.dirs.norm(dim=-1)),
           (GATE_SIGMAS * sig, point_of, obs.dirs.T.contiguous(), pts_idx.T.contiguous()))
    obs._static_cache = (key, out)
    obs._body_cache = {}
    return out


def _body_view(prim: Primitive, T_m: torch.Tensor, m: int, obs: Observation, dirs_t: torch.Tensor,
               pts_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Body m at pose T_m (4, 4) against ``obs``: first-hit depth along every ray (N,) (inf: a miss),
    signed distance of the points ``pts_t`` (3, P) and those points in the body frame (P, 3)
    (for ``_Assignment.jac``); ``dirs_t``: ``obs.dirs`` as (3, N). Rotated as R^T X of the (3, K)
    layouts: the values of X^T R, at a quarter of its cost for K in the thousands. Kept on ``obs``
    (``_static`` resets it) for the body's latest pose: a body that did not move between two steps
    of a frame (frozen, or converged) is not rendered again."""
    cache = obs.__dict__.setdefault("_body_cache", {})
    key = T_m.detach().numpy().tobytes()
    kept = cache.get(m)
    if kept is not None and kept[0] == key:
        return kept[1], kept[2], kept[3]
    R, t = T_m[:3, :3], T_m[:3, 3]
    o_b = (obs.origin - t) @ R   # one origin for every ray: broadcast, not expanded (a mesh's casting takes (N, 3))
    with torch.no_grad():
        hit = ray_hit(prim, o_b.expand_as(obs.dirs) if prim.kind == "mesh" else o_b, (R.T @ dirs_t).T)
    q = (R.T @ (pts_t - t.unsqueeze(-1))).T
    d = sdf_value(prim, q)
    cache[m] = (key, hit, d, q)
    return hit, d, q


def _assign(prims: list[Primitive], T: torch.Tensor, obs: Observation, gate: torch.Tensor, scale: float,
            freespace_tol: float) -> _Assignment:
    """Render ``T``, assign each foreground point to its nearest body, find the free-space rays."""
    M = len(prims)
    valid, pts, fg, idx, sig, pts_idx, tol, rays, (sig_floor, point_of, dirs_t, pts_t) = _static(obs, scale,
                                                                                                 freespace_tol)
    views = [_body_view(prim, T[m], m, obs, dirs_t, pts_t) for m, prim in enumerate(prims)]
    hit = torch.stack([v[0] for v in views]) if M else obs.dirs.new_zeros(0, obs.dirs.shape[0])
    near, visible = hit.min(0)
    visible = torch.where(torch.isinf(near), torch.full_like(visible, -1), visible)
    sd = torch.stack([v[1] for v in views]) if M else torch.zeros(0, idx.numel(), dtype=T.dtype)
    best = sd.abs().min(0) if M else None
    assigned, point_res = _gate_points(visible, idx, best, sig_floor, gate)
    # Free space: the render puts body b on a ray whose observation lies well behind it.
    freespace = (visible >= 0) & valid & (obs.depth > near + tol)
    # Hidden: the observation lies well in front of the render, a nearer surface (a distractor) hides
    # the body there; the colour of what hides it says nothing about the body.
    hidden = (visible >= 0) & valid & (obs.depth < near - tol)
    if obs.label is not None:  # colour says another body or no body (-1); -2 = undecided
        freespace |= (visible >= 0) & (obs.label != visible) & (obs.label > -2) & ~hidden
    return _Assignment(near, visible, valid, pts, fg, idx, sig, sd, [v[2] for v in views], best, assigned, point_res,
                       freespace, hidden, obs.weight, *rays, (near - obs.depth).abs(), sig_floor, point_of, dirs_t)


def _depth_terms(prim: Primitive, T_m: torch.Tensor, m: int, obs: Observation, a: _Assignment, gate: torch.Tensor,
                 sel: torch.Tensor, scale: float, grazing: bool) -> tuple[torch.Tensor, ...]:
    """Body m's depth residuals r (K,), Jacobians J (K, 6), noise stds s (K,) and ray weights k
    (K,) (``Observation.weight``): depth along
    the rays its render covers, point-to-surface for its points (``sel``) the render does not
    cover yet, and point-to-surface for covered rays meeting it at a grazing angle."""
    # Depth along the ray where the render shows this body (linear in the sensor noise).
    ray_sig = a.ray_sig
    on = a.fg & (a.visible == m) & (a.gap < torch.maximum(gate, a.ray_floor))
    on_i = on.nonzero().squeeze(-1)   # indices, in ray order: cheaper to gather with than the mask
    rd, Jd = _depth_residuals(prim, T_m, obs.origin, a.dirs_t[:, on_i], a.near[on_i], a.dir_norm[on_i])
    keep_d = torch.isfinite(rd)
    sel = (sel & ~on[a.idx]).nonzero().squeeze(-1)
    # Rays meeting the body at a grazing angle (a box's top face seen almost edge-on): the
    # depth along the ray is too nonlinear there, so their points enter point-to-surface,
    # whitened by the noise across the surface, sigma |cos| (noise is along the ray); the pose
    # directions only such a face pins down (a cart's tilt about its long axis) need them.
    graze = on_i[~keep_d] if grazing else on_i[:0]
    graze = graze[a.assigned[graze] == m]   # and whose point is nearest to this body (not a part in front)
    graze_p = a.point_of[graze]
    J_both = a.jac(prim, T_m, m, torch.cat([sel, graze_p]))   # the uncovered points' and the grazing ones'
    J_sel, Jg = J_both[:sel.numel()], J_both[sel.numel():]
    rg = a.sd[m][graze_p]
    d_g = obs.dirs[graze]
    sg = ray_sig[graze] * ((-Jg[:, :3]) * d_g).sum(-1).abs().div(a.dir_norm[graze]).clamp(min=GRAZING_COS_FLOOR)
    ok_g = rg.abs() < torch.maximum(gate, GATE_SIGMAS * sg)
    on_d = on_i[keep_d]
    r1 = torch.cat([rd[keep_d] - obs.depth[on_d], a.sd[m][sel], rg[ok_g]])
    J1 = torch.cat([Jd[keep_d], J_sel, Jg[ok_g]])
    s1 = torch.cat([ray_sig[on_d], a.sig[sel], sg[ok_g]]).clamp(min=MIN_SIGMA_M)
    if obs.weight is None:
        return r1, J1, s1, torch.ones_like(r1)
    k1 = torch.cat([obs.weight[on_d], obs.weight[a.idx[sel]], obs.weight[graze][ok_g]])
    return r1, J1, s1, k1


def _silhouette_terms(prims: list[Primitive], T: torch.Tensor, bodies: list[int], obs: Observation, a: _Assignment,
                      scale: float, max_silhouette: int) -> dict[int, tuple[torch.Tensor, ...]]:
    """Each body m of ``bodies``: its silhouette residuals r (K,), Jacobians J (K, 6), noise stds s (K,)
    and ray weights k (K,) (``_at_most``'s times ``Observation.weight``): free-space rays, and with
    colour labels the coverage of rays labelled m that the render does not show as m. One line
    search for all of them (``margin_residuals_of``)."""
    picks = {}
    for m in bodies:
        rays = _at_most((a.freespace & (a.visible == m)).nonzero().squeeze(-1), max_silhouette)
        cover = None if obs.label is None else \
            _at_most(((obs.label == m) & (a.visible != m)).nonzero().squeeze(-1), max_silhouette)
        picks[m] = (rays, cover, obs.dirs[rays[0] if cover is None else torch.cat([rays[0], cover[0]])])
    margins = margin_residuals_of([prims[m] for m in bodies], [T[m] for m in bodies], obs.origin,
                                  [picks[m][2] for m in bodies])
    out = {}
    for m, (r_all, J_all) in zip(bodies, margins):
        rays, cover, _ = picks[m]
        n2 = rays[0].numel()
        r2, J2, r3, J3 = r_all[:n2], J_all[:n2], r_all[n2:], J_all[n2:]
        s2 = a.near[rays[0]] * obs.pixel_angle if obs.pixel_angle > 0 else torch.full_like(r2, scale)
        k2 = torch.full_like(r2, rays[1]) * (1.0 if obs.weight is None else obs.weight[rays[0]])
        if cover is not None:
            r3 = r3.clamp(max=0)
            s3 = torch.full_like(r3, float((T[m, :3, 3] - obs.origin).norm()) * obs.pixel_angle if obs.pixel_angle > 0
                                 else scale)
            r2, J2, s2 = torch.cat([r2, r3]), torch.cat([J2, J3]), torch.cat([s2, s3])
            k2 = torch.cat([k2, torch.full_like(r3, cover[1]) * (1.0 if obs.weight is None else obs.weight[cover[0]])])
        out[m] = (r2, J2, s2.clamp(min=MIN_SIGMA_M), k2)
    return out


def _prior_terms(T_m: torch.Tensor, T_prior_m: torch.Tensor, prior_sigma: tuple[float, float],
                 dofs: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The motion prior's residual e = (t - t_prior, log(R R_prior^T)) (small-angle vee) on
    ``dofs`` and its weights 1 / sigma^2 (a zero sigma switches that part off)."""
    D = T_m[:3, :3] @ T_prior_m[:3, :3].T
    e = torch.cat([T_m[:3, 3] - T_prior_m[:3, 3],
                   0.5 * torch.stack([D[2, 1] - D[1, 2], D[0, 2] - D[2, 0], D[1, 0] - D[0, 1]])])[dofs]
    wp = torch.tensor([s ** -2 if s > 0 else 0.0 for s in [prior_sigma[0]] * 3 + [prior_sigma[1]] * 3],
                      dtype=T_m.dtype)[dofs]
    return e, wp


def _solve(prim: Primitive, T_m: torch.Tensor, H: torch.Tensor, g: torch.Tensor, w: torch.Tensor, dofs: list[int],
           damping: float, step_scale: float) -> torch.Tensor:
    """The damped step (len(dofs),) of normal equations H, g, restricted to the directions the
    shape can show (``free_basis``: a capsule's spin about its axis, any rotation of a sphere
    stay put instead of drifting with the damping and the prior)."""
    if prim.kind in ("box", "mesh"):   # free_basis is the identity: every direction shows
        H = H + damping * torch.diag(torch.diag(H)) + 1e-9 * torch.eye(len(dofs), dtype=H.dtype) * w.sum()
        return -step_scale * torch.linalg.solve(H, g)
    B = free_basis(prim, T_m, dofs)
    Hr, gr = B.T @ H @ B, B.T @ g
    Hr = Hr + damping * torch.diag(torch.diag(Hr)) + 1e-9 * torch.eye(B.shape[1], dtype=H.dtype) * w.sum()
    return -step_scale * (B @ torch.linalg.solve(Hr, gr))


def gauss_newton_step(prims: list[Primitive], T: torch.Tensor, obs: Observation, *, gate: float | torch.Tensor,
                      scale: float = 0.004, freespace_tol: float = 0.02, w_depth: float = 1.0,
                      w_silhouette: float = 1.0, damping: float = 1e-3, planar: bool = False,
                      active: torch.Tensor | None = None, T_prior: torch.Tensor | None = None,
                      prior_sigma: tuple[float, float] = (0.005, 0.03), max_silhouette: int = 256,
                      step_scale: float = 1.0, grazing: bool = True) -> StepResult:
    """One LM step for all bodies; ``gate`` per body (M,) or shared; ``active`` (M,) bool bodies to update.

    A body with no assigned depth point is not moved: free-space residuals alone would
    only push it away from wherever it should be. ``T_prior`` (M, 4, 4), the motion
    model's prediction, adds the residual (t - t_prior, log(R R_prior^T)) with standard
    deviations ``prior_sigma`` (m, rad): directions the frame barely observes (a box
    sliding along a face, a pole seen end-on) follow the motion instead of the noise.
    ``step_scale`` < 1 relaxes the step: which rays a body covers changes with its pose,
    so full steps can cycle between two poses straddling the optimum (a box's end face
    alternately covering and uncovering a few depth points); relaxed steps settle.
    ``grazing``: points the render meets at a grazing angle join as point-to-surface
    residuals (``_depth_terms``); off for the coarse orientation search of an initial fit,
    where they can pull a large body into a wrong orientation hypothesis.
    """
    M = len(prims)
    gate = torch.as_tensor(gate, dtype=T.dtype).expand(M)
    a = _assign(prims, T, obs, gate, scale, freespace_tol)
    dofs = list(PLANAR_DOFS) if planar else list(range(6))
    unsolved = torch.zeros(M, dtype=T.dtype)   # inf: a body not solved for too few points
    normal = {}
    selected = {}
    for m in range(M):
        if active is not None and not bool(active[m]):
            continue
        sel = a.selected(m, gate[m])
        if int(sel.sum()) < len(dofs) and (obs.label is None or bool(a.valid.any())):
            unsolved[m] = float("inf")  # not solved: too few points within its gate
            continue
        selected[m] = sel
    silhouette = _silhouette_terms(prims, T, list(selected), obs, a, scale, max_silhouette)
    for m, sel in selected.items():
        prim = prims[m]
        r1, J1, s1, k1 = _depth_terms(prim, T[m], m, obs, a, gate[m], sel, scale, grazing)
        w1 = w_depth * k1 * huber_weights(r1 / s1, HUBER_K) / s1**2
        r2, J2, s2, k2 = silhouette[m]
        w2 = w_silhouette * k2 * huber_weights(r2 / s2, HUBER_K) / s2**2
        r, J, w = torch.cat([r1, r2]), torch.cat([J1, J2]), torch.cat([w1, w2])
        J = J[:, dofs] if planar else J
        if r.numel() < len(dofs):
            unsolved[m] = float("inf")
            continue
        Jw = J * w.unsqueeze(-1)
        H = Jw.T @ J
        g = Jw.T @ r
        if T_prior is not None:
            e, wp = _prior_terms(T[m], T_prior[m], prior_sigma, dofs)
            H = H + torch.diag(wp)
            g = g + wp * e
        normal[m] = (H, g, w)
    T_new, step_norm, body_step = _steps(prims, T, normal, unsolved, dofs, damping, step_scale)
    # A fixed, truncated objective of the input poses, comparable across steps (the residual
    # sets above change with the pose, so the caller keeps the best pose it has seen).
    return StepResult(T_new, a.assigned, a.point_res, a.visible, a.freespace, step_norm, body_step, a.cost(),
                      partial(_gate_points, a.visible, a.idx, a.best, a.sig_floor),
                      partial(_steps, prims, T, normal, unsolved, dofs, step_scale=step_scale), a.hidden)


def _steps(prims: list[Primitive], T: torch.Tensor, normal: dict, unsolved: torch.Tensor, dofs: list[int],
           damping: float, step_scale: float) -> tuple[torch.Tensor, float, torch.Tensor]:
    """The damped steps of the bodies with normal equations ``normal`` {m: (H, g, w)}: poses
    (M, 4, 4), the largest step component, each body's (M,) (``StepResult.body_step``)."""
    T_new = T.clone()
    step_norm = 0.0
    body_step = unsolved.clone()
    for m, (H, g, w) in normal.items():
        delta = _solve(prims[m], T[m], H, g, w, dofs, damping, step_scale)
        if len(dofs) == 6:
            xi = delta
        else:
            xi = torch.zeros(6, dtype=T.dtype)
            xi[dofs] = delta
        # geometry_torch.perturb(T[m], xi) written into T_new (its last row stays (0, 0, 0, 1))
        T_new[m, :3, :3] = so3_exp(xi[3:]) @ T[m, :3, :3]
        T_new[m, :3, 3] = T[m, :3, 3] + xi[:3]
        body_step[m] = float(delta.abs().max())
        step_norm = max(step_norm, float(body_step[m]))
    return T_new, step_norm, body_step
