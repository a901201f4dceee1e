"""Revolute vs prismatic from the 3-D track of one point on the moving part.

For tracks without orientation (e.g. the hand positions of Sturm et al. 2011 while
a robot opens a door or a drawer) the point moves on a circle about a revolute axis
and on a line along a prismatic one. Both are fitted robustly (soft-L1 least squares,
seeded by PCA / an algebraic circle fit) and compared BIC-style (Sturm et al. 2011)
with the per-point noise estimated from the track itself:

    cost = sum_i min(d_i^2 / sigma^2, c) + log(n) * k,   k: line 4, circle 6

where d_i is the point's distance from the line / circle. A circle also has to bend
visibly: its sagitta over the observed arc must exceed ``min_sagitta_sigma`` noise
sigmas, and the arc must span ``min_arc_deg``: without orientation, a short arc of a
big circle cannot be told from a straight pull bent by grasp slip and arm compliance
(real hand tracks deviate from a line by a centimetre or so, far above their
millimetre jitter), so it is called prismatic.

Not here: anything with orientation (``fit``), several bodies (``pipeline.articulate``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares


@dataclass(frozen=True)
class PointJoint:
    """Result for one track. axis: (3,) unit; center: (3,) circle centre (revolute) or the
    line's centroid (prismatic); radius in metres (inf for prismatic); rms in metres."""

    type: str
    axis: np.ndarray
    center: np.ndarray
    radius: float
    rms: float
    cost: float
    costs: dict
    sigma: float
    arc_deg: float = 0.0


def estimate_noise(p: np.ndarray) -> float:
    """Per-coordinate noise of a smooth point track p: (n, 3), from third differences."""
    d3 = p[3:] - 3 * p[2:-1] + 3 * p[1:-2] - p[:-3]
    x = d3.ravel()
    return float(1.4826 * np.median(np.abs(x - np.median(x))) / np.sqrt(20))


def _basis(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    e = np.eye(3)[int(np.argmin(np.abs(n)))]
    u = np.cross(n, e)
    u /= np.linalg.norm(u)
    return u, np.cross(n, u)


def fit_line(p: np.ndarray, f_scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Robust 3-D line: (direction, point, distances (n,))."""
    c = p.mean(0)
    d = np.linalg.svd(p - c)[2][0]

    def res(x):
        s = d + x[0] * _basis(d)[0] + x[1] * _basis(d)[1]
        s = s / np.linalg.norm(s)
        v = p - (c + x[2] * _basis(d)[0] + x[3] * _basis(d)[1])
        return np.linalg.norm(v - np.outer(v @ s, s), axis=1)

    sol = least_squares(res, np.zeros(4), loss="soft_l1", f_scale=f_scale)
    x = sol.x
    u, v = _basis(d)
    s = d + x[0] * u + x[1] * v
    return s / np.linalg.norm(s), c + x[2] * u + x[3] * v, res(x)


def _circle_residual(p, n, c, r):
    v = p - c
    h = v @ n
    rho = np.linalg.norm(v - np.outer(h, n), axis=1)
    return np.hypot(rho - r, h)


def fit_circle(p: np.ndarray, f_scale: float) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """Robust 3-D circle: (normal, centre, radius, distances (n,))."""
    m = p.mean(0)
    n0 = np.linalg.svd(p - m)[2][2]
    u, v = _basis(n0)
    xy = np.stack([(p - m) @ u, (p - m) @ v], 1)
    # Kasa algebraic fit: x^2 + y^2 + D x + E y + F = 0
    A = np.column_stack([xy, np.ones(len(xy))])
    D, E, F = np.linalg.lstsq(A, -(xy**2).sum(1), rcond=None)[0]
    cxy = np.array([-D / 2, -E / 2])
    r0 = float(np.sqrt(max(cxy @ cxy - F, 1e-12)))
    c0 = m + cxy[0] * u + cxy[1] * v

    def unpack(x):
        n = n0 + x[0] * u + x[1] * v
        n = n / np.linalg.norm(n)
        return n, c0 + x[2] * u + x[3] * v + x[4] * n0, r0 + x[5]

    sol = least_squares(lambda x: _circle_residual(p, *unpack(x)), np.zeros(6), loss="soft_l1", f_scale=f_scale,
                        x_scale=np.array([1, 1, r0, r0, r0, r0]))
    n, c, r = unpack(sol.x)
    return n, c, float(r), _circle_residual(p, n, c, r)


def classify(p: np.ndarray, sigma: float | None = None, min_sigma: float = 1e-3, outlier_chi2: float = 25.0,
             min_sagitta_sigma: float = 5.0, min_arc_deg: float = 30.0) -> PointJoint:
    """p: (n, 3) positions of one point on the moving part -> revolute or prismatic."""
    p = np.asarray(p, float)
    n = len(p)
    sigma = max(estimate_noise(p) if sigma is None else sigma, min_sigma)
    s_line, c_line, d_line = fit_line(p, 3 * sigma)
    n_c, c_c, r, d_circ = fit_circle(p, 3 * sigma)
    cost = {"prismatic": float(np.minimum((d_line / sigma) ** 2, outlier_chi2).sum() + 4 * np.log(n)),
            "revolute": float(np.minimum((d_circ / sigma) ** 2, outlier_chi2).sum() + 6 * np.log(n))}
    # arc actually covered, and how far it bends away from its chord
    v = p - c_c
    v -= np.outer(v @ n_c, n_c)
    ang = np.unwrap(np.arctan2(v @ np.cross(n_c, v[0] / np.linalg.norm(v[0])), v @ (v[0] / np.linalg.norm(v[0]))))
    arc = float(np.ptp(ang))
    sagitta = r * (1 - np.cos(min(arc, np.pi) / 2))
    bends = sagitta > min_sagitta_sigma * sigma and np.rad2deg(arc) >= min_arc_deg
    kind = "revolute" if cost["revolute"] < cost["prismatic"] and bends else "prismatic"
    if kind == "revolute":
        return PointJoint("revolute", n_c, c_c, r, float(np.sqrt(np.mean(d_circ**2))), cost["revolute"], cost, sigma,
                          float(np.rad2deg(arc)))
    return PointJoint("prismatic", s_line, c_line, float("inf"), float(np.sqrt(np.mean(d_line**2))),
                      cost["prismatic"], cost, sigma)
