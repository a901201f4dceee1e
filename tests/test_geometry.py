"""The numpy (``models.geometry``) and torch (``models.geometry_torch``) SE(3)/SO(3) helpers
agree, and the plane basis follows its documented rule."""
from __future__ import annotations

import numpy as np
import torch
from scipy.spatial.transform import Rotation

from vid2sim.models import geometry, geometry_torch


def _normals(rng, n=200):
    """Random unit normals plus some within a few degrees of world x (the rule's switch)."""
    v = rng.normal(size=(n, 3))
    near_x = np.array([1.0, 0, 0]) + 0.05 * rng.normal(size=(20, 3))
    out = np.concatenate([v, near_x, [[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [-1.0, 0, 0]]])
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_plane_basis_numpy_and_torch_agree_and_follow_the_rule():
    for n in _normals(np.random.default_rng(0)):
        u, v = geometry.plane_basis(n)
        ut, vt = geometry_torch.plane_basis(torch.tensor(n, dtype=torch.float64))
        assert np.abs(ut.numpy() - u).max() < 1e-12 and np.abs(vt.numpy() - v).max() < 1e-12
        assert np.abs(np.stack([u, v, n]) @ np.stack([u, v, n]).T - np.eye(3)).max() < 1e-12  # orthonormal
        assert np.abs(np.cross(u, v) - n).max() < 1e-12  # (u, v, n) right-handed
        ref = np.eye(3)[0] if abs(n[0]) < 0.9 else np.eye(3)[1]
        proj = ref - (ref @ n) * n
        assert np.abs(u - proj / np.linalg.norm(proj)).max() < 1e-12  # u: the reference projected


def test_skew_is_the_cross_product_in_both():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(5, 4, 3)), rng.normal(size=(5, 4, 3))
    want = np.cross(a, b)
    assert np.abs(np.einsum("...ij,...j->...i", geometry.skew(a), b) - want).max() < 1e-12
    got_t = (geometry_torch.skew(torch.from_numpy(a)) @ torch.from_numpy(b).unsqueeze(-1)).squeeze(-1)
    assert np.abs(got_t.numpy() - want).max() < 1e-12


def test_so3_exp_and_log_agree_with_scipy_in_both():
    rng = np.random.default_rng(2)
    axes = rng.normal(size=(300, 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    w = axes * rng.uniform(1e-9, np.pi - 1e-3, (300, 1))
    R = Rotation.from_rotvec(w).as_matrix()
    assert np.abs(geometry.exp_so3(w) - R).max() < 1e-12
    assert np.abs(geometry_torch.so3_exp(torch.from_numpy(w)).numpy() - R).max() < 1e-12
    assert np.abs(geometry.log_so3(R) - w).max() < 1e-9
    assert np.abs(geometry_torch.so3_log(torch.from_numpy(R)).numpy() - w).max() < 1e-6  # arccos near pi
