"""The estimation problem: parameters with limits, a simulator, observed trajectories.

A ``Problem`` is what every inference method (``methods.py``) receives. The simulator
is any differentiable callable

    simulate(params (B, P), start (B, S), steps) -> states (B, steps, S)   # states[:, 0] == start

in physical units, with the time step of the observations (sub-stepping is the
callable's business). ``simulate`` may append columns after the S state columns
(quantities that ``observe`` needs, e.g. a rendered feature); defects use the first S. ``Shooting`` cuts the observed trajectories into windows of
equal length (multiple shooting, dissertation §4.3.3.4) and evaluates, for a batch of
particles, the Gaussian log-likelihood of the observations and the defects between
consecutive windows in one batched simulator call of N x (number of windows) rollouts.

Trajectory sets combine as an equally weighted mixture by default (App. A.1.2): the
log-likelihood of a particle is ``logsumexp_k ll_k - log K``, so particles explaining
different trajectories of a multimodal set are not pulled to a compromise. Use
``combine="product"`` when all trajectories come from the same system.

Normalisation (App. A.1.3): optimisers see parameters scaled to [0, 1] by their limits
and states divided by ``state_scale`` (per state dimension, the spread of the data).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

Tensor = torch.Tensor
SimulateFn = Callable[[Tensor, Tensor, int], Tensor]


@dataclass
class Problem:
    """Parameters ``names`` within ``lower``/``upper`` (P,), observed trajectories, simulator.

    observations: K tensors (T_k, O); state_guess: K tensors (T_k, S), a rough full state
    along each trajectory (e.g. positions with finite-difference velocities) used to
    initialise shooting states; observe: (..., S) -> (..., O), default identity;
    sigma: observation noise std, scalar or (O,); estimate_start: whether each
    trajectory's initial state is estimated (else fixed to ``state_guess[k][0]``).
    """

    names: Sequence[str]
    lower: Tensor
    upper: Tensor
    simulate: SimulateFn
    observations: Sequence[Tensor]
    state_guess: Sequence[Tensor]
    observe: Callable[[Tensor], Tensor] | None = None
    sigma: float | Tensor = 0.05
    combine: str = "mixture"
    estimate_start: bool = True
    state_scale: Tensor | None = None
    dtype: torch.dtype = torch.float64
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.lower = torch.as_tensor(self.lower, dtype=self.dtype)
        self.upper = torch.as_tensor(self.upper, dtype=self.dtype)
        if self.lower.shape != (len(self.names),) or self.upper.shape != self.lower.shape:
            raise ValueError(f"limits {tuple(self.lower.shape)}/{tuple(self.upper.shape)} for {len(self.names)} parameters")
        if not bool((self.upper > self.lower).all()):
            bad = [n for n, lo, hi in zip(self.names, self.lower, self.upper) if not hi > lo]
            raise ValueError(f"empty limits for {bad}")
        if len(self.observations) != len(self.state_guess) or not self.observations:
            raise ValueError("need one state guess per observed trajectory (and at least one trajectory)")
        if self.combine not in ("mixture", "product"):
            raise ValueError(f"combine must be 'mixture' or 'product', got {self.combine!r}")
        self.observations = [torch.as_tensor(o, dtype=self.dtype) for o in self.observations]
        self.state_guess = [torch.as_tensor(s, dtype=self.dtype) for s in self.state_guess]
        if self.state_scale is None:
            allg = torch.cat(list(self.state_guess), 0)
            self.state_scale = allg.std(0).clamp(min=1e-3)
        self.state_scale = torch.as_tensor(self.state_scale, dtype=self.dtype)
        self.sigma = torch.as_tensor(self.sigma, dtype=self.dtype)

    @property
    def num_params(self) -> int:
        return len(self.names)

    @property
    def state_dim(self) -> int:
        return self.state_guess[0].shape[1]

    def to_physical(self, u: Tensor) -> Tensor:
        """u: (..., P) in [0, 1] -> physical parameters."""
        return self.lower + u * (self.upper - self.lower)

    def to_unit(self, theta: Tensor) -> Tensor:
        return (theta - self.lower) / (self.upper - self.lower)

    def obs(self, states: Tensor) -> Tensor:
        return states if self.observe is None else self.observe(states)


class Shooting:
    """The windows of a problem: ``n_windows`` per (shortest) trajectory, all of equal length L.

    Window w of trajectory k covers samples [b, b + L]; its first L samples enter the
    likelihood, its last simulated state is compared with the next window's start
    (defect). One window per trajectory is single shooting; trajectories are then cut
    to the shortest one's length.
    """

    def __init__(self, problem: Problem, n_windows: int = 1):
        self.p = problem
        lengths = [o.shape[0] for o in problem.observations]
        if min(lengths) < 2 * max(n_windows, 1):
            raise ValueError(f"trajectories of {min(lengths)} samples are too short for {n_windows} windows")
        self.L = (min(lengths) - 1) // max(n_windows, 1)
        traj, start = [], []
        for k, T in enumerate(lengths):
            W = (T - 1) // self.L if n_windows > 1 else 1
            traj += [k] * W
            start += [w * self.L for w in range(W)]
        self.traj = torch.tensor(traj)
        self.start = torch.tensor(start)
        self.first = torch.tensor([i == 0 or traj[i - 1] != traj[i] for i in range(len(traj))])
        # defect pairs: window i ends where window i + 1 of the same trajectory starts
        self.cur = torch.tensor([i for i in range(len(traj) - 1) if traj[i + 1] == traj[i]], dtype=torch.long)
        self.nxt = self.cur + 1
        idx = self.start[:, None] + torch.arange(self.L)[None]
        self.obs_windows = torch.stack([problem.observations[k][i] for k, i in zip(traj, idx)])  # (W, L, O)
        self.guess = torch.stack([problem.state_guess[k][b] for k, b in zip(traj, start)])      # (W, S)
        self.num_windows = len(traj)
        self.num_traj = len(lengths)
        self.num_obs = self.obs_windows.numel()

    def evaluate(self, theta: Tensor, starts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """theta: (N, P) physical; starts: (N, W, S) physical window start states.

        Returns log-likelihood (N,), per-trajectory log-likelihood (N, K), and defects
        (N, D, S) divided by ``state_scale`` (D = number of window boundaries).
        """
        p, N = self.p, theta.shape[0]
        r, defects = self.residuals_and_defects(theta, starts)
        wll = -0.5 * (r * r).sum((2, 3)) - self.L * torch.log(p.sigma * math.sqrt(2 * math.pi)).sum() * (r.shape[-1] / max(p.sigma.numel(), 1))
        ll_k = torch.zeros(N, self.num_traj, dtype=wll.dtype).index_add(1, self.traj, wll)
        if p.combine == "mixture":
            ll = torch.logsumexp(ll_k, 1) - math.log(self.num_traj)
        else:
            ll = ll_k.sum(1)
        return ll, ll_k, defects

    def residuals_and_defects(self, theta: Tensor, starts: Tensor) -> tuple[Tensor, Tensor]:
        """Whitened residuals (N, W, L, O) (see ``residuals``) and defects (N, D, S) (see
        ``evaluate``) of one batched simulation. theta, starts as ``evaluate``."""
        r, states, starts = self._residuals(theta, starts)
        S = starts.shape[-1]
        defects = (starts[:, self.nxt] - states[:, self.cur, -1, :S]) / self.p.state_scale
        return r, torch.nan_to_num(defects, nan=1e3, posinf=1e3, neginf=-1e3)

    def residuals(self, theta: Tensor, starts: Tensor) -> Tensor:
        """Whitened observation residuals (N, W, L, O) = (simulated - observed) / sigma: the
        log-likelihood of one trajectory is -0.5 sum r^2 + const. theta, starts as ``evaluate``."""
        return self._residuals(theta, starts)[0]

    def _residuals(self, theta: Tensor, starts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        p = self.p
        N, W = theta.shape[0], self.num_windows
        if not p.estimate_start:
            starts = torch.where(self.first[None, :, None], self.guess[None].to(starts), starts)
        states = p.simulate(theta.repeat_interleave(W, 0), starts.reshape(N * W, -1), self.L + 1)
        states = states.reshape(N, W, self.L + 1, -1)
        r = (p.obs(states[:, :, :-1]) - self.obs_windows.to(states)) / p.sigma
        r = torch.nan_to_num(r, nan=1e6, posinf=1e6, neginf=-1e6)  # a diverged rollout is merely very unlikely
        return r, states, starts

    def start_weights(self, theta: Tensor, eps: float = 1e-4) -> Tensor:
        """What a unit error in a window's start state (``state_scale`` units) costs in the
        window's observations: the Gauss-Newton curvature sum_t,o (d obs_t,o / d s_d * scale_d /
        sigma_o)^2, averaged over the windows. theta: (P,) physical; finite differences at the
        guessed window starts. -> (S,)."""
        p = self.p
        S, W = p.state_dim, self.num_windows
        step = torch.cat([torch.zeros(1, S, dtype=p.dtype), torch.eye(S, dtype=p.dtype) * eps * p.state_scale])
        starts = self.guess[None] + step[:, None]                                  # (S+1, W, S)
        with torch.no_grad():
            states = p.simulate(theta[None].expand(W * (S + 1), -1), starts.reshape(-1, S), self.L)
            o = p.obs(states.reshape(S + 1, W, self.L, -1))
        d = (o[1:] - o[:1]) / (eps * p.sigma)
        return torch.nan_to_num(d * d).sum((2, 3)).mean(1)

    def rollout(self, theta: Tensor, start: Tensor, k: int = 0) -> Tensor:
        """Single-shooting prediction of trajectory k: theta (N, P), start (N, S) -> (N, T_k, O)."""
        T = self.p.observations[k].shape[0]
        with torch.no_grad():
            return self.p.obs(self.p.simulate(theta, start, T))
