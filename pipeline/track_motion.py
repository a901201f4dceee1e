"""Track's motion model: each frame's start (and motion prior's mean) from the poses before it.

Per body a world twist per frame (dt, dw): the velocity, smoothed over frames
(``prior.velocity_smoothing``), plus ``prior.acceleration`` times the change between the last
two frame-to-frame motions (1: a constant-acceleration prediction; 0: constant velocity). A
swinging part accelerates every frame (a pendulum at 27 rad/s^2 and 30 fps turns 0.03 rad per
frame more than the frame before), so a constant-velocity start lags by that each frame and the
Gauss-Newton steps must make it up. The acceleration term is added only for a body moving faster
than ``moving_m`` or ``moving_rad`` a frame. A body's coordinate that the depth corrects by a fraction
g of the start's error a frame follows e(t+1) = (1 - g)(3 e(t) - 3 e(t-1) + e(t-2)) under the
constant-acceleration start, which grows and oscillates for g < 0.5 (|z| = 1.14 at g = 0.1, a
period of 8-16 frames), and e(t+1) = (1 - g)(2 e(t) - e(t-1)) under constant velocity, which decays
for every g (|z|^2 = 1 - g). So a part at rest, or barely moving, whose turn the depth barely
constrains keeps still. Components no shape can show (a rod's spin about its axis, a sphere's
rotation) are removed, so the prediction never carries a spin no frame can correct.
"""
from __future__ import annotations

import torch

from vid2sim.models.geometry_torch import orthonormalize, so3_exp, so3_log
from vid2sim.models.render import Primitive
from vid2sim.models.render.align import PLANAR_DOFS, free_basis


def predict(T_prev: torch.Tensor, velocity: torch.Tensor) -> torch.Tensor:
    """(M, 4, 4) poses one frame on from ``T_prev`` at world twists ``velocity`` (M, 6) = (dt, dw)."""
    T = T_prev.clone()
    T[:, :3, :3] = orthonormalize(so3_exp(velocity[:, 3:]) @ T_prev[:, :3, :3])
    T[:, :3, 3] = T_prev[:, :3, 3] + velocity[:, :3]
    return T


def frame_twist(T: torch.Tensor, T_prev: torch.Tensor) -> torch.Tensor:
    """(M, 6) per-frame world twist (dt, dw) from T_prev to T."""
    return torch.cat([T[:, :3, 3] - T_prev[:, :3, 3], so3_log(T[:, :3, :3] @ T_prev[:, :3, :3].transpose(1, 2))], -1)


def seen_twist(prims: list[Primitive], T: torch.Tensor, twist: torch.Tensor, planar: bool) -> torch.Tensor:
    """``twist`` (M, 6) without the components the shapes at poses T cannot show."""
    dofs = list(PLANAR_DOFS) if planar else list(range(6))
    out = twist.clone()
    for m, prim in enumerate(prims):
        if prim.kind not in ("box", "mesh"):
            B = free_basis(prim, T[m], dofs)
            out[m, dofs] = B @ (B.T @ twist[m, dofs])
    return out


class Motion:
    """Velocity and acceleration state of M bodies along one tracking direction (frames in order)."""

    def __init__(self, prims: list[Primitive], planar: bool, smoothing: float, acceleration: float,
                 moving_m: float = 0.0, moving_rad: float = 0.0):
        M = len(prims)
        self.prims, self.planar, self.b, self.acc = prims, planar, smoothing, acceleration
        self.moving_m, self.moving_rad = moving_m, moving_rad   # per frame: faster bodies get the acceleration term
        self.velocity = torch.zeros(M, 6, dtype=torch.float64)   # smoothed twist per frame
        self.dv = torch.zeros(M, 6, dtype=torch.float64)         # change of the last two frame twists
        self.last = torch.zeros(M, 6, dtype=torch.float64)       # last frame twist
        self.has_last = torch.zeros(M, dtype=torch.bool)         # last twist is a motion of a tracked body

    @classmethod
    def of(cls, prims: list[Primitive], planar: bool, prior) -> "Motion":
        """The motion model of ``prior`` (``track_config.TrackPrior``): its smoothing, its acceleration,
        and its stop-check speeds as the speeds above which a body gets the acceleration term."""
        return cls(prims, planar, prior.velocity_smoothing, prior.acceleration, prior.stop_check_m,
                   prior.stop_check_rad)

    def predict(self, T_prev: torch.Tensor) -> torch.Tensor:
        """(M, 4, 4) the next frame's predicted poses from this frame's ``T_prev``."""
        moving = (self.velocity[:, :3].norm(dim=1) > self.moving_m) | (self.velocity[:, 3:].norm(dim=1) > self.moving_rad)
        dv = self.dv * moving.unsqueeze(-1)
        v = self.velocity if self.acc == 0 else seen_twist(self.prims, T_prev, self.velocity + self.acc * dv, self.planar)
        return predict(T_prev, v)

    def stop(self, stopped: torch.Tensor) -> None:
        """Bodies ``stopped`` (M,) bool are at rest: no velocity, no acceleration."""
        self.velocity, self.dv = self.velocity.clone(), self.dv.clone()
        self.velocity[stopped], self.dv[stopped], self.has_last[stopped] = 0.0, 0.0, False

    def update(self, T: torch.Tensor, T_prev: torch.Tensor, moving: torch.Tensor) -> None:
        """After a frame tracked at T (from T_prev): bodies ``moving`` (M,) bool (tracked in both
        frames, not re-acquired) update their motion; the others restart at rest."""
        raw = frame_twist(T, T_prev)
        m = moving.unsqueeze(-1)
        vel = torch.where(m, self.b * self.velocity + (1 - self.b) * raw, torch.zeros_like(raw))
        self.velocity = seen_twist(self.prims, T, vel, self.planar)
        self.dv = torch.where(m & self.has_last.unsqueeze(-1), raw - self.last, torch.zeros_like(raw))
        self.last = torch.where(m, raw, torch.zeros_like(raw))
        self.has_last = moving.clone()
