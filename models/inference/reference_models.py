"""Closed-form planar models used to check inference on data with known answers.

These are not the project's simulator (``vid2sim.models.dynamics``); they are the
models published with real data sets, written out so that our estimates can be
compared with the authors' parameters under the authors' own equations.

``double_pendulum_*``: the UW multi-arm pendulum model (Kaheman et al. 2022): phi1,
phi2 absolute link angles from the upward vertical (pi = hanging down); link 1 has
its centre of mass a1 from the pivot and length L1, link 2 its centre of mass a2 from
the elbow; I1, I2 inertias about the centres of mass; viscous damping k1 on dphi1 and
k2 on (dphi1 - dphi2). Lagrange's equations:

    [A            B cos(d)] [ddphi1]   [ -B sin(d) dphi2^2 + G1 sin(phi1) - k1 dphi1 - k2 (dphi1 - dphi2)]
    [B cos(d)     C       ] [ddphi2] = [  B sin(d) dphi1^2 + G2 sin(phi2) + k2 (dphi1 - dphi2)          ]

with d = phi1 - phi2, A = m1 a1^2 + I1 + m2 L1^2, B = m2 L1 a2, C = m2 a2^2 + I2,
G1 = (m1 a1 + m2 L1) g, G2 = m2 a2 g.
"""
from __future__ import annotations

import torch

Tensor = torch.Tensor
UW_PARAM_NAMES = ("m1", "m2", "a1", "a2", "L1", "I1", "I2", "k1", "k2", "g")


def double_pendulum_coeffs(p: dict) -> tuple:
    """(A, B, C, G1, G2, k1, k2) of the equations above from the UW parameters ``p``."""
    A = p["m1"] * p["a1"] ** 2 + p["I1"] + p["m2"] * p["L1"] ** 2
    B = p["m2"] * p["L1"] * p["a2"]
    C = p["m2"] * p["a2"] ** 2 + p["I2"]
    G1 = (p["m1"] * p["a1"] + p["m2"] * p["L1"]) * p["g"]
    G2 = p["m2"] * p["a2"] * p["g"]
    return A, B, C, G1, G2, p["k1"], p["k2"]


def double_pendulum_accel_from(c: tuple, x: tuple, cos=torch.cos, sin=torch.sin) -> tuple:
    """Accelerations (ddphi1, ddphi2) from the coefficients ``c`` (``double_pendulum_coeffs``)
    and x = (phi1, phi2, dphi1, dphi2); any array type with matching ``cos``/``sin`` (numpy too)."""
    A, B, C, G1, G2, k1, k2 = c
    phi1, phi2, w1, w2 = x
    d = phi1 - phi2
    cd, sd = cos(d), sin(d)
    rel = w1 - w2
    r1 = -B * sd * w2 * w2 + G1 * sin(phi1) - k1 * w1 - k2 * rel
    r2 = B * sd * w1 * w1 + G2 * sin(phi2) + k2 * rel
    m12 = B * cd
    det = A * C - m12 * m12
    return (C * r1 - m12 * r2) / det, (A * r2 - m12 * r1) / det


def double_pendulum_accel(p: dict[str, Tensor], x: Tensor) -> Tensor:
    """p: name -> (B,) tensors (UW_PARAM_NAMES); x: (B, 4) [phi1, phi2, dphi1, dphi2] -> (B, 2) accelerations."""
    return torch.stack(double_pendulum_accel_from(double_pendulum_coeffs(p), x.unbind(-1)), -1)


def rk4_rollout(accel, x0: Tensor, steps: int, dt: float) -> Tensor:
    """Integrate x' = [x[..., n:], accel(x)] from x0 (B, 2n) with RK4: -> (B, steps, 2n), [:, 0] = x0."""
    n = x0.shape[-1] // 2

    def f(x):
        return torch.cat([x[..., n:], accel(x)], -1)

    out = [x0]
    x = x0
    for _ in range(steps - 1):
        k1 = f(x)
        k2 = f(x + 0.5 * dt * k1)
        k3 = f(x + 0.5 * dt * k2)
        k4 = f(x + dt * k3)
        x = x + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(x)
    return torch.stack(out, 1)


def double_pendulum_simulator(free: tuple[str, ...], fixed: dict[str, float], dt: float, substeps: int = 1,
                              derived=None):
    """A ``simulate(params (B, len(free)), start (B, 4), steps) -> (B, steps, 4)`` for ``Problem``.

    ``free`` names the estimated parameters (columns of ``params``), ``fixed`` gives the
    others; ``derived(p) -> p`` may fill parameters from others (e.g. rod inertias).
    Observations are sampled every ``dt``, integrated with RK4 at ``dt / substeps``.
    """
    h = dt / substeps

    def simulate(theta: Tensor, start: Tensor, steps: int) -> Tensor:
        B = theta.shape[0]
        p = {k: torch.full((B,), float(v), dtype=theta.dtype) for k, v in fixed.items()}
        p.update({k: theta[:, i] for i, k in enumerate(free)})
        if derived is not None:
            p = derived(p)
        if substeps == 1:
            return rk4_rollout(lambda x: double_pendulum_accel(p, x), start, steps, h)
        xs, x = [start], start
        for _ in range(steps - 1):
            x = rk4_rollout(lambda y: double_pendulum_accel(p, y), x, substeps + 1, h)[:, -1]
            xs.append(x)
        return torch.stack(xs, 1)

    return simulate
