"""Metrics for parameter estimates and trajectory sets (dissertation App. A.1.4).

- ``nmae``: mean absolute error of an estimate against the truth, each parameter
  divided by the width of its limits.
- ``knn_kl``: k-nearest-neighbour estimate of KL(P || Q) from samples (Wang, Kulkarni &
  Verdu 2009), k = 3; trajectories are flattened to vectors.
- ``mmd``: maximum mean discrepancy with an RBF kernel (median-heuristic bandwidth over
  the pooled samples), unbiased estimate (Gretton et al. 2012).
"""
from __future__ import annotations

import math

import numpy as np
import torch


def nmae(estimate, truth, lower, upper) -> float:
    """estimate, truth, lower, upper: (P,) -> mean |estimate - truth| / (upper - lower)."""
    e, t, lo, hi = (np.asarray(v, float) for v in (estimate, truth, lower, upper))
    return float(np.mean(np.abs(e - t) / (hi - lo)))


def _flat(x) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(x), dtype=torch.float64)
    return x.reshape(x.shape[0], -1)


def knn_kl(p_samples, q_samples, k: int = 3) -> float:
    """KL(P || Q) from p_samples (n, ...) and q_samples (m, ...); needs n > k and m >= k.

    D = d/n sum_i log(nu_k(i) / rho_k(i)) + log(m / (n - 1)), rho_k: distance from x_i to
    its k-th neighbour among the other P samples, nu_k: to its k-th neighbour in Q.
    """
    x, y = _flat(p_samples), _flat(q_samples)
    n, d = x.shape
    m = y.shape[0]
    if n <= k or m < k:
        raise ValueError(f"knn_kl needs more than k={k} samples of P and at least k of Q, got {n} and {m}")
    dxx = torch.cdist(x, x)
    dxx.fill_diagonal_(math.inf)
    rho = dxx.kthvalue(k, 1).values.clamp(min=1e-12)
    nu = torch.cdist(x, y).kthvalue(k, 1).values.clamp(min=1e-12)
    return float(d / n * torch.log(nu / rho).sum() + math.log(m / (n - 1)))


def mmd(p_samples, q_samples) -> float:
    """Unbiased squared MMD between samples (n, ...) and (m, ...), RBF kernel, median bandwidth."""
    x, y = _flat(p_samples), _flat(q_samples)
    z = torch.cat([x, y])
    d2 = torch.cdist(z, z).pow(2)
    n, m = x.shape[0], y.shape[0]
    off = d2[~torch.eye(n + m, dtype=torch.bool)]
    h = off.median().clamp(min=1e-12)
    K = torch.exp(-d2 / h)
    kxx, kyy, kxy = K[:n, :n], K[n:, n:], K[:n, n:]
    sxx = (kxx.sum() - kxx.diagonal().sum()) / (n * (n - 1))
    syy = (kyy.sum() - kyy.diagonal().sum()) / (m * (m - 1))
    return float(sxx + syy - 2 * kxy.mean())


def trajectory_metrics(real, sim, k: int = 3) -> dict[str, float]:
    """The App. A.1.4 set: KL both ways and MMD between real (n, T, O) and simulated (m, T, O) sets."""
    return {"kl_real_sim": knn_kl(real, sim, k), "kl_sim_real": knn_kl(sim, real, k), "mmd": mmd(real, sim)}
