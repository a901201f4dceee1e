"""Spatial algebra (Featherstone 2008, ch. 2) and rotations, batched over leading dims.

Spatial motion and force vectors are 6-vectors [angular; linear]. A motion transform
``X`` (..., 6, 6) built from (E, r) maps motion vectors from frame A to frame B, where
E (3, 3) maps A coordinates to B coordinates and r is B's origin in A coordinates
(Featherstone Eq. 2.24: X = [[E, 0], [-E r^, E]]). Force vectors transform with
``X^-T``; the transpose ``X^T`` maps forces from B back to A.

Quaternions are xyzw (Pinocchio, ROS, ``joint_positions.npz``).
"""
from __future__ import annotations

import torch

from vid2sim.models.geometry_torch import skew


def motion_transform(E: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """E: (..., 3, 3), r: (..., 3) -> X (..., 6, 6) = [[E, 0], [-E r^, E]]."""
    E, r = torch.broadcast_tensors(E, r.unsqueeze(-1).expand(r.shape + (3,)))
    r = r[..., 0]
    top = torch.cat([E, torch.zeros_like(E)], -1)
    bot = torch.cat([-E @ skew(r), E], -1)
    return torch.cat([top, bot], -2)


def crm(v: torch.Tensor) -> torch.Tensor:
    """Motion cross-product matrix: v: (..., 6) -> (..., 6, 6), crm(v) @ m = v x m."""
    w, u = skew(v[..., :3]), skew(v[..., 3:])
    z = torch.zeros_like(w)
    return torch.cat([torch.cat([w, z], -1), torch.cat([u, w], -1)], -2)


def cross_motion(v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """v x m for motion vectors (..., 6) (Featherstone Eq. 2.31)."""
    w, u = v[..., :3], v[..., 3:]
    mw, mu = m[..., :3], m[..., 3:]
    return torch.cat([torch.cross(w, mw, dim=-1), torch.cross(w, mu, dim=-1) + torch.cross(u, mw, dim=-1)], -1)


def cross_force(v: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """v x* f for a motion vector v and force vector f (..., 6) (Featherstone Eq. 2.32)."""
    w, u = v[..., :3], v[..., 3:]
    fn, ff = f[..., :3], f[..., 3:]
    return torch.cat([torch.cross(w, fn, dim=-1) + torch.cross(u, ff, dim=-1), torch.cross(w, ff, dim=-1)], -1)


def spatial_inertia(mass: torch.Tensor, com: torch.Tensor, inertia_com: torch.Tensor) -> torch.Tensor:
    """Rigid-body inertia about the body origin (Featherstone Eq. 2.63).

    mass: (...,), com: (..., 3), inertia_com: (..., 3, 3) about the COM -> (..., 6, 6).
    """
    C = skew(com)
    m = mass[..., None, None]
    eye = torch.eye(3, dtype=com.dtype, device=com.device).expand(C.shape)
    top = torch.cat([inertia_com + m * (C @ C.transpose(-1, -2)), m * C], -1)
    bot = torch.cat([m * C.transpose(-1, -2), m * eye], -1)
    return torch.cat([top, bot], -2)


def axis_angle_to_rot(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rodrigues: axis (..., 3) unit, angle (...) -> R (..., 3, 3) rotating by +angle about axis."""
    K = skew(axis)
    s, c = torch.sin(angle)[..., None, None], torch.cos(angle)[..., None, None]
    eye = torch.eye(3, dtype=K.dtype, device=K.device)
    # under torch.compile K^2 as multiply-and-sum, fused into the step's kernels (not an extern matmul)
    K2 = (K[..., :, :, None] * K[..., None, :, :]).sum(-2) if torch.compiler.is_compiling() else K @ K
    return eye + s * K + (1 - c) * K2


def quat_to_rot(q: torch.Tensor) -> torch.Tensor:
    """q: (..., 4) xyzw (need not be normalised; it is) -> R (..., 3, 3)."""
    q = q / q.norm(dim=-1, keepdim=True)
    x, y, z, w = q.unbind(-1)
    return torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
        2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
        2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1).reshape(q.shape[:-1] + (3, 3))


def rot_to_quat(R: torch.Tensor) -> torch.Tensor:
    """R: (..., 3, 3) -> q (..., 4) xyzw with w >= 0 (Shepperd's method, branch by largest)."""
    m = R
    t = m[..., 0, 0] + m[..., 1, 1] + m[..., 2, 2]
    cands = torch.stack([
        torch.stack([m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1], 1 + t], -1),
        torch.stack([1 + m[..., 0, 0] - m[..., 1, 1] - m[..., 2, 2], m[..., 0, 1] + m[..., 1, 0],
                     m[..., 0, 2] + m[..., 2, 0], m[..., 2, 1] - m[..., 1, 2]], -1),
        torch.stack([m[..., 0, 1] + m[..., 1, 0], 1 - m[..., 0, 0] + m[..., 1, 1] - m[..., 2, 2],
                     m[..., 1, 2] + m[..., 2, 1], m[..., 0, 2] - m[..., 2, 0]], -1),
        torch.stack([m[..., 0, 2] + m[..., 2, 0], m[..., 1, 2] + m[..., 2, 1],
                     1 - m[..., 0, 0] - m[..., 1, 1] + m[..., 2, 2], m[..., 1, 0] - m[..., 0, 1]], -1),
    ], -2)
    diag = torch.stack([t, m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]], -1)
    k = diag.argmax(-1)
    q = torch.take_along_dim(cands, k[..., None, None].expand(k.shape + (1, 4)), -2)[..., 0, :]
    q = q / q.norm(dim=-1, keepdim=True)
    return torch.where(q[..., 3:] < 0, -q, q)


def rpy_to_rot(rpy: torch.Tensor) -> torch.Tensor:
    """URDF roll-pitch-yaw (..., 3) -> R = Rz(yaw) Ry(pitch) Rx(roll) (..., 3, 3)."""
    r, p, y = rpy.unbind(-1)
    cr, sr, cp, sp, cy, sy = r.cos(), r.sin(), p.cos(), p.sin(), y.cos(), y.sin()
    return torch.stack([
        cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr,
        sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr,
        -sp, cp * sr, cp * cr], -1).reshape(rpy.shape[:-1] + (3, 3))


def rot_to_rpy(R: torch.Tensor) -> torch.Tensor:
    """Inverse of ``rpy_to_rot`` (..., 3, 3) -> (..., 3)."""
    pitch = torch.asin((-R[..., 2, 0]).clamp(-1, 1))
    roll = torch.atan2(R[..., 2, 1], R[..., 2, 2])
    yaw = torch.atan2(R[..., 1, 0], R[..., 0, 0])
    return torch.stack([roll, pitch, yaw], -1)


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product of xyzw quaternions (..., 4)."""
    ax, ay, az, aw = a.unbind(-1)
    bx, by, bz, bw = b.unbind(-1)
    return torch.stack([
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz], -1)
