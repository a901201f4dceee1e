"""SE(3)/SO(3) and plane-basis helpers in torch (batched over leading dimensions, differentiable).

The torch twin of ``vid2sim.models.geometry`` (numpy), with the same conventions and the
same plane-basis rule (documented there); the renderer, the tracker and the simulator
use these where gradients flow.
"""
from __future__ import annotations

import torch

from vid2sim.models.geometry import PLANE_REF_SWITCH


def skew(v: torch.Tensor) -> torch.Tensor:
    """v: (..., 3) -> (..., 3, 3) with skew(v) @ u = v x u."""
    x, y, z = v.unbind(-1)
    o = torch.zeros_like(x)
    return torch.stack([o, -z, y, z, o, -x, -y, x, o], -1).reshape(v.shape[:-1] + (3, 3))


def plane_basis(n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """n: (3,) plane normal -> in-plane unit vectors (u, v) with (u, v, n) right-handed
    (``vid2sim.models.geometry.plane_basis``'s rule; the choice of reference is not differentiated)."""
    n = n / n.norm()
    e = torch.zeros_like(n)
    e[0 if abs(float(n[0].detach())) < PLANE_REF_SWITCH else 1] = 1.0
    t1 = e - (e @ n) * n
    t1 = t1 / t1.norm()
    return t1, torch.cross(n, t1, dim=-1)


def so3_exp(w: torch.Tensor) -> torch.Tensor:
    """w: (..., 3) rotation vector -> (..., 3, 3) rotation (Rodrigues; series near 0 keeps gradients finite)."""
    th2 = (w * w).sum(-1, keepdim=True).unsqueeze(-1)
    th = th2.clamp(min=1e-24).sqrt()
    small = th2 < 1e-8
    a = torch.where(small, 1 - th2 / 6, torch.sin(th) / th)
    b = torch.where(small, 0.5 - th2 / 24, (1 - torch.cos(th)) / th2.clamp(min=1e-24))
    K = skew(w)
    eye = torch.eye(3, dtype=w.dtype).expand(K.shape)
    return eye + a * K + b * (K @ K)


def compose(R: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """R: (..., 3, 3), t: (..., 3) -> (..., 4, 4)."""
    T = torch.zeros(*R.shape[:-2], 4, 4, dtype=R.dtype)
    T = T.clone()
    top = torch.cat([R, t.unsqueeze(-1)], -1)
    bottom = torch.zeros(*R.shape[:-2], 1, 4, dtype=R.dtype)
    bottom[..., 0, 3] = 1.0
    return torch.cat([top, bottom], -2)


def perturb(T0: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
    """T0: (..., 4, 4), xi: (..., 6) = (v, w) world-frame twist -> exp(w) R0, t0 + v.

    Rotation about the body's own origin, expressed in world axes (left perturbation of R).
    """
    R = so3_exp(xi[..., 3:]) @ T0[..., :3, :3]
    return compose(R, T0[..., :3, 3] + xi[..., :3])


def orthonormalize(R: torch.Tensor) -> torch.Tensor:
    """Nearest rotation (polar decomposition by SVD) of (..., 3, 3) near-rotations.

    Composing predicted rotations frame after frame (R_t R_{t-1}^T R_t) amplifies
    rounding off SO(3) geometrically; projecting each prediction keeps it at 1e-16.
    """
    U, _, Vh = torch.linalg.svd(R)
    D = torch.ones(*R.shape[:-2], 3, dtype=R.dtype)
    D[..., 2] = torch.sign(torch.linalg.det(U @ Vh))
    return U @ (D.unsqueeze(-1) * Vh)


def so3_log(R: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3) rotation -> (..., 3) rotation vector (angles below pi - 1e-6)."""
    cos = ((R[..., 0, 0] + R[..., 1, 1] + R[..., 2, 2] - 1) / 2).clamp(-1.0, 1.0)
    th = torch.arccos(cos)
    v = torch.stack([R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]], -1)
    scale = torch.where(th < 1e-6, 0.5 + th**2 / 12, th / (2 * torch.sin(th).clamp(min=1e-12)))
    return v * scale.unsqueeze(-1)
