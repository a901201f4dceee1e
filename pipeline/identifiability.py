"""What the identify stage's posterior does and does not determine.

Free motion under gravity, joint damping and Coulomb friction is invariant to scaling
every mass, inertia (homogeneous parts: inertia = mass x the shape's unit-mass inertia),
damping and friction by one factor: M(q) qdd + C(q, qd) + g(q) = -D qd - F sign(qd) keeps
its solutions when M, C, g, D, F are all multiplied by s. So from joint trajectories only
the mass *ratios* and damping (friction) per unit mass are observable; the overall scale
is not. Identify removes the unobservable direction by anchoring one body's mass
(``scale_anchor``): a known mass (``identify.bounds.masses``) or, without one, the anchor
body's volume x ``identify.bounds.density_anchor``. That one mass is imposed after the fit:
the fit runs with every mass free (along the scale the likelihood is flat, which the
particles may drift along), and ``to_anchor`` rescales each particle to the anchor's mass
(the same motion), ``anchor_limits`` the limits and ``anchor_laplace_covariances`` each
particle's Laplace covariance. Two or more known masses are held during the fit instead (the
damping and friction limits then scaled with the first, ``limit_scale``).

``summarise`` turns a posterior's particles into what the user may read off them:

- ``scale``: the anchor, where its mass came from and whether it is observed;
- ``quantities``: each identifiable combination (a mass ratio ``pole.mass/cart.mass``,
  damping per anchor mass ``slider.damping/cart.mass``, ..., or, with a known mass, the
  parameters themselves) with the best particle's value, the posterior median and its
  equal-tailed 50 % and 90 % intervals (``posterior_samples``: stragglers left out, and
  the particles widened to their Laplace covariances, the whole scaled by the noise variance
  the fit's residuals show (``matched_kernels``; a kernel-density method: by its kernel));
- ``at_limit``: parameters whose best value ends within ``LIMIT_FRACTION`` of the
  limits' span from a limit, with the reason where it is known.

It computes nothing about the mechanism beyond the particles it is given.
"""
from __future__ import annotations

import numpy as np

DRAWS = 4000              # samples of a kernel-density posterior the intervals are read from
LIMIT_FRACTION = 0.01      # a value within this fraction of the limits' span from a limit is "at" it
SCALED = ("mass", "damping", "friction", "stiffness")   # parameter kinds proportional to the mass scale
COEFFICIENTS = ("floor.friction", "tip.friction")      # Coulomb coefficients: dimensionless, not scaled
SCALE_NOTE = ("absolute mass is not observable from free motion: give one known mass with identify.bounds.masses")


def scale_anchor(masses: dict, body_names: list[str], joint_types: list[str], volumes: dict[str, float],
                 density_anchor: float) -> dict:
    """The body whose mass fixes the scale: the first of ``masses`` (known, kg), else the first
    body (in ``body_names`` order) moved by a revolute or prismatic joint (``joint_types[i]`` is
    body i's joint), at ``volumes[body]`` (m^3) x ``density_anchor`` (kg/m^3).

    -> {"body", "mass" (kg), "known" (bool), "source", "limit_scale"}: ``limit_scale`` = mass /
    (volume x density_anchor), the factor the damping and friction limits are multiplied by
    (1 unless a known mass sets another scale)."""
    if masses:
        body = next(iter(masses))
        kg, known, source = float(masses[body]), True, "identify.bounds.masses"
    else:
        moving = [b for b, t in zip(body_names, joint_types) if t in ("revolute", "prismatic")]
        body = (moving or list(body_names))[0]
        kg, known = float(volumes[body] * density_anchor), False
        source = f"volume x identify.bounds.density_anchor ({density_anchor:g} kg/m^3)"
    nominal = volumes[body] * density_anchor
    return {"body": body, "mass": kg, "known": known, "source": source,
            "limit_scale": kg / nominal if nominal > 0 else 1.0}


def to_anchor(theta: np.ndarray, names: list[str], anchor: dict) -> np.ndarray:
    """Parameters ``theta`` (N, P) or (P,) of a fit with every mass free -> the same motion with the
    anchor body's mass at ``anchor["mass"]``: each particle's masses, damping, friction and
    stiffness (``SCALED``) x anchor mass / the particle's anchor mass (the invariance above)."""
    X = np.array(theta, float, copy=True)
    X2 = np.atleast_2d(X)
    s = anchor["mass"] / X2[:, names.index(f"{anchor['body']}.mass")]
    cols = [i for i, n in enumerate(names) if _scaled(n)]
    X2[:, cols] *= s[:, None]
    return X2[0] if X.ndim == 1 else X2


def anchor_jacobian(theta: np.ndarray, names: list[str], anchor: dict) -> np.ndarray:
    """d to_anchor(theta) / d theta (P, P) at one particle ``theta`` (P,): s (I - theta e_a^T / theta_a)
    on the scaled rows (s = anchor mass / theta_a), identity on the others."""
    theta = np.asarray(theta, float)
    a = names.index(f"{anchor['body']}.mass")
    s = anchor["mass"] / theta[a]
    J = np.eye(len(names))
    for i, n in enumerate(names):
        if _scaled(n):
            J[i] *= s
            J[i, a] -= s * theta[i] / theta[a]
    return J


def _anchor_metrics(particles: np.ndarray, metrics: np.ndarray, span: np.ndarray, names: list[str],
                    anchor: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each particle's metric ``metrics`` (N, P, P) (unit coordinates of limits of span ``span`` (P,))
    restricted to its slice of the scale ridge (the anchor mass held) and carried to the anchor's
    scale -> (metrics (N, P-1, P-1), rescaled particles (N, P-1), the kept columns)."""
    X = np.asarray(particles, float)
    a = names.index(f"{anchor['body']}.mass")
    keep = np.array([i for i in range(len(names)) if i != a], int)
    scaled = np.array([_scaled(n) for n in names])
    s = anchor["mass"] / X[:, a]                                      # (N,) each particle's factor
    factor = np.where(scaled[None], s[:, None], 1.0) * np.asarray(span, float)[None]   # d theta' / d u
    M = np.asarray(metrics, float) / (factor[:, :, None] * factor[:, None, :])
    return M[:, keep][:, :, keep], to_anchor(X, names, anchor)[:, keep], keep


def anchor_kernel_covariance(particles: np.ndarray, metrics: np.ndarray, span: np.ndarray, names: list[str],
                             anchor: dict) -> np.ndarray:
    """The kernel covariance (P, P) of particles (N, P) fitted with every mass free, in the anchor's
    scale (their ``to_anchor`` images): each particle's metric ``metrics`` (N, P, P) (unit
    coordinates of limits of span ``span`` (P,), svgd_newton.profiled_metrics) restricted to its
    slice of the ridge (the anchor mass held) and carried to the anchor's scale, then
    svgd_newton.kernel_covariance of the rescaled particles. The anchor's row and column are 0."""
    import torch

    from vid2sim.models.inference.svgd_newton import kernel_covariance

    M, Y, keep = _anchor_metrics(particles, metrics, span, names, anchor)
    C = kernel_covariance(torch.as_tensor(Y), torch.as_tensor(M), len(keep)).numpy()
    out = np.zeros((len(names), len(names)))
    out[np.ix_(keep, keep)] = 0.5 * (C + C.T)
    return out


def anchor_laplace_covariances(particles: np.ndarray, metrics: np.ndarray, span: np.ndarray, names: list[str],
                               anchor: dict) -> np.ndarray:
    """Each particle's Laplace covariance (N, P, P) in the anchor's scale: the inverse of its
    Gauss-Newton metric ``metrics`` (N, P, P) (unit coordinates of limits of span ``span`` (P,), the
    start state profiled out) on its slice of the scale ridge. The anchor's rows and columns are 0."""
    M, _, keep = _anchor_metrics(particles, metrics, span, names, anchor)
    out = np.zeros((len(M), len(names), len(names)))
    out[:, keep[:, None], keep[None, :]] = laplace_covariances(M)
    return out


def laplace_covariances(metrics: np.ndarray, span: np.ndarray | None = None) -> np.ndarray:
    """Each particle's Laplace covariance (N, P, P): the (pseudo-)inverse of its Gauss-Newton metric
    ``metrics`` (N, P, P), in physical units when ``span`` (P,) gives the limits' span of the unit
    coordinates the metrics are in."""
    M = np.asarray(metrics, float)
    C = np.linalg.pinv(0.5 * (M + M.transpose(0, 2, 1)), hermitian=True)
    C = 0.5 * (C + C.transpose(0, 2, 1))
    return C if span is None else C * np.outer(span, span)[None]


def anchor_limits(limits: dict, names: list[str], anchor: dict) -> dict:
    """The limits ``limits`` ({name: (lo, hi)}, every mass free) in the anchor's scale: a scaled
    parameter reaches [lo x anchor mass / the anchor's upper limit, hi x anchor mass / its lower
    limit]; the anchor's own mass is held within +-0.1 %."""
    ref = f"{anchor['body']}.mass"
    kg, (lo_a, hi_a) = anchor["mass"], limits[ref]
    out = {}
    for n in names:
        lo, hi = limits[n]
        out[n] = (kg * 0.999, kg * 1.001) if n == ref else \
            (lo * kg / hi_a, hi * kg / lo_a) if _scaled(n) else (lo, hi)
    return out


def interval(values: np.ndarray, level: float) -> list[float]:
    """The equal-tailed ``level`` interval of samples ``values`` (n,) (linear interpolation)."""
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(np.asarray(values, float), [a, 1.0 - a])
    return [float(lo), float(hi)]


def _kind(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _scaled(name: str) -> bool:
    """Whether parameter ``name`` is proportional to the mass scale (``SCALED``, not a coefficient)."""
    return _kind(name) in SCALED and name not in COEFFICIENTS


def limit_reason(name: str, side: str, anchor: dict) -> str:
    """Why parameter ``name`` may end at its ``side`` ("lower" | "upper") limit, as far as known."""
    kind = _kind(name)
    scaled = "" if anchor.get("known") else " (of the fit, every mass free: extra.box)"
    if name in COEFFICIENTS:
        surface = "the floor" if name.startswith("floor") else "the pusher's tip"
        return (f"the Coulomb coefficient of {surface} is unobserved on this clip (nothing slides against it)"
                if side == "lower" else
                f"the Coulomb coefficient of {surface} reaches its upper limit: the parts stick where the model "
                f"would let them slide, or an unmodelled force holds them (a position-controlled push shows "
                f"the floor's coefficient only weakly: docs/decisions.md)")
    if kind == "mass":
        return (f"the mass ratio to {anchor.get('body')} reaches what the density limits allow "
                f"(identify.bounds.density_min/max x volume): a part denser or lighter than they allow, a wrong "
                f"shape volume, or a wrong articulation")
    if kind in ("damping", "friction") and side == "lower":
        return f"no {kind} is measurable on this clip: the motion is explained without it"
    if kind in ("damping", "friction"):
        return (f"the {kind} limit (identify.bounds.{kind}_max_revolute/prismatic{scaled}) is reached: "
                f"raise it if the joint is that {'damped' if kind == 'damping' else 'stiff'}, or an "
                f"unmodelled force (a cable, a motor) is slowing the joint")
    return "the motion does not pin this parameter down within its limits"


def converged(log_likelihood, dims: int, n: int) -> np.ndarray:
    """(n,) bool: the particles whose log-likelihood is within chi2_dims(0.999) / 2 of the best
    (every particle when ``log_likelihood`` is None or of another length, or ``dims`` is 0)."""
    from scipy.stats import chi2

    if log_likelihood is None or len(log_likelihood) != n or dims <= 0 or n == 0:
        return np.ones(n, bool)
    ll = np.nan_to_num(np.asarray(log_likelihood, float), nan=-np.inf)
    return ll >= ll.max() - 0.5 * chi2.ppf(0.999, dims)


def matched_kernels(X: np.ndarray, laplace: np.ndarray) -> np.ndarray:
    """Kernels (K, P, P) that widen particles X (K, P) to their Laplace covariances ``laplace``
    (K, P, P): each particle's kernel is its Laplace covariance less the particles' own spread S,
    where that is positive (in the Laplace covariance's whitened coordinates: V max(1 - w, 0) V^T
    for eigenpairs (w, V) of the whitened S). A mixture at the particles with these kernels has
    about the Laplace covariance: the Laplace approximation where the particles have collapsed to
    one point, their own spread where they cover the posterior, and no more than the larger."""
    X = np.asarray(X, float)
    S = np.cov(X.T).reshape(X.shape[1], X.shape[1]) if len(X) > 1 else np.zeros((X.shape[1],) * 2)
    out = np.zeros_like(np.asarray(laplace, float))
    for i, C in enumerate(np.asarray(laplace, float)):
        lam, U = np.linalg.eigh(0.5 * (C + C.T))
        ok = lam > 1e-12 * max(lam.max(), 1e-300)
        if not ok.any():
            continue
        R = U[:, ok] * np.sqrt(lam[ok])                       # C = R R^T on its range
        Ri = U[:, ok] / np.sqrt(lam[ok])                      # whitening: Ri^T C Ri = I
        w, V = np.linalg.eigh(Ri.T @ S @ Ri)
        K = R @ (V * np.clip(1.0 - w, 0.0, None)) @ V.T @ R.T
        out[i] = 0.5 * (K + K.T)
    return out


def posterior_samples(limits: list[tuple[float, float]], particles: np.ndarray, log_likelihood=None, dims: int = 0,
                      kernel_covariance=None, draws: int = DRAWS, seed: int = 0, laplace=None,
                      noise_scale: float = 1.0) -> tuple[np.ndarray, int]:
    """Samples (M, P) of the posterior the particles (N, P) stand for, and how many particles were
    left out as unconverged.

    A particle whose log-likelihood is below the best by more than chi2_dims(0.999) / 2 (what a
    posterior sample over ``dims`` free coordinates falls short of the maximum by once in a
    thousand) is a straggler the method did not bring in, and is left out. The approximation is a
    mixture of Gaussians at the kept particles, equal weights, ``draws`` samples of it truncated to
    the ``limits``:
    - ``laplace`` (N, P, P), each particle's Laplace covariance: kernels ``matched_kernels``, and
      the whole mixture (the particles' offsets from their mean, and the kernels) scaled to the
      noise variance ``noise_scale`` x the one the fit assumed (``identify.noise_scale``);
    - else ``kernel_covariance`` (P, P), one kernel for all (a kernel density,
      models/inference/svgd_newton.py);
    - else the particles themselves."""
    X = np.asarray(particles, float)
    keep = converged(log_likelihood, dims, len(X))
    X = X[keep]
    P = X.shape[1] if X.ndim == 2 else 0
    if laplace is not None and np.shape(laplace) == (len(keep), P, P) and len(X):
        centre = X.mean(0)
        C = matched_kernels(X, np.asarray(laplace, float)[keep]) * noise_scale
        X = centre + np.sqrt(noise_scale) * (X - centre)
    elif kernel_covariance is not None and np.shape(kernel_covariance) == (P, P) and len(X):
        C = np.broadcast_to(np.asarray(kernel_covariance, float), (len(X), P, P))
    else:
        return X, int((~keep).sum())
    rng = np.random.default_rng(seed)
    w, V = np.linalg.eigh(0.5 * (C + C.transpose(0, 2, 1)))
    L = V * np.sqrt(np.clip(w, 0.0, None))[:, None, :]              # (K, P, P): L L^T = C
    lo, hi = (np.array(v) for v in zip(*limits))
    out, n = [], 0
    for _ in range(20):                       # rejection: the posterior is zero outside the limits
        idx = rng.integers(len(X), size=draws)
        Y = X[idx] + np.einsum("nij,nj->ni", L[idx], rng.standard_normal((draws, P)))
        Y = Y[np.all((Y >= lo) & (Y <= hi), 1)]
        out.append(Y)
        n += len(Y)
        if n >= draws:
            break
    Y = np.concatenate(out)[:draws]
    return (Y if len(Y) else X), int((~keep).sum())


def summarise(names: list[str], limits: dict, estimate: dict, particles: np.ndarray, anchor: dict | None,
              known: tuple = (), log_likelihood=None, dims: int = 0, kernel_covariance=None,
              box: tuple[dict, dict] | None = None, laplace=None, noise_scale: float = 1.0) -> dict:
    """{"scale", "quantities", "at_limit", "particles_identical", "samples"} (module docstring) of
    particles (N, P) over ``names``; ``anchor``: ``scale_anchor``'s dict (None: no anchor, every
    parameter is reported as it is); ``known``: bodies of known mass (held within a sliver, not
    reported). The intervals are those of ``posterior_samples`` (``log_likelihood`` (N,) of the
    particles, ``dims`` free coordinates, ``laplace`` (N, P, P) and ``noise_scale``, or
    ``kernel_covariance`` (P, P), physical). ``box``: (limits,
    estimate) of the fit where the posterior was rescaled to the anchor afterwards (``to_anchor``):
    ``at_limit`` judges damping and friction there, mass ratios on the rescaled limits."""
    P0 = np.asarray(particles, float).reshape(-1, len(names))
    X, excluded = posterior_samples([limits[n] for n in names], P0, log_likelihood, dims, kernel_covariance,
                                    laplace=laplace, noise_scale=noise_scale)
    anchor = dict(anchor or {})
    ref = f"{anchor['body']}.mass" if anchor.get("body") else None
    fixed = {ref} if ref else set()
    fixed |= {f"{b}.mass" for b in known}
    if ref in names:
        ref_col, ref_est = X[:, names.index(ref)], estimate[ref]
    else:
        ref_col, ref_est = np.full(len(X), float(anchor.get("mass", 1.0))), float(anchor.get("mass", 1.0))
    by_ratio = ref is not None and not anchor.get("known", False)
    quantities = {}
    for i, n in enumerate(names):
        if n in fixed:
            continue
        if by_ratio and _scaled(n):
            label, v, est = f"{n}/{ref}", X[:, i] / ref_col, estimate[n] / ref_est
        else:
            label, v, est = n, X[:, i], estimate[n]
        quantities[label] = {"estimate": float(est), "median": float(np.median(v)),
                             "interval50": interval(v, 0.5), "interval90": interval(v, 0.9)}
    at_limit = []
    for n in names:
        if n in fixed:
            continue
        # a mass ratio is bounded by the rescaled limits; a damping or friction by the fit's box
        lims, est = box if box and _kind(n) != "mass" else (limits, estimate)
        lo, hi = lims[n]
        tol = LIMIT_FRACTION * (hi - lo)
        for side, limit, hit in (("lower", lo, est[n] - lo <= tol), ("upper", hi, hi - est[n] <= tol)):
            if hit:
                at_limit.append({"parameter": n, "side": side, "value": float(est[n]), "limit": float(limit),
                                 "reason": limit_reason(n, side, anchor)})
    scale = {k: anchor[k] for k in ("body", "mass", "known", "source") if k in anchor}
    if anchor and not anchor.get("known", False):
        scale["note"] = (f"{SCALE_NOTE}; masses, damping and friction are in the scale of {anchor['body']} = "
                         f"{anchor['mass']:.4g} kg, and only their ratios to it are identified")
    elif anchor:
        scale["note"] = f"the scale is set by the known mass of {anchor['body']} ({anchor['mass']:.4g} kg)"
    spread = np.ptp(P0, axis=0) if len(P0) else np.zeros(len(names))
    single = bool(len(P0) > 1 and np.all(spread <= 1e-6 * np.maximum(np.abs(P0).max(0), 1e-12)))
    P = len(names)
    source = ("Laplace mixture of the particles" if np.shape(laplace) == (len(P0), P, P) else
              "kernel density of the particles" if np.shape(kernel_covariance) == (P, P) else "particles")
    samples = {"from": source if len(P0) - excluded >= 1 else "particles", "count": int(len(X)),
               "particles_left_out": excluded}
    if source.startswith("Laplace"):
        samples["noise_scale"] = float(noise_scale)
    return {"scale": scale, "quantities": quantities, "at_limit": at_limit, "particles_identical": single,
            "samples": samples}
