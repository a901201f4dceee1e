"""csvgd's second phase: Gauss-Newton-preconditioned SVGD within a rollout budget, and the choice
between the multiple-shooting particles and the polished single-shooting ones.

Particles are rows x (N, P + W*S): unit parameters, then the window start states divided by
``Problem.state_scale`` (``methods`` documents the phases)."""
from __future__ import annotations

import logging
import math
import time

import torch

from vid2sim.models.inference.problem import Problem, Shooting
from vid2sim.models.inference.svgd_newton import run_stein_gauss_newton

log = logging.getLogger("vid2sim.models.inference.methods")
Tensor = torch.Tensor


def particles_of(problem: Problem, sh: Shooting, x: Tensor) -> tuple[Tensor, Tensor]:
    """x (N, P + W*S) = (unit parameters, window starts / scale) -> physical (N, P), window starts (N, W, S)
    (the guessed first-window states where the problem does not estimate them)."""
    P, S = problem.num_params, problem.state_dim
    theta = problem.to_physical(x[:, :P].clamp(0.0, 1.0))
    starts = x[:, P:].reshape(x.shape[0], sh.num_windows, S) * problem.state_scale
    if not problem.estimate_start:
        starts = torch.where(sh.first[None, :, None], sh.guess[None], starts)
    return theta, starts


def keep_multiple_shooting(problem: Problem, ms_sh: Shooting, ms_x: Tensor, sh: Shooting, x: Tensor,
                            trace: dict) -> tuple[Tensor, Tensor, Tensor] | None:
    """(theta (N, P), start (N, K, S), score (N,)) of the multiple-shooting particles ``ms_x`` when
    they score higher on the windows ``ms_sh`` than the single-shooting particles ``x`` (``sh``),
    else None; the scores go to ``trace["phases"]``."""
    theta_ms, starts_ms = particles_of(problem, ms_sh, ms_x)
    s_ms, s_ss = phase_scores(problem, ms_sh, theta_ms, starts_ms, *particles_of(problem, sh, x))
    keep = "multiple" if float(s_ms.max()) > float(s_ss.max()) else "single"
    trace["phases"] = {"multiple_shooting": float(s_ms.max()), "single_shooting": float(s_ss.max()), "kept": keep}
    log.info("csvgd: windowed log-likelihood, multiple shooting %.2f, single shooting %.2f: kept %s",
             float(s_ms.max()), float(s_ss.max()), keep)
    return (theta_ms, starts_ms[:, ms_sh.first], s_ms) if keep == "multiple" else None


def phase_scores(problem: Problem, sh: Shooting, theta_ms: Tensor, starts_ms: Tensor, theta_ss: Tensor,
                  starts_ss: Tensor) -> tuple[Tensor, Tensor]:
    """The log-likelihood on the windows ``sh`` that each phase's particles reach, (N,) each.

    Multiple shooting (theta_ms (N, P), starts_ms (N, W, S)): the windows' log-likelihood minus
    what closing its defects would cost, ``0.5 sum w d^2`` (d in ``state_scale`` units, w the
    Gauss-Newton price of a start error, ``Shooting.start_weights`` at its best particle).
    Single shooting (theta_ss, starts_ss (N, K, S), one start per trajectory): its own rollout cut
    into the same windows (no defects), i.e. its single-shooting log-likelihood on those samples.
    Costs about 3 N + S + 1 rollouts."""
    S = problem.state_dim
    with torch.no_grad():
        ll, _, defects = sh.evaluate(theta_ms, starts_ms)
        w = sh.start_weights(theta_ms[int(torch.nan_to_num(ll, nan=-math.inf).argmax())]).clamp(min=0.0)
        s_ms = ll - 0.5 * (defects * defects * w).sum((1, 2))
        states = {k: problem.simulate(theta_ss, starts_ss[:, k], problem.observations[k].shape[0])[..., :S]
                  for k in range(sh.num_traj)}
        starts = torch.stack([states[int(k)][:, int(b)] for k, b in zip(sh.traj, sh.start)], 1)
        s_ss, _, _ = sh.evaluate(theta_ss, starts)
    return torch.nan_to_num(s_ms, nan=-math.inf), torch.nan_to_num(s_ss, nan=-math.inf)


def linearisation(problem: Problem, sh: Shooting, h: float = 1e-5):
    """x (N, D) = (unit parameters, window starts / scale) per particle -> the Gauss-Newton
    Hessian of each particle's negative multiple-shooting log-likelihood (N, D, D; of a mixture
    of trajectories, the sum of theirs weighed by their responsibilities) and the
    Jacobian of its constraints (defects, then limits; (N, C, D)), by one-sided finite
    differences: N (D + 1) rollouts of every window in one batched simulator call."""
    P, W, S = problem.num_params, sh.num_windows, problem.state_dim

    def linearise(x: Tensor) -> tuple[Tensor, Tensor]:
        N, D = x.shape
        x = x.clone()
        x[:, :P] = x[:, :P].clamp(0.0, 1.0)
        steps = torch.full((N, D), h, dtype=x.dtype)
        steps[:, :P] = torch.where(x[:, :P] + h > 1.0, -h, h)
        X = x[:, None].repeat(1, D + 1, 1)
        X[:, 1:] += torch.diag_embed(steps)
        X = X.reshape(N * (D + 1), D)
        u = X[:, :P]
        with torch.no_grad():
            r, defects = sh.residuals_and_defects(problem.to_physical(u.clamp(0.0, 1.0)),
                                                  X[:, P:].reshape(-1, W, S) * problem.state_scale)
        g = torch.cat([defects.flatten(1), torch.relu(-u) + torch.relu(u - 1.0)], 1).reshape(N, D + 1, -1)
        r = r.reshape(N, D + 1, W, -1)
        if problem.combine == "mixture" and sh.num_traj > 1:
            # the mixture's curvature: each trajectory's weighed by its responsibility at x
            wll = -0.5 * (r[:, 0] ** 2).sum(2)                                        # (N, W)
            ll_k = torch.zeros(N, sh.num_traj, dtype=r.dtype).index_add(1, sh.traj, wll)
            r = r * torch.softmax(ll_k, 1)[:, sh.traj].sqrt()[:, None, :, None]
        r = r.flatten(2)
        Jr = (r[:, 1:] - r[:, :1]) / steps[:, :, None]               # (N, D, R)
        Jg = ((g[:, 1:] - g[:, :1]) / steps[:, :, None]).transpose(1, 2)   # (N, C, D)
        return Jr @ Jr.transpose(1, 2), Jg

    return linearise


def gauss_newton_svgd(problem: Problem, sh: Shooting, density, x0: Tensor, particles: int, iterations: int,
                       c: float, cw, dual_lr: float, refresh: int, project, stop_tol: float = 0.0):
    """``run_stein_gauss_newton`` within a budget of ``particles x iterations`` rollouts: each
    linearisation costs particles x (D + 1) rollouts, paid for with iterations; ``stop_tol``: its
    early stop once converged. -> (x, trace, info)."""
    D = x0.shape[1]
    budget = particles * iterations
    n = iterations - 1                                   # the first evaluation is one iteration's worth

    def cost(n: int) -> int:
        return particles * (n + 1) + -(-n // refresh) * particles * (D + 1)

    while n > 1 and cost(n) > budget:
        n -= 1
    if cost(n) > budget:
        log.warning("csvgd: %d rollouts cannot pay for a Gauss-Newton step (%d); spending %d", budget, cost(n), cost(n))
    t0, best = time.perf_counter(), []
    x, _, tr, lins = run_stein_gauss_newton(density, linearisation(problem, sh), x0, n,
                                           kernel_dims=problem.num_params, refresh=refresh, c=c,
                                           constraint_weight=cw, dual_lr=dual_lr, project=project,
                                           stop_tol=stop_tol, callback=lambda it, x, logp: best.append(
                                               (time.perf_counter() - t0, float(logp.max()))))
    if len(tr.log_prob) < n:
        log.info("csvgd: Gauss-Newton steps converged after %d of %d iterations", len(tr.log_prob), n)
    n = len(tr.log_prob)
    return x, tr, {"newton_iterations": n, "linearisations": lins,
                   "newton_rollouts": particles * (n + 1 + lins * (D + 1)),
                   "kernel_covariance": tr.kernel_covariance,   # unit parameter coordinates
                   "kernel_metrics": tr.kernel_metrics,         # (N, P, P) per particle, unit coordinates
                   "newton_best": best}   # (seconds since the phase began, best log-likelihood) per step
