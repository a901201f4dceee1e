"""Penalty contact at sampled points: ground plane z = h and a moving cylindrical tip.

Normal force: Hunt & Crossley (1975), f_n = k * depth * (1 + d * depth_rate), clipped
at 0 so a separating contact never pulls. Friction: Coulomb smoothed by the slip speed
(the regularised Coulomb law that TDS/NeuralSim uses in its penalty model),
f_t = -(mu f_n + g) * v_t / sqrt(|v_t|^2 + v_s^2), where g is the optional neural
"contact_friction" augmentation. Contacts act on the points only (no rolling
resistance, no body-body collision).
"""
from __future__ import annotations

import torch

from .model import Control


def _penalty(depth, rate, normal, v_rel, k, d, mu, slip_velocity, extra_friction):
    """depth, rate: (B, P); normal, v_rel: (B, P, 3); k, d, mu: (B,) -> force (B, P, 3), features."""
    pen = depth.clamp(min=0.0)
    fn = (k[:, None] * pen * (1.0 + d[:, None] * rate)).clamp(min=0.0)
    vn = (v_rel * normal).sum(-1, keepdim=True)
    vt = v_rel - vn * normal
    slip2 = (vt * vt).sum(-1)
    feats = {"contact/depth": depth, "contact/rate": rate, "contact/normal_force": fn,
             "contact/slip": torch.sqrt(slip2 + 1e-12)}
    mag = mu[:, None] * fn
    if extra_friction is not None:
        g = extra_friction(feats)                      # (B, P)
        mag = mag + g * (depth > 0).to(g.dtype)
    ft = -(mag / torch.sqrt(slip2 + slip_velocity ** 2))[..., None] * vt
    return fn[..., None] * normal + ft


def point_forces(model, x, xdot, control: Control | None, friction_net=None) -> torch.Tensor:
    """World forces (B, P, 3) on contact points at world positions x with velocities xdot (B, P, 3)."""
    m = model
    k, d, mu = m.contact_stiffness, m.contact_damping, m.contact_friction
    F = torch.zeros_like(x)
    if m.ground:
        n = torch.zeros_like(x)
        n[..., 2] = 1.0
        F = F + _penalty(m.ground_height - x[..., 2], -xdot[..., 2], n, xdot, k, d, mu,
                         m.slip_velocity, friction_net)
    if has_tip(m, control):
        a = torch.tensor(m.tip_axis, dtype=x.dtype, device=x.device)
        a = a / a.norm()
        rel = x - control.tip_pos[:, None, :]
        along = (rel * a).sum(-1, keepdim=True)
        radial = rel - along * a
        dist = torch.sqrt((radial * radial).sum(-1) + 1e-12)
        n = radial / dist[..., None]
        v_rel = xdot - (control.tip_vel[:, None, :] if control.tip_vel is not None else 0.0)
        inside = (along[..., 0].abs() <= m.tip_half_length).to(x.dtype)
        depth = (m.tip_radius - dist) * inside - (1.0 - inside)
        mu_tip = mu if m.tip_friction is None else m.tip_friction
        F = F + _penalty(depth, -(v_rel * n).sum(-1), n, v_rel, k, d, mu_tip, m.slip_velocity, friction_net)
    return F


def has_tip(model, control) -> bool:
    return control is not None and control.tip_pos is not None and model.tip_radius > 0


def has_contact(model, control) -> bool:
    return bool(model.contact_body) and (model.ground or has_tip(model, control))


def contact_wrenches(prep, kin, control: Control | None, friction_net=None) -> torch.Tensor | None:
    """Spatial forces (B, N, 6) [torque; force] on bodies in body frames, or None without contact."""
    m = prep.model
    if not has_contact(m, control):
        return None
    idx = list(m.contact_body)
    R = torch.stack(kin.R, 1)[:, idx]                  # (B, P, 3, 3)
    p = torch.stack(kin.p, 1)[:, idx]
    v = torch.stack(kin.v, 1)[:, idx]
    cb = m.contact_points                               # (P, 3)
    p_world = p + (R @ cb[..., None])[..., 0]
    v_body = v[..., 3:] + torch.cross(v[..., :3], cb.expand_as(v[..., 3:]), dim=-1)
    v_world = (R @ v_body[..., None])[..., 0]
    F = point_forces(m, p_world, v_world, control, friction_net)
    F_body = (R.transpose(-1, -2) @ F[..., None])[..., 0]
    torque = torch.cross(cb.expand_as(F_body), F_body, dim=-1)
    w = torch.cat([torque, F_body], -1)                 # (B, P, 6)
    out = torch.zeros(w.shape[0], m.num_bodies, 6, dtype=w.dtype, device=w.device)
    return out.index_add(1, torch.as_tensor(idx, device=w.device), w)
