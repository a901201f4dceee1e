"""CSVGD and the baselines behind one interface, with equal simulator budgets.

Every method has the signature

    method(problem, particles=16, iterations=..., seed=0, **options) -> InferenceResult

and spends ``particles x iterations`` rollouts of the whole observed trajectory set
(one rollout = simulating every observed sample once; a value-and-gradient evaluation
counts as one, as in the dissertation's Table 4.5 protocol). Methods:

- ``csvgd``: constrained SVGD with multiple shooting (Heiden et al. 2022; dissertation
  Alg. 5): parameters and window start states are the particle; limits and defects
  are equality constraints under the modified differential method of multipliers; then a
  single-shooting Gauss-Newton phase, and the phase whose particles score higher on the
  shooting windows is kept.
- ``svgd``: plain SVGD, single shooting, parameters clamped to their limits.
- ``adam``: independent Adam runs from the same Sobol starts, best one wins.
- ``cmaes``: CMA-ES (``cma``), population = particles, generations = iterations, the last
  tenth of them spent on a Levenberg-Marquardt polish of the best individual.
- ``mcmc``: affine-invariant ensemble sampler (``emcee`` stretch move), walkers =
  particles, steps = iterations.

All methods start from the same scrambled Sobol points within the limits and report
the single-shooting log-likelihood of their final particles, so results compare.
"""
from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.stats import qmc

from vid2sim.models.inference.problem import Problem, Shooting
from vid2sim.models.inference.svgd import run_svgd
from vid2sim.models.inference.csvgd_phases import gauss_newton_svgd, keep_multiple_shooting, particles_of

log = logging.getLogger(__name__)
Tensor = torch.Tensor


@dataclass
class InferenceResult:
    """theta: (N, P) physical particles; start: (N, K, S) initial state per trajectory;
    log_likelihood: (N,) single-shooting log-likelihood of each particle; score: (N,) what
    picks the best particle where it is not the single-shooting log-likelihood (csvgd keeping
    its multiple-shooting particles: their windowed score, ``csvgd_phases.phase_scores``), else None."""

    method: str
    names: list[str]
    theta: Tensor
    start: Tensor
    log_likelihood: Tensor
    evaluations: int
    seconds: float
    trace: dict = field(default_factory=dict)
    score: Tensor | None = None

    @property
    def best(self) -> int:
        s = self.log_likelihood if self.score is None else self.score
        return int(torch.nan_to_num(s, nan=-math.inf).argmax())

    @property
    def estimate(self) -> Tensor:
        return self.theta[self.best]


def sobol_unit(n: int, d: int, seed: int) -> Tensor:
    """n scrambled Sobol points in [0, 1]^d (float64)."""
    eng = qmc.Sobol(d=d, scramble=True, seed=seed)
    m = max(int(math.ceil(math.log2(max(n, 2)))), 1)
    return torch.as_tensor(eng.random_base2(m)[:n], dtype=torch.float64)


def _finish(name: str, problem: Problem, theta: Tensor, start: Tensor, evals: int, t0: float, trace: dict,
            score: Tensor | None = None) -> InferenceResult:
    """Score particles by single-shooting log-likelihood. theta (N, P), start (N, K, S)."""
    single = Shooting(problem, 1)
    with torch.no_grad():
        ll, _, _ = single.evaluate(theta, start)
    return InferenceResult(name, list(problem.names), theta.detach(), start.detach(), ll, evals, time.perf_counter() - t0,
                           trace, score)


def _initial(problem: Problem, shooting: Shooting, n: int, seed: int) -> tuple[Tensor, Tensor]:
    """Sobol parameters in [0, 1]^P and the guessed window start states divided by scale: (N, P), (N, W*S)."""
    u = sobol_unit(n, problem.num_params, seed).to(problem.dtype)
    s = (shooting.guess / problem.state_scale).to(problem.dtype).reshape(1, -1).repeat(n, 1)
    return u, s


def _warm(problem: Problem, shooting: Shooting, theta: Tensor, start: Tensor) -> tuple[Tensor, Tensor]:
    """``_initial`` from given particles: theta (N, P) physical and start (N, K, S) physical
    (per trajectory) -> their unit parameters (N, P) and window starts / scale (N, W*S): each
    trajectory's first window from ``start``, the other windows at the guessed states."""
    N, P, S = theta.shape[0], problem.num_params, problem.state_dim
    if theta.shape[1] != P or start.shape[1:] != (shooting.num_traj, S) or start.shape[0] != N:
        raise ValueError(f"init: theta {tuple(theta.shape)} and start {tuple(start.shape)} do not fit a problem of "
                         f"{P} parameters and {shooting.num_traj} trajectories of {S} states")
    u = problem.to_unit(theta.to(problem.dtype)).clamp(0.0, 1.0)
    s = (shooting.guess / problem.state_scale).to(problem.dtype)[None].repeat(N, 1, 1)
    s[:, shooting.first] = start.to(problem.dtype) / problem.state_scale
    return u, s.reshape(N, -1)


def _check_options(precondition: str, csvgd: bool, polish: float) -> None:
    if precondition not in ("none", "gauss-newton"):
        raise ValueError(f"precondition must be 'none' or 'gauss-newton', got {precondition!r}")
    if precondition == "gauss-newton" and not csvgd:
        raise ValueError("precondition='gauss-newton' is for csvgd")
    if not 0.0 <= polish <= 1.0:
        raise ValueError(f"polish must be in [0, 1], got {polish}")


def _density(problem: Problem, shooting: Shooting, windows_per_particle: int, constrained: bool):
    """The particles' log-density: x (N, P + W*S) (unit parameters, window starts / scale) -> the
    log-likelihood (N,) and, if ``constrained``, the constraints (N, C): window defects and limit overshoots."""
    P, S = problem.num_params, problem.state_dim

    def density(x: Tensor):
        u = x[:, :P]
        theta = problem.to_physical(u.clamp(0.0, 1.0))
        starts = x[:, P:].reshape(-1, windows_per_particle, S) * problem.state_scale
        ll, _, defects = shooting.evaluate(theta, starts)
        if not constrained:
            return ll, None
        limits = torch.relu(-u) + torch.relu(u - 1.0)
        return ll, torch.cat([defects.flatten(1), limits], 1)
    return density


def _clamp_params(x: Tensor, P: int) -> Tensor:
    """x (N, P + ...) with its first P (unit parameter) columns clamped to [0, 1]."""
    x = x.clone()
    x[:, :P] = x[:, :P].clamp(0.0, 1.0)
    return x


def _constraint_weight(problem: Problem, shooting: Shooting) -> float:
    """The augmented-Lagrangian term's scalar weight: like the likelihood of the observed values, x 1e-2."""
    return float(shooting.num_obs) / max(shooting.num_traj, 1) / float((problem.sigma ** 2).mean()) * 1e-2


def _defect_weights(problem: Problem, sh: Shooting, u0: Tensor, defect_units: str, constrained: bool):
    """The constraint weight: a scalar (``"scale"``), or per constraint (``"sigma"``): each defect
    weighs what the same error in a window's start state costs in observations (Gauss-Newton
    curvature at the guessed starts and the particles' mean parameters ``u0``), limits the scalar."""
    if defect_units not in ("scale", "sigma"):
        raise ValueError(f"defect_units must be 'scale' or 'sigma', got {defect_units!r}")
    cw = _constraint_weight(problem, sh)
    if defect_units == "sigma" and constrained and len(sh.cur):
        ws = sh.start_weights(problem.to_physical(u0.mean(0))).clamp(min=1e-6)
        cw = torch.cat([ws.repeat(len(sh.cur)), torch.full((problem.num_params,), cw, dtype=ws.dtype)])
    return cw


def _gradient_method(name: str, problem: Problem, particles: int, iterations: int, seed: int, windows: int,
                     constrained: bool, use_kernel: bool, lr: float, c: float, lr_multiplier: float,
                     lr_final: float | None, ramp: float = 0.0, polish: float = 0.0, dual: str = "sgd",
                     defect_units: str = "scale", precondition: str = "none", refresh: int = 10,
                     select: bool = False, stop_tol: float = 0.0, init: tuple[Tensor, Tensor] | None = None
                     ) -> InferenceResult:
    """SVGD (``use_kernel``) or independent Adam particles over ``windows`` shooting windows, then the
    polish phase (``_polish``); csvgd, svgd and adam document the options."""
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    sh = Shooting(problem, windows)
    P, W = problem.num_params, sh.num_windows
    u0, s0 = _initial(problem, sh, particles, seed) if init is None else _warm(problem, sh, *init)
    _check_options(precondition, constrained and use_kernel, polish)
    # iterations of the shooting phase, then (polish) single shooting from each particle's first window;
    # with single shooting throughout, Gauss-Newton steps take the whole budget
    if W > sh.num_traj:
        n_polish = int(round(polish * iterations))
    else:
        n_polish = iterations if precondition == "gauss-newton" else 0
    n_main = iterations - n_polish
    lr_end = lr if lr_final is None else lr_final
    lr_mid = lr * (lr_end / lr) ** (n_main / max(iterations - 1, 1))   # the geometric schedule, split in two
    clamp = functools.partial(_clamp_params, P=P)
    cw = _defect_weights(problem, sh, u0, defect_units, constrained)
    x = torch.cat([u0, s0], 1)
    trace = {"windows": W, "window_length": sh.L}
    spent = particles * n_main                        # rollouts
    if n_main:
        x, _, tr = run_svgd(_density(problem, sh, W, constrained), x, n_main, lr=lr,
                            lr_final=lr_mid if n_polish else lr_final, kernel_dims=P, c=c, lr_multiplier=lr_multiplier,
                            constraint_weight=cw, ramp=ramp, project=None if constrained else clamp,
                            use_kernel=use_kernel, dual=dual)
        trace.update(mean_log_prob=tr.log_prob, max_violation=tr.max_violation, final_violation=tr.final_violation)
    if n_polish:
        select = select and n_main > 0 and constrained
        single, xs, rollouts = _polish(problem, sh, x, particles, n_polish, select, constrained, use_kernel,
                                       lr, lr_mid, lr_final, c, lr_multiplier, dual, precondition, refresh,
                                       stop_tol, trace, t0)
        spent += rollouts
        if select:
            spent += 3 * particles + problem.state_dim + 1
            kept = keep_multiple_shooting(problem, sh, x, single, xs, trace)
            if kept is not None:
                return _finish(name, problem, *kept[:2], spent, t0, trace, kept[2])
        sh, x = single, xs
    theta, starts = particles_of(problem, sh, x)
    return _finish(name, problem, theta, starts[:, sh.first], spent, t0, trace)


def _polish(problem: Problem, sh: Shooting, x: Tensor, particles: int, n_polish: int, select: bool,
            constrained: bool, use_kernel: bool, lr: float, lr_mid: float, lr_final: float | None, c: float,
            lr_multiplier: float, dual: str, precondition: str, refresh: int, stop_tol: float, trace: dict,
            t0: float) -> tuple[Shooting, Tensor, int]:
    """The polish phase: single shooting from each particle's first-window state (x (N, P + W*S) of the
    shooting phase), by Gauss-Newton-preconditioned SVGD or Adam-scheduled SVGD steps, ``n_polish``
    iterations less what ``select``'s scoring will spend. Returns the single-shooting problem, the
    particles (N, P + K*S) and the rollouts spent; updates ``trace``."""
    P, W, S = problem.num_params, sh.num_windows, problem.state_dim
    reserve = -(-(3 * particles + S + 1) // particles) if select else 0   # csvgd_phases.phase_scores' rollouts
    single = Shooting(problem, 1)
    first = x[:, P:].reshape(-1, W, S)[:, sh.first].reshape(particles, -1)
    x = torch.cat([x[:, :P], first], 1)
    clamp = functools.partial(_clamp_params, P=P)
    density = _density(problem, single, single.num_windows, constrained)
    trace["polish_started"] = time.perf_counter() - t0      # seconds into the method
    if precondition == "gauss-newton":
        x, tr2, info = gauss_newton_svgd(problem, single, density, clamp(x), particles, max(n_polish - reserve, 2),
                                          c, _constraint_weight(problem, single), lr * lr_multiplier, refresh, clamp,
                                          stop_tol)
        trace.update(info)
        spent = info["newton_rollouts"]
    else:
        x, _, tr2 = run_svgd(density, x, max(n_polish - reserve, 1), lr=lr_mid, lr_final=lr_final, kernel_dims=P,
                             c=c, lr_multiplier=lr_multiplier, constraint_weight=_constraint_weight(problem, single),
                             project=None if constrained else clamp, use_kernel=use_kernel, dual=dual)
        spent = particles * max(n_polish - reserve, 1)
    trace.update(polish_iterations=n_polish, polish_mean_log_prob=tr2.log_prob)
    return single, x, spent


def csvgd(problem: Problem, particles: int = 16, iterations: int = 500, seed: int = 0, windows: int = 8,
          lr: float = 0.05, lr_final: float | None = 0.005, c: float = 10.0, lr_multiplier: float = 1.0,
          ramp: float = 0.6, polish: float = 0.7, dual: str = "adam", defect_units: str = "sigma",
          precondition: str = "gauss-newton", refresh: int = 10, select: bool = True,
          stop_tol: float = 0.0, init: tuple[Tensor, Tensor] | None = None) -> InferenceResult:
    """Constrained SVGD with ``windows`` shooting windows per trajectory (1 = single shooting).

    Constraint handling (MDMM): ``defect_units="sigma"`` weighs each defect coordinate by what
    the same error in a window's start state costs in that window's observations
    (``Shooting.start_weights``, Gauss-Newton curvature; a pole-angle defect then weighs ~700x
    a cart-position one), instead of one scalar (``"scale"``: defects in units of the state
    spread, weighed like the observations x 1e-2); ``dual="adam"`` moves the multipliers by
    their own Adam at ``lr_multiplier`` x the particles' step size and schedule, instead of
    ``lambda += lr_multiplier * g`` (``"sgd"``). ``c`` is the penalty stiffness in those units.

    ``ramp``: fraction of the iterations over which the constraint weight grows from 1 %
    to 100 % (see ``run_svgd``). ``polish``: fraction of the iterations (same budget)
    spent at the end on single shooting from each particle's first-window state, so the
    particles are refined on the objective they are scored by, even where the shooting
    phase left defects open (the windows explore; single shooting refines).
    ``precondition="gauss-newton"`` (default) takes that phase's steps in each particle's
    Gauss-Newton metric with Levenberg-Marquardt damping (``svgd_newton.py``; the metrics by
    finite differences every ``refresh`` iterations, N (D + 1) rollouts each, paid from the
    phase's budget); ``"none"``: Adam-scheduled SVGD steps. With a single window the
    Gauss-Newton phase takes the whole budget.

    ``select`` (with both phases): the particles of the phase that score higher on the shooting
    windows are returned (``csvgd_phases.phase_scores``: the multiple-shooting particles' windows less the
    Gauss-Newton price of closing their defects, against the polished particles' own rollouts
    cut into the same windows; about 3 N + S + 1 rollouts, from the polish budget). On a chaotic
    clip, where single shooting from the windows' states stalls, that keeps the
    multiple-shooting particles, and ``score`` then picks the best of them; False: always the
    polished ones. ``stop_tol`` > 0 ends the Gauss-Newton phase early once converged
    (``svgd_newton.Convergence``: over ``refresh`` steps the best particle rose by less than that
    many nats and no particle joined the converged set); the rollouts it did not spend are not spent. ``init`` = (theta (N, P), start (N, K, S)), physical:
    start from these particles (e.g. an earlier fit's) instead of a Sobol sample at the guessed
    starts. The measurements behind these defaults are in
    docs/decisions.md ("Settings and their measured reasons")."""
    return _gradient_method("csvgd", problem, particles, iterations, seed, windows, True, True, lr, c, lr_multiplier,
                            lr_final, ramp, polish, dual, defect_units, precondition, refresh, select, stop_tol,
                            init)


def svgd(problem: Problem, particles: int = 16, iterations: int = 500, seed: int = 0, lr: float = 0.05,
         lr_final: float | None = 0.005) -> InferenceResult:
    """Plain SVGD: single shooting, limits by clamping."""
    return _gradient_method("svgd", problem, particles, iterations, seed, 1, False, True, lr, 0.0, 0.0, lr_final)


def adam(problem: Problem, particles: int = 16, iterations: int = 500, seed: int = 0, lr: float = 0.05,
         lr_final: float | None = 0.005) -> InferenceResult:
    """``particles`` independent Adam maximum-likelihood runs (single shooting); the best is the estimate."""
    return _gradient_method("adam", problem, particles, iterations, seed, 1, False, False, lr, 0.0, 0.0, lr_final)


def _single_shooting_objective(problem: Problem):
    """Vectorised log-likelihood of unit parameters (+ scaled initial states when estimated)."""
    sh = Shooting(problem, 1)
    P, K, S = problem.num_params, sh.num_traj, problem.state_dim
    guess = sh.guess  # (K, S)

    def unpack(z: Tensor) -> tuple[Tensor, Tensor]:
        theta = problem.to_physical(z[:, :P])
        if problem.estimate_start:
            start = z[:, P:].reshape(-1, K, S) * problem.state_scale
        else:
            start = guess[None].repeat(z.shape[0], 1, 1)
        return theta, start

    def loglik(z: np.ndarray) -> np.ndarray:
        zt = torch.as_tensor(np.atleast_2d(z), dtype=problem.dtype)
        inside = ((zt[:, :P] >= 0) & (zt[:, :P] <= 1)).all(1)
        zc = zt.clone()
        zc[:, :P] = zc[:, :P].clamp(0.0, 1.0)  # never simulate outside the limits (e.g. negative masses)
        with torch.no_grad():
            ll, _, _ = sh.evaluate(*unpack(zc))
        ll = torch.where(inside, torch.nan_to_num(ll, nan=-math.inf), torch.full_like(ll, -math.inf))
        return ll.numpy()

    z_start = (guess / problem.state_scale).reshape(-1).numpy() if problem.estimate_start else np.zeros(0)
    return loglik, unpack, z_start


def cmaes(problem: Problem, particles: int = 16, iterations: int = 500, seed: int = 0, sigma0: float = 0.25,
          polish: float = 0.1) -> InferenceResult:
    """CMA-ES (Hansen) with population ``particles``; the final population is the particle set.

    Searches the parameters in the unit cube (box bounds [0, 1]) together with the start
    state, by single shooting over the whole clip; ``sigma0`` is the initial step in those
    units. ``iterations`` counts batches of ``particles`` rollouts.

    polish: fraction in [0, 1) of the rollout budget kept for a Levenberg-Marquardt
    refinement of the best individual (``_least_squares_polish``); CMA-ES gets the
    generations that remain. CMA-ES alone can end its budget still climbing on long clips;
    the refinement takes the best individual to the nearby maximum. 0 turns it off.
    """
    import cma

    if not 0.0 <= polish < 1.0:
        raise ValueError(f"cmaes: polish must be in [0, 1), got {polish}")
    t0 = time.perf_counter()
    loglik, unpack, z_start = _single_shooting_objective(problem)
    P = problem.num_params
    u0 = sobol_unit(particles, P, seed).mean(0).numpy()
    x0 = np.concatenate([u0, z_start])
    lo = [0.0] * P + [None] * len(z_start)
    hi = [1.0] * P + [None] * len(z_start)
    polish_batches = int(polish * iterations)        # each a batch of `particles` rollouts
    generations = iterations - polish_batches
    es = cma.CMAEvolutionStrategy(x0, sigma0, {"popsize": particles, "bounds": [lo, hi], "seed": seed + 1,
                                              "verbose": -9, "maxiter": generations, "tolfun": 0, "tolx": 0,
                                              "tolfunhist": 0, "tolstagnation": 10 ** 9})
    best_z, best_ll, history = x0, -math.inf, []
    pop = np.atleast_2d(x0)
    for _ in range(generations):
        pop = np.asarray(es.ask())
        ll = loglik(pop)
        es.tell(list(pop), list(np.where(np.isfinite(ll), -ll, 1e300)))
        i = int(np.argmax(ll))
        if ll[i] > best_ll:
            best_ll, best_z = float(ll[i]), pop[i].copy()
        history.append(float(np.max(ll)))
    trace = {"best_log_prob": history}
    evals = particles * generations
    best = [best_z]                                  # best ever, then the last population
    if polish_batches:
        z, used, info = _least_squares_polish(problem, unpack, best_z, P, particles, polish_batches)
        evals += used * particles
        trace["polish"] = dict(info, batches=used)
        best = [z, best_z]  # _finish scores both: least squares maximises the product likelihood, a mixture may not
    final = np.vstack(best + list(pop[: particles - len(best)]))
    theta, start = unpack(torch.as_tensor(final, dtype=problem.dtype))
    res = _finish("cmaes", problem, theta, start, evals, t0, trace)
    if polish_batches:
        after, before = (float(v) for v in res.log_likelihood[:2])
        trace["polish"].update(log_likelihood_before=before, log_likelihood_after=after)
        log.info("cmaes: least-squares polish %.2f -> %.2f in %d batches of %d rollouts", before, after, used, particles)
    return res


def _least_squares_polish(problem: Problem, unpack, z0: np.ndarray, P: int, batch: int, max_batches: int):
    """Levenberg-Marquardt (SciPy ``least_squares``, trust-region reflective: the unit limits
    are its bounds) on the whitened single-shooting residuals (``Shooting.residuals``), from
    z0 = (unit parameters, start states / scale). The Jacobian is central differences, and each
    residual evaluation simulates x and its 2 D neighbours together, padded to ``batch`` rows
    so that the simulator sees the batch size of the search before it (a compiled step is not
    compiled again). -> (z, batches used, {"status", "message"})."""
    from scipy.optimize import least_squares

    sh = Shooting(problem, 1)
    D = len(z0)
    rows = 2 * D + 1
    per_eval = -(-rows // batch)                      # batches of `batch` rollouts per evaluation
    max_evals = max_batches // per_eval
    if max_evals < 2:
        log.warning("cmaes: polish skipped: %d batches cannot pay for two evaluations of %d rollouts", max_batches,
                    rows)
        return z0, 0, {"status": None, "message": "budget too small"}
    lb = np.r_[np.zeros(P), np.full(D - P, -np.inf)]
    ub = np.r_[np.ones(P), np.full(D - P, np.inf)]
    cache: dict = {}
    used = [0]
    best = [math.inf, np.clip(z0, lb, ub)]

    class _Spent(Exception):
        pass

    def evaluate(z: np.ndarray):
        key = z.tobytes()
        if key not in cache:
            if used[0] + per_eval > max_batches:
                raise _Spent
            h = 1e-6 * np.maximum(1.0, np.abs(z))
            Z = np.repeat(z[None], per_eval * batch, 0)
            for d in range(D):
                Z[1 + 2 * d, d] += h[d]
                Z[2 + 2 * d, d] -= h[d]
            with torch.no_grad():
                R = sh.residuals(*unpack(torch.as_tensor(Z, dtype=problem.dtype))).reshape(len(Z), -1).numpy()
            used[0] += per_eval
            if len(cache) > 2:     # the current point and a trial step are all trf asks for again
                cache.pop(next(iter(cache)))
            cache[key] = (R[0], ((R[1:rows:2] - R[2:rows:2]) / (2 * h[:, None])).T)
            cost = float(R[0] @ R[0])
            if cost < best[0]:
                best[:] = [cost, z.copy()]
        return cache[key]

    try:
        out = least_squares(lambda z: evaluate(z)[0], best[1], jac=lambda z: evaluate(z)[1], bounds=(lb, ub),
                            method="trf", x_scale="jac", max_nfev=max_evals)
        info = {"status": int(out.status), "message": str(out.message)}
    except _Spent:             # the budget ran out between SciPy's own counts: keep the best point seen
        info = {"status": 0, "message": "rollout budget spent"}
    return best[1], used[0], info


def least_squares(problem: Problem, batch: int = 16, batches: int = 100, u0: np.ndarray | None = None) -> InferenceResult:
    """Levenberg-Marquardt alone (``_least_squares_polish``) from unit parameters ``u0`` (default:
    the middle of the limits) and the problem's state guess: for smooth problems with a good
    start-state guess (e.g. free flight). ``batches`` batches of ``batch`` rollouts at most.
    Returns one particle (the end point)."""
    t0 = time.perf_counter()
    _, unpack, z_start = _single_shooting_objective(problem)
    P = problem.num_params
    u0 = np.full(P, 0.5) if u0 is None else np.asarray(u0, float)
    z, used, info = _least_squares_polish(problem, unpack, np.concatenate([u0, z_start]), P, batch, batches)
    theta, start = unpack(torch.as_tensor(z[None], dtype=problem.dtype))
    return _finish("least_squares", problem, theta, start, used * batch, t0, {"polish": dict(info, batches=used)})


def mcmc(problem: Problem, particles: int = 16, iterations: int = 500, seed: int = 0) -> InferenceResult:
    """emcee's parallel stretch move, one walker per particle; the particle set is the last
    walker positions with the most likely sample of the chain in place of the worst walker."""
    import emcee

    t0 = time.perf_counter()
    loglik, unpack, z_start = _single_shooting_objective(problem)
    P = problem.num_params
    D = P + len(z_start)
    rng = np.random.default_rng(seed)
    u0 = sobol_unit(particles, P, seed).numpy()
    p0 = np.hstack([u0, z_start[None] + 1e-3 * rng.standard_normal((particles, len(z_start)))])
    if particles < 2 * D:
        log.warning("emcee: %d walkers for %d dimensions (it wants at least %d); running anyway", particles, D, 2 * D)
    sampler = emcee.EnsembleSampler(particles, D, loglik, vectorize=True)
    sampler.random_state = np.random.RandomState(seed).get_state()
    # emcee asks for at least 2 x ndim walkers; the comparison protocol fixes walkers = particles
    sampler.run_mcmc(p0, iterations, progress=False, skip_initial_state_check=True)
    chain, lp = sampler.get_chain(), sampler.get_log_prob()
    last, last_lp = chain[-1].copy(), lp[-1]
    t, w = np.unravel_index(np.argmax(np.nan_to_num(lp, nan=-np.inf)), lp.shape)
    last[int(np.argmin(last_lp))] = chain[t, w]
    theta, start = unpack(torch.as_tensor(last, dtype=problem.dtype))
    return _finish("mcmc", problem, theta, start, particles * iterations, t0,
                   {"acceptance": float(np.mean(sampler.acceptance_fraction))})


METHODS = {"csvgd": csvgd, "svgd": svgd, "adam": adam, "cmaes": cmaes, "mcmc": mcmc}


def infer(method: str, problem: Problem, particles: int = 16, iterations: int = 500, seed: int = 0, **options) -> InferenceResult:
    """Run ``method`` (one of ``METHODS``) with a budget of particles x iterations rollouts."""
    if method not in METHODS:
        raise ValueError(f"unknown inference method {method!r} (one of {', '.join(METHODS)})")
    return METHODS[method](problem, particles=particles, iterations=iterations, seed=seed, **options)
