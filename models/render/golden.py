"""Golden-section search along rays, shared by the primitives' and the meshes' ray margins."""
from __future__ import annotations

import numpy as np
import torch

_GOLDEN = 0.6180339887498949


def golden_section(f, lo: torch.Tensor, hi: torch.Tensor, iters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``iters`` golden-section steps of min f on [lo, hi] (elementwise, f unimodal there):
    f (N,) -> (N,); returns the final bracket (lo, hi)."""
    x1, x2 = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(iters):
        left = f1 < f2
        hi = torch.where(left, x2, hi)
        lo = torch.where(left, lo, x1)
        x2n = torch.where(left, x1, lo + _GOLDEN * (hi - lo))
        x1n = torch.where(left, hi - _GOLDEN * (hi - lo), x2)
        fn = f(torch.where(left, x1n, x2n))
        f1, f2 = torch.where(left, fn, f2), torch.where(left, f1, fn)
        x1, x2 = x1n, x2n
    return lo, hi


def golden_section_np(f, lo: np.ndarray, hi: np.ndarray, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """``golden_section`` in NumPy (the same float64 operations in the same order, so the same
    bracket): for callers without gradients, where a loop of small array operations costs
    several times less in NumPy than in torch."""
    x1, x2 = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(iters):
        left = f1 < f2
        hi = np.where(left, x2, hi)
        lo = np.where(left, lo, x1)
        x2n = np.where(left, x1, lo + _GOLDEN * (hi - lo))
        x1n = np.where(left, hi - _GOLDEN * (hi - lo), x2)
        fn = f(np.where(left, x1n, x2n))
        f1, f2 = np.where(left, fn, f2), np.where(left, f1, fn)
        x1, x2 = x1n, x2n
    return lo, hi
