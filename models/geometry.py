"""SE(3)/SO(3) and plane-basis helpers (numpy, float64, batched over leading dimensions).

Homogeneous transforms are ``(..., 4, 4)`` arrays, rotations ``(..., 3, 3)``, rotation
vectors ``(..., 3)`` (axis times angle, radians). ``vid2sim.models.geometry_torch`` holds
the torch versions the renderer, tracker and simulator differentiate through; the two
follow the same rules (``tests/test_geometry.py`` checks that they agree).

Plane-basis rule (planar joints: their x/y coordinates in ``joint_positions.npz``, the
exported URDF's prismatic pair, the simulator's planar motion subspace): for a unit
normal n, u is world x projected into the plane and normalised, or world y when
|n_x| >= 0.9 (n within about 25 deg of x); v = n x u, so (u, v, n) is right-handed.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation


def inv(T: np.ndarray) -> np.ndarray:
    """T: (..., 4, 4) rigid transforms -> their inverses."""
    R = T[..., :3, :3]
    out = np.zeros_like(T)
    Rt = np.swapaxes(R, -1, -2)
    out[..., :3, :3] = Rt
    out[..., :3, 3] = -np.einsum("...ij,...j->...i", Rt, T[..., :3, 3])
    out[..., 3, 3] = 1.0
    return out


def make(R: np.ndarray, p: np.ndarray) -> np.ndarray:
    """R: (..., 3, 3), p: (..., 3) -> (..., 4, 4)."""
    R, p = np.asarray(R, float), np.asarray(p, float)
    shape = np.broadcast_shapes(R.shape[:-2], p.shape[:-1])
    T = np.zeros(shape + (4, 4))
    T[..., :3, :3] = R
    T[..., :3, 3] = p
    T[..., 3, 3] = 1.0
    return T


def log_so3(R: np.ndarray) -> np.ndarray:
    """R: (..., 3, 3) -> rotation vectors (..., 3) (angle in [0, pi]).

    Closed form (vee of the skew part scaled by angle / sin) where it is well
    conditioned, scipy's quaternion route near pi."""
    R = np.asarray(R, float)
    v = 0.5 * np.stack([R[..., 2, 1] - R[..., 1, 2], R[..., 0, 2] - R[..., 2, 0], R[..., 1, 0] - R[..., 0, 1]], -1)
    c = np.clip((np.trace(R, axis1=-2, axis2=-1) - 1) / 2, -1.0, 1.0)
    s = np.linalg.norm(v, axis=-1)
    th = np.arctan2(s, c)
    scale = np.where(s > 1e-12, th / np.where(s > 1e-12, s, 1.0), 1.0 + s**2 / 6)
    out = v * scale[..., None]
    bad = c < -0.9  # angle above ~154 deg: sin small, use the robust route
    if np.any(bad):
        out[bad] = Rotation.from_matrix(R[bad].reshape(-1, 3, 3)).as_rotvec()
    return out


def exp_so3(w: np.ndarray) -> np.ndarray:
    """w: (..., 3) rotation vectors -> (..., 3, 3)."""
    w = np.asarray(w, float)
    return Rotation.from_rotvec(w.reshape(-1, 3)).as_matrix().reshape(w.shape[:-1] + (3, 3))


def rot_axis(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Rodrigues: axis (3,) unit, angle (T,) -> (T, 3, 3)."""
    s = np.asarray(axis, float)
    a = np.asarray(angle, float)[..., None, None]
    K = skew(s)
    return np.eye(3) + np.sin(a) * K + (1 - np.cos(a)) * (K @ K)


def skew(v: np.ndarray) -> np.ndarray:
    """v: (..., 3) -> (..., 3, 3) with skew(v) @ u = v x u."""
    v = np.asarray(v, float)
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    o = np.zeros_like(x)
    return np.stack([o, -z, y, z, o, -x, -y, x, o], -1).reshape(v.shape[:-1] + (3, 3))


PLANE_REF_SWITCH = 0.9  # |n_x| at and above which the plane basis starts from world y instead of world x


def plane_basis(normal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """normal: (3,) -> in-plane unit vectors (u, v) (3,) each, with u x v = n (module docstring's rule)."""
    n = np.asarray(normal, float) / np.linalg.norm(normal)
    ref = np.array([1.0, 0, 0]) if abs(n[0]) < PLANE_REF_SWITCH else np.array([0, 1.0, 0])
    u = ref - n * (ref @ n)
    u /= np.linalg.norm(u)
    return u, np.cross(n, u)


def chordal_mean(R: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """R: (N, 3, 3) -> the rotation closest (Frobenius) to their (weighted) mean."""
    M = np.einsum("n,nij->ij", np.ones(len(R)) if w is None else w, R)
    U, _, Vt = np.linalg.svd(M)
    D = np.diag([1.0, 1.0, np.sign(np.linalg.det(U @ Vt))])
    return U @ D @ Vt


def mean_pose(T: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """T: (N, 4, 4) -> chordal-mean rotation and mean translation."""
    w = np.ones(len(T)) if w is None else np.asarray(w, float)
    p = (w[:, None] * T[:, :3, 3]).sum(0) / max(w.sum(), 1e-12)
    return make(chordal_mean(T[:, :3, :3], w), p)


def to_xyzquat(T: np.ndarray) -> np.ndarray:
    """T: (N, 4, 4) -> (N, 7) x, y, z, qx, qy, qz, qw."""
    q = Rotation.from_matrix(T[:, :3, :3]).as_quat()
    return np.concatenate([T[:, :3, 3], q], axis=1)


def from_xyzquat(x: np.ndarray) -> np.ndarray:
    """x: (N, 7) x, y, z, qx, qy, qz, qw -> (N, 4, 4)."""
    x = np.asarray(x, float)
    return make(Rotation.from_quat(x[:, 3:]).as_matrix(), x[:, :3])


def rotation_angle(R: np.ndarray) -> np.ndarray:
    """R: (..., 3, 3) -> rotation angle (...,) in radians, numerically stable."""
    return np.linalg.norm(log_so3(R), axis=-1)
