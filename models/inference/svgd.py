"""Stein variational gradient descent with equality constraints (the CSVGD engine).

Works on a generic batch of particles ``x: (N, D)`` and a function returning each
particle's log density and constraint residuals; it knows nothing about simulators.
The trajectory-specific parts (multiple shooting, limits) live in ``csvgd.py``.

- SVGD: Liu & Wang 2016, RBF kernel with the median heuristic ``h = med^2 / log N``.
- Constraints: the modified differential method of multipliers (Platt & Barr 1988),
  one multiplier per particle and constraint, as in Heiden et al. 2022 (CSVGD,
  dissertation Alg. 5):  x' = phi(x) - lambda dg/dx - c g dg/dx,  lambda' = g.
- Updates are scheduled by Adam (the direction above is fed to Adam as a gradient); the
  multipliers either take fixed-rate steps or have their own Adam (``dual``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

Tensor = torch.Tensor
# x (N, D) -> (log_prob (N,), constraints (N, C) or None)
DensityFn = Callable[[Tensor], tuple[Tensor, Tensor | None]]


def rbf_kernel(x: Tensor) -> tuple[Tensor, Tensor]:
    """x: (N, D) -> (K (N, N), h) with K_ij = exp(-|x_i - x_j|^2 / h), h by the median heuristic."""
    d2 = torch.cdist(x, x).pow(2)
    n = x.shape[0]
    if n > 1:
        off = d2[~torch.eye(n, dtype=torch.bool, device=x.device)]
        h = off.median() / math.log(n + 1)
    else:
        h = torch.ones((), dtype=x.dtype)
    h = torch.clamp(h, min=1e-12)
    return torch.exp(-d2 / h), h


def svgd_direction(x: Tensor, grad_logp: Tensor) -> Tensor:
    """The SVGD update phi(x_i) = 1/N sum_j [k(x_j, x_i) grad log p(x_j) + grad_{x_j} k(x_j, x_i)].

    x, grad_logp: (N, D) -> (N, D). Liu & Wang 2016, Alg. 1.
    """
    K, h = rbf_kernel(x)
    drive = K @ grad_logp
    repulse = (K.sum(1, keepdim=True) * x - K @ x) * (2.0 / h)
    return (drive + repulse) / x.shape[0]


@dataclass
class SVGDTrace:
    """Per-iteration diagnostics: mean log prob, max |constraint|, bandwidth."""

    log_prob: list[float] = field(default_factory=list)
    max_violation: list[float] = field(default_factory=list)
    final_violation: list[float] = field(default_factory=list)   # per particle, max |constraint| at the end
    kernel_covariance: list = field(default_factory=list)   # (kd, kd) covariance of one kernel at the end, where
                                                            # the particles' kernel density is the approximation
    kernel_metrics: list = field(default_factory=list)      # (N, kd, kd) each particle's metric on the kernel
                                                            # coordinates at the end (svgd_newton.profiled_metrics)


def run_svgd(density: DensityFn, x0: Tensor, iterations: int, lr: float = 0.01, kernel_dims: int | None = None,
             lr_final: float | None = None, c: float = 1.0, lr_multiplier: float = 1.0, constraint_weight: float | Tensor = 1.0,
             ramp: float = 0.0, project: Callable[[Tensor], Tensor] | None = None, use_kernel: bool = True,
             callback: Callable[[int, Tensor, Tensor], None] | None = None,
             dual: str = "sgd") -> tuple[Tensor, Tensor, SVGDTrace]:
    """Run (constrained) SVGD from ``x0: (N, D)``; returns (x (N, D), log_prob (N,), trace).

    Only the first ``kernel_dims`` coordinates enter the kernel (the model parameters);
    the rest (shooting states, nuisance variables) follow each particle's own gradient,
    so a high-dimensional nuisance part does not drown the kernel distance.
    ``constraint_weight`` (scalar or one per constraint, (C,)) multiplies the
    augmented-Lagrangian term so it is commensurate with the log density (e.g. what a unit
    of each constraint costs in observations). Multiplier update: ``dual="sgd"``,
    ``lambda += lr_multiplier * g``; ``dual="adam"``, gradient ascent on lambda by its own
    Adam at ``lr_multiplier`` times the particles' step size and schedule, so the multipliers
    move as fast as the particles can follow (a fixed rate is either negligible over a
    short run or, at 1, outruns the Adam-normalised primal steps and oscillates).
    The Adam step size decays geometrically from ``lr`` to ``lr_final`` (default: constant). ``ramp`` > 0 grows the constraint weight
    geometrically from 1 % to 100 % over that fraction of the iterations (continuation:
    shooting windows first fit their own data, then the defects are closed), instead of
    letting large initial defects dominate the first steps. ``use_kernel=False`` turns SVGD into independent
    gradient ascent (the Adam baseline). ``project`` maps x back after each step (e.g.
    clamping to limits, for the unconstrained baselines).
    """
    if dual not in ("sgd", "adam"):
        raise ValueError(f"dual must be 'sgd' or 'adam', got {dual!r}")
    x = x0.detach().clone().requires_grad_(True)
    kd = x.shape[1] if kernel_dims is None else kernel_dims
    opt = torch.optim.Adam([x], lr=lr)
    # geometric decay lr -> lr_final: late iterations refine instead of rattling at step size lr
    decay = (1.0 if lr_final is None else lr_final / lr) ** (1.0 / max(iterations - 1, 1))
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, decay)
    lam = None
    trace = SVGDTrace()
    logp = None
    for it in range(iterations):
        logp, g = density(x)
        grad_lp, = torch.autograd.grad(logp.sum(), x, retain_graph=g is not None)
        direction = grad_lp.clone()
        if use_kernel and x.shape[0] > 1:
            direction[:, :kd] = svgd_direction(x.detach()[:, :kd], grad_lp[:, :kd])
        if g is not None and g.shape[1] > 0:
            if lam is None:
                lam = torch.zeros_like(g.detach())
                if dual == "adam":
                    lam.requires_grad_(True)
                    dopt = torch.optim.Adam([lam], lr=lr * lr_multiplier)
                    dsched = torch.optim.lr_scheduler.ExponentialLR(dopt, decay)
            w = constraint_weight * (0.01 ** max(0.0, 1.0 - it / (ramp * iterations)) if ramp > 0 else 1.0)
            pen = (w * (lam.detach() * g + 0.5 * c * g * g)).sum()
            grad_pen, = torch.autograd.grad(pen, x)
            direction = direction - grad_pen
            if dual == "adam":
                dopt.zero_grad(set_to_none=False)
                lam.grad = -g.detach()
                dopt.step()
                dsched.step()
            else:
                lam = lam + lr_multiplier * g.detach()
            trace.max_violation.append(float(g.detach().abs().max()))
        trace.log_prob.append(float(logp.detach().mean()))
        opt.zero_grad(set_to_none=False)
        x.grad = -torch.nan_to_num(direction.detach(), nan=0.0, posinf=0.0, neginf=0.0)  # a diverged rollout stays put
        opt.step()
        sched.step()
        if project is not None:
            with torch.no_grad():
                x.copy_(project(x))
        if callback is not None:
            callback(it, x.detach(), logp.detach())
    with torch.no_grad():
        logp, g = density(x)
    if g is not None and g.shape[1] > 0:
        trace.final_violation = g.abs().amax(1).tolist()
    return x.detach(), logp.detach(), trace
