"""Golden-section search along rays, shared by the primitives' and the meshes' ray margins."""
from __future__ import annotations

import numpy as np
import torch

_GOLDEN = 0.6180339887498949


def golden_section(f, lo, hi, iters: int):
    """``iters`` golden-section steps of min f on [lo, hi] (elementwise, f unimodal there):
    f (N,) -> (N,); returns the final bracket (lo, hi). ``lo``, ``hi`` torch tensors or NumPy
    arrays (the same float64 operations in the same order, so the same bracket): NumPy for
    callers without gradients, where a loop of small array operations costs several times less."""
    where = np.where if isinstance(lo, np.ndarray) else torch.where
    x1, x2 = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(iters):
        left = f1 < f2
        hi = where(left, x2, hi)
        lo = where(left, lo, x1)
        x2n = where(left, x1, lo + _GOLDEN * (hi - lo))
        x1n = where(left, hi - _GOLDEN * (hi - lo), x2)
        fn = f(where(left, x1n, x2n))
        f1, f2 = where(left, fn, f2), where(left, f1, fn)
        x1, x2 = x1n, x2n
    return lo, hi
