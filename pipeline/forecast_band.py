"""The posterior predictive band of the forecast stage, in joint coordinates.

Each posterior particle's twin (``forecast._posterior_forecast``: its own URDF, restarted
from the state estimated on the fitted frames, simulated in PyBullet over the held-back
frames) gives body poses; here they become the URDF joint coordinates
(``export.joint_coordinates``; a floating root adds its position x, y, z), the same
function reading the tracked poses of the held-back frames. Per frame and coordinate:
the particles' median and their equal-tailed ``LEVEL`` band (linear interpolation
between particles: with few particles, close to their range) of the forecasts plus
identify's track noise (the posterior predictive of a tracked value), and whether the
tracked value lies inside. ``inside_fraction`` is the share of held-back (frame,
coordinate) samples inside the band: for a calibrated posterior predictive about
``LEVEL``, lower where something the band does not carry matters (the restart state's
error, the integrator, unmodelled forces).

``posterior_parameters`` chooses what is simulated: draws of the particles' kernel density
where that is the method's posterior (csvgd), else particles; stragglers (particles far
below the best log-likelihood, ``identifiability.converged``) are left out either way.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import norm

from vid2sim.pipeline import export
from vid2sim.pipeline.artifacts import Articulation, PoseTracks, Posterior
from vid2sim.pipeline.identifiability import converged, posterior_samples

LEVEL = 0.9
NOISE_DRAWS = 256  # normal quantiles of the track noise added to each forecast


def posterior_parameters(post: Posterior, n: int) -> np.ndarray:
    """At most ``n`` parameter vectors (n, P) of ``post``'s posterior: draws of the particles'
    Gaussian mixture where the method gives one (``extra.laplace_covariance`` and ``noise_scale``,
    csvgd, or ``extra.kernel_covariance``; ``identifiability.posterior_samples``, stragglers left
    out, fixed seed), else the particles of ``pick_particles``."""
    if n <= 0 or post.particles.shape[0] == 0:
        return np.zeros((0, len(post.names)))
    ex, P = post.extra, len(post.names)
    C, L = ex.get("kernel_covariance"), ex.get("laplace_covariance")
    if np.shape(C) == (P, P) or np.shape(L) == (len(post.particles), P, P):
        dims = len(post.names) + len(ex.get("start_state", ()))
        Y, _ = posterior_samples([post.limits[k] for k in post.names], post.particles,
                                 ex.get("particle_log_likelihood"), dims, C, draws=n, laplace=L,
                                 noise_scale=ex.get("noise_scale", 1.0))
        if len(Y) == n:
            return Y
    return post.particles[pick_particles(post, n)]


def pick_particles(post: Posterior, n: int) -> np.ndarray:
    """Indices of at most ``n`` particles of ``post``, evenly spread over those that are not
    stragglers (their log-likelihood within chi2_dims(0.999) / 2 of the best)."""
    N = post.particles.shape[0]
    if n <= 0 or N == 0:
        return np.zeros(0, int)
    dims = len(post.names) + len(post.extra.get("start_state", ()))
    ok = np.flatnonzero(converged(post.extra.get("particle_log_likelihood"), dims, N))
    return ok[np.linspace(0, len(ok) - 1, min(n, len(ok))).round().astype(int)]


def coordinates(art: Articulation, tracks: PoseTracks) -> tuple[list[str], np.ndarray]:
    """(names, (T, C)): joint coordinates of body poses (rad or m), and a floating root's position."""
    names, q = export.joint_coordinates(art, tracks)
    root = export.root_poses(art, tracks)
    if root is not None:
        names, q = names + ["root_x", "root_y", "root_z"], np.concatenate([q, root[:, :3]], 1)
    return list(names), q


def joint_band(art: Articulation, tracks: PoseTracks, at: int, runs: list[np.ndarray], level: float = LEVEL,
               sigma: dict | None = None) -> dict:
    """The band of particle forecasts ``runs`` (K arrays (steps, M, 4, 4), bodies in ``tracks``'
    order, row k = frame at + 1 + k) against ``tracks`` (every frame; ``at``: last fitted frame).
    ``sigma`` {coordinate: std}: identify's observation noise of the tracks (params ``extra.sigma``),
    added to each forecast (``NOISE_DRAWS`` normal quantiles) so that the band is the posterior
    predictive of tracked values; coordinates it lacks get none.

    -> {"names", "frames" (steps,), "level", "particles", "median"/"lower"/"upper"/"observed"
    (steps, C) lists, "context_frames", "context" (the fitted frames before, (n, C)),
    "inside_fraction", "inside_per_coordinate", "noise" {coordinate: std},
    "inside_fraction_without_noise" (the band of the forecasts alone)}."""
    steps = min(r.shape[0] for r in runs)
    head = tracks.world_from_body[:at + 1]

    def with_head(W: np.ndarray) -> PoseTracks:
        return PoseTracks(np.concatenate([head, W[:steps]]), list(tracks.body_names), list(tracks.shape_names),
                          np.zeros(at + 1 + steps), tracks.fps)

    names, q_obs = coordinates(art, with_head(tracks.world_from_body[at + 1:at + 1 + steps]))
    Q = np.stack([coordinates(art, with_head(W))[1][at + 1:] for W in runs])           # (K, steps, C)
    a = (1.0 - level) / 2.0
    observed = q_obs[at + 1:]
    bare_lo, bare_hi = np.quantile(Q, [a, 1.0 - a], axis=0)
    noise = np.array([float((sigma or {}).get(n, 0.0)) for n in names])
    z = norm.ppf((np.arange(NOISE_DRAWS) + 0.5) / NOISE_DRAWS)
    Qn = (Q[:, None] + z[None, :, None, None] * noise).reshape(-1, *Q.shape[1:])
    lower, median, upper = np.quantile(Qn, [a, 0.5, 1.0 - a], axis=0)
    inside = (observed >= lower) & (observed <= upper)
    bare = (observed >= bare_lo) & (observed <= bare_hi)
    start = max(0, at - 2 * steps)
    return {"names": names, "frames": list(range(at + 1, at + 1 + steps)), "level": level, "particles": len(runs),
            "median": median.tolist(), "lower": lower.tolist(), "upper": upper.tolist(), "observed": observed.tolist(),
            "context_frames": list(range(start, at + 1)), "context": q_obs[start:at + 1].tolist(),
            "inside_fraction": float(inside.mean()) if inside.size else float("nan"),
            "inside_per_coordinate": {n: float(inside[:, i].mean()) for i, n in enumerate(names)},
            "noise": dict(zip(names, noise.tolist())),
            "inside_fraction_without_noise": float(bare.mean()) if bare.size else float("nan")}


def plot_band(band: dict):
    """A matplotlib figure: per coordinate, the fitted frames before (grey), the particles'
    median and band, and the tracked held-back values (dots)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = band["names"]
    fig, axes = plt.subplots(len(names), 1, figsize=(7, 1.9 * max(len(names), 1)), squeeze=False, sharex=True)
    f, lo, hi = np.asarray(band["frames"]), np.asarray(band["lower"]), np.asarray(band["upper"])
    med, obs, ctx = np.asarray(band["median"]), np.asarray(band["observed"]), np.asarray(band["context"])
    for i, n in enumerate(names):
        ax = axes[i][0]
        if len(ctx):
            ax.plot(band["context_frames"], ctx[:, i], color="0.5", lw=1, label="tracked (fitted)")
        ax.fill_between(f, lo[:, i], hi[:, i], color="tab:blue", alpha=0.25,
                        label=f"{100 * band['level']:.0f} % band ({band['particles']} particles)")
        ax.plot(f, med[:, i], color="tab:blue", lw=1.5, label="median")
        ax.plot(f, obs[:, i], "k.", ms=3, label="tracked (held back)")
        ax.set_ylabel(n, fontsize=7)
        ax.tick_params(labelsize=6)
    axes[0][0].legend(fontsize=6, loc="best")
    axes[-1][0].set_xlabel("frame")
    fig.tight_layout()
    return fig
