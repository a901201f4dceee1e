"""Particle refinement by Gauss-Newton preconditioned Stein steps (CSVGD's last phase).

``svgd.run_svgd`` moves particles by Adam along the SVGD direction. On trajectory
likelihoods that is slow wherever two quantities trade against each other (on the
synthetic cartpole the slider damping trades against the start velocity along a valley
hundreds of times longer than wide); a Gauss-Newton metric follows such valleys.

Here each particle i steps by ``dx_i = M_i^-1 phi_i``, with its own Gauss-Newton metric
``M_i = J_r^T J_r + c J_g^T W J_g`` (residuals r of the log density ``-|r|^2 / 2``,
constraints g under the augmented-Lagrangian weights W; the caller's ``linearise`` computes
them, e.g. by finite differences, every ``refresh`` iterations) plus Levenberg-Marquardt
damping ``mu_i diag(M_i)``, and

    phi_i = grad F(x_i) + sum_j grad_{x_j} k(x_j, x_i) / sum_j k(x_j, x_i)

on the kernel coordinates (the model parameters), ``grad F(x_i)`` on the rest (shooting
states). k is the RBF kernel in the metric A = the particles' mean Schur complement of M on
the parameters (their precision with the other coordinates profiled out; Wang, Tang, Bajaj &
Liu 2019, SVGD with matrix-valued kernels), bandwidth by the median heuristic. An isolated
particle so takes a Levenberg-Marquardt step (Detommaso et al. 2018, "A Stein variational
Newton method", for the Newton scaling of Stein steps).

Two departures from SVGD (measurements: docs/decisions.md, "Settings and their measured
reasons"):
- The drive is each particle's own gradient, not SVGD's kernel-weighted mean of every
  particle's gradient: with the median-heuristic bandwidth a particle is pulled by particles
  thousands of nats below it, and under a Newton metric that pull is a huge step. The repulsion normalised by the kernel
  mass is the gradient of the log kernel density estimate at x_i, so the fixed points satisfy
  ``grad log p = grad log KDE``: the particle approximation of the repulsive-ensemble /
  kernel-density Wasserstein gradient flow (D'Angelo & Fortuin 2021), which approximates the
  posterior like SVGD's.
- The step length is Levenberg-Marquardt's: a step that lowers the augmented objective
  ``F = log p - W (lambda g + c g^2 / 2)`` by more than ``tol`` is rejected (its evaluation
  counts) and mu_i grows 10x; an accepted one lets mu_i shrink 3x. Parameter limits are kept
  by ``project`` (a Newton step along a coordinate that only a limit constrains is unbounded).
Constraints otherwise as in ``run_svgd``: modified differential method of multipliers, one
multiplier per particle and constraint, moved by their own Adam.

Written here because no library offers SVGD, let alone a constrained, preconditioned one.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from scipy.stats import chi2

from vid2sim.models.inference.svgd import DensityFn, SVGDTrace, rbf_kernel

Tensor = torch.Tensor
# x (N, D) -> (H (N, D, D): Gauss-Newton Hessians of -log p, J_g (N, C, D): constraint Jacobians)
LineariseFn = Callable[[Tensor], tuple[Tensor, Tensor]]


def damped_metrics(metric: Tensor, damping: Tensor) -> Tensor:
    """Per-particle metrics (N, D, D), symmetrised, with ``damping`` (N,) x their diagonal (and a
    tiny floor) added so that each is positive definite (Levenberg-Marquardt damping)."""
    m = 0.5 * (metric + metric.transpose(1, 2))
    diag = m.diagonal(dim1=1, dim2=2).clamp(min=0.0)
    floor = 1e-9 * diag.amax(1, keepdim=True).clamp(min=1e-12)
    return m + torch.diag_embed(damping[:, None] * diag + floor)


def profiled_metrics(metrics: Tensor, kernel_dims: int) -> Tensor:
    """Each metric's Schur complement on the kernel coordinates (their precision with the other
    coordinates profiled out). (N, D, D) -> (N, kd, kd)."""
    kd = kernel_dims
    mkk, mks, mss = metrics[:, :kd, :kd], metrics[:, :kd, kd:], metrics[:, kd:, kd:]
    if mss.shape[1]:
        mkk = mkk - mks @ torch.linalg.solve(mss, mks.transpose(1, 2))
    return mkk


def kernel_metric(metrics: Tensor, kernel_dims: int) -> Tensor:
    """The kernel coordinates' metric: the mean over particles of ``profiled_metrics``.
    (N, D, D) -> (kd, kd)."""
    a = profiled_metrics(metrics, kernel_dims).mean(0)
    return 0.5 * (a + a.T)


def preconditioned_direction(x: Tensor, grad: Tensor, metrics: Tensor, kernel_dims: int) -> Tensor:
    """The step of each particle (see the module docstring). x, grad (N, D), metrics (N, D, D)
    (positive definite) -> (N, D)."""
    kd = kernel_dims
    phi = grad.clone()
    if x.shape[0] > 1 and kd > 0:
        A = kernel_metric(metrics, kd)
        La = torch.linalg.cholesky_ex(A + 1e-12 * A.diagonal().max() * torch.eye(kd, dtype=A.dtype))[0]
        y = x[:, :kd] @ La                               # |y_i - y_j|^2 = (x_i - x_j)^T A (x_i - x_j)
        K, h = rbf_kernel(y)
        repulse = (K.sum(1, keepdim=True) * x[:, :kd] - K @ x[:, :kd]) @ A * (2.0 / h)
        phi[:, :kd] = grad[:, :kd] + repulse / K.sum(1, keepdim=True)
    return torch.linalg.solve(metrics, phi[:, :, None])[:, :, 0]


def run_stein_gauss_newton(density: DensityFn, linearise: LineariseFn, x0: Tensor, iterations: int,
                          kernel_dims: int, refresh: int = 10, c: float = 1.0,
                          constraint_weight: float | Tensor = 1.0, ramp: float = 0.0,
                          dual_lr: float = 0.05, damping: float = 1.0, tol: float | None = None,
                          stop_tol: float = 0.0, project: Callable[[Tensor], Tensor] | None = None,
                          callback: Callable[[int, Tensor, Tensor], None] | None = None
                          ) -> tuple[Tensor, Tensor, SVGDTrace, int]:
    """Run the preconditioned Stein steps from ``x0`` (N, D) for ``iterations`` batched
    evaluations of ``density`` (besides the first); ``linearise`` is called every ``refresh``
    iterations. Returns (x, log_prob, trace, number of linearisations). ``constraint_weight``,
    ``ramp``, ``c``: as ``run_svgd``; the multipliers move by their own Adam at ``dual_lr``;
    ``damping``: the first mu; ``project`` maps trial points back (e.g. into the limits).
    ``tol``: the decrease of F a step may cause and still be accepted (default: the number of
    kernel coordinates, in nats; SVGD's repulsion legitimately moves particles downhill).
    ``stop_tol`` > 0: stop once converged (``Convergence``); iterations run: ``len(trace.log_prob)``.
    """
    if refresh < 1:
        raise ValueError(f"refresh must be >= 1, got {refresh}")
    N, D = x0.shape
    kd = min(kernel_dims, D)
    tol = float(kd) if tol is None else tol
    trace = SVGDTrace()
    lam = lam_opt = None
    converged = Convergence(kd, refresh, stop_tol)

    def weight(it: int):
        w = constraint_weight
        return w * (0.01 ** max(0.0, 1.0 - it / (ramp * iterations)) if ramp > 0 else 1.0)

    def evaluate(x: Tensor, it: int):
        nonlocal lam, lam_opt
        x = x.detach().requires_grad_(True)
        logp, g = density(x)
        if g is None or g.shape[1] == 0:
            g = logp.new_zeros(N, 0)
        if lam is None:
            lam = torch.zeros_like(g.detach()).requires_grad_(True)
            lam_opt = torch.optim.Adam([lam], lr=dual_lr)
        coef = weight(it) * (lam.detach() + 0.5 * c * g)
        F = logp - (coef * g).sum(1)
        grad, = torch.autograd.grad(F.sum(), x)
        F = torch.where(~torch.isfinite(F), torch.full_like(F, -math.inf), F.detach())
        return F, torch.nan_to_num(grad.detach()), logp.detach(), g.detach()

    def objective(logp: Tensor, g: Tensor, it: int) -> Tensor:
        F = logp - (weight(it) * (lam.detach() * g + 0.5 * c * g * g)).sum(1)
        return torch.where(torch.isfinite(F), F, torch.full_like(F, -math.inf))

    x = x0.detach().clone()
    _, G, logp, g = evaluate(x, 0)
    mu = torch.full((N,), damping, dtype=x.dtype)   # Levenberg-Marquardt damping per particle
    H = None
    linearisations = 0
    for it in range(iterations):
        if it % refresh == 0 or H is None:
            H, Jg = linearise(x.clone())
            if Jg.shape[1]:
                H = H + c * (Jg.transpose(1, 2) * torch.as_tensor(weight(it), dtype=x.dtype)) @ Jg
            linearisations += 1
        step = preconditioned_direction(x, G, damped_metrics(H, mu), kd)
        trial = x + step if project is None else project(x + step)
        Ft, Gt, logpt, gt = evaluate(trial, it + 1)
        # judge both points by the same weights and multipliers
        ok = torch.isfinite(Ft) & (Ft >= objective(logp, g, it + 1) - tol)
        x, G, g = (torch.where(ok[:, None], new, old) for new, old in ((trial, x), (Gt, G), (gt, g)))
        logp = torch.where(ok, logpt, logp)
        mu = torch.where(ok, mu / 3.0, mu * 10.0).clamp(1e-9, 1e9)
        if g.shape[1]:
            lam_opt.zero_grad(set_to_none=False)
            lam.grad = -g
            lam_opt.step()
            trace.max_violation.append(float(g.abs().max()))
        trace.log_prob.append(float(logp.mean()))
        if callback is not None:
            callback(it, x, logp)
        if converged(logp) and linearisations >= 2:
            break
    _finish_trace(trace, x, g, H, mu, kd)
    return x, logp, trace, linearisations


class Convergence:
    """The early stop of ``run_stein_gauss_newton``: called with each iteration's log-probabilities
    (N,), true once, over the last ``span`` iterations, the best one rose by less than ``tol`` nats
    and no particle came within chi2_kd(0.999) / 2 of it (the converged set, as
    ``identifiability.converged`` takes it, did not grow): the rest of the budget would only move
    the converged particles about the mode. ``tol`` = 0: never."""

    def __init__(self, kd: int, span: int, tol: float):
        self.span, self.tol, self.nats = span, tol, 0.5 * float(chi2.ppf(0.999, kd))
        self.best: list[float] = []
        self.near: list[int] = []

    def __call__(self, logp: Tensor) -> bool:
        self.best.append(float(logp.max()))
        self.near.append(int((logp >= self.best[-1] - self.nats).sum()))
        b, n, k = self.best, self.near, self.span
        if self.tol <= 0 or len(b) <= k or not (math.isfinite(b[-1]) and math.isfinite(b[-1 - k])):
            return False
        return b[-1] - b[-1 - k] < self.tol and n[-1] <= n[-1 - k]


def _finish_trace(trace: SVGDTrace, x: Tensor, g: Tensor, H: Tensor | None, mu: Tensor, kd: int) -> None:
    """Record the final constraint violations (N, G) and, for N > 1 particles, the kernel covariance
    and each particle's undamped metric on the kernel coordinates (``kernel_metrics``)."""
    if g.shape[1]:
        trace.final_violation = g.abs().amax(1).tolist()
    if x.shape[0] > 1 and kd > 0 and H is not None:
        trace.kernel_covariance = kernel_covariance(x, damped_metrics(H, mu), kd).tolist()
        # each particle's own curvature (its Laplace precision), without the step's Levenberg-Marquardt damping
        trace.kernel_metrics = profiled_metrics(damped_metrics(H, torch.zeros_like(mu)), kd).tolist()


def kernel_covariance(x: Tensor, metrics: Tensor, kernel_dims: int) -> Tensor:
    """The covariance (kd, kd) of one kernel of ``preconditioned_direction`` at particles x (N, D):
    exp(-|y|^2 / h) with y = x La (La La^T = A) is a Gaussian of covariance (h / 2) A^-1 in x. The
    steps' fixed points satisfy grad log p = grad log (the particles' kernel density), so that
    density (the particles, each widened by this covariance), not the bare particles, approximates
    the posterior: the particles alone are narrower by about this covariance."""
    kd = kernel_dims
    A = kernel_metric(metrics, kd)
    A = A + 1e-12 * A.diagonal().max() * torch.eye(kd, dtype=A.dtype)
    La = torch.linalg.cholesky_ex(A)[0]
    _, h = rbf_kernel(x[:, :kd] @ La)
    return 0.5 * h * torch.linalg.inv(A)
