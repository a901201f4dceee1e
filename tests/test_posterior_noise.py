"""The posterior's width when the observation noise is misjudged: identify's noise_scale (the
best fit's reduced chi-square) and the particles' Laplace mixture, on a damped oscillator
written in torch whose true noise and Laplace covariance are known independently."""
import numpy as np
import pytest
import torch
from oscillator import DT, TRUTH, oscillator
from vid2sim.models.inference import Problem, Shooting, infer
from vid2sim.pipeline.identifiability import posterior_samples
from vid2sim.pipeline.identify import noise_scale, posterior_from

NOISE = 0.01                                             # true observation noise std


def problem(sigma: float) -> Problem:
    traj = oscillator(TRUTH[None], torch.tensor([[1.0, 0.0]], dtype=torch.float64), 60)[0]
    pos = traj[:, :1] + NOISE * torch.randn(60, 1, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    vel = torch.gradient(pos[:, 0], spacing=DT)[0][:, None]
    return Problem(("k", "b"), [0.5, 0.0], [10.0, 2.0], oscillator, [pos], [torch.cat([pos, vel], 1)],
                   observe=lambda s: s[..., :1], sigma=sigma)


def laplace_sd_at_truth() -> np.ndarray:
    """Marginal posterior std of (k, b) by the Laplace approximation at the truth with the true
    noise (finite differences over parameters and start state, the start profiled out)."""
    prob = problem(NOISE)
    sh, h = Shooting(prob, 1), 1e-6
    z0 = torch.cat([TRUTH, torch.tensor([1.0, 0.0], dtype=torch.float64)])
    Z = z0[None].repeat(5, 1)
    Z[1:] += torch.eye(4, dtype=torch.float64) * h
    with torch.no_grad():
        r = sh.residuals(Z[:, :2], Z[:, None, 2:]).reshape(5, -1)
    J = ((r[1:] - r[:1]) / h).numpy()
    return np.sqrt(np.diag(np.linalg.inv(J @ J.T))[:2])


def test_noise_scale_and_laplace_mixture_recover_the_posterior_width_under_a_3x_noise_guess():
    prob = problem(3 * NOISE)                       # the noise guessed 3x too large
    res = infer("csvgd", prob, particles=16, iterations=150, seed=0, windows=4)
    c = noise_scale(prob, res)
    assert 0.6 / 9 < c < 1.6 / 9, c                 # (true / guessed noise)^2 = 1/9, chi-square spread
    assert noise_scale(prob, res, floor=2 * NOISE) == pytest.approx((2 / 3) ** 2)   # a std floor binds
    post = posterior_from(res, prob)
    L = np.asarray(post.extra["laplace_covariance"])
    assert L.shape == (16, 2, 2)

    def sd(scale: float) -> np.ndarray:
        Y, _ = posterior_samples([post.limits[n] for n in post.names], post.particles,
                                 post.extra["particle_log_likelihood"], 4, draws=20_000, laplace=L, noise_scale=scale)
        return Y.std(0) / laplace_sd_at_truth()

    assert np.all((sd(c) > 0.7) & (sd(c) < 1.4)), sd(c)
    assert np.all(sd(1.0) > 2.0), sd(1.0)           # without the correction: about 3x too wide


def test_laplace_mixture_has_the_laplace_covariance_whether_the_particles_collapsed_or_not():
    """matched_kernels through posterior_samples: particles at one point, or spread as draws of the
    Laplace Gaussian itself, give a mixture of that covariance (within sampling error); a
    straggler is left out with its covariance; noise_scale scales the covariance."""
    rng = np.random.default_rng(0)
    cov = np.array([[4e-4, 3e-4], [3e-4, 9e-4]])
    lims = [(-5.0, 5.0)] * 2
    X = np.vstack([np.full((15, 2), 0.5), [[3.0, 3.0]]])
    L = np.broadcast_to(cov, (16, 2, 2))
    ll = np.r_[np.zeros(15), -1e4]
    Y, left = posterior_samples(lims, X, ll, 2, draws=40_000, laplace=L)
    assert left == 1
    assert np.cov(Y.T) == pytest.approx(cov, rel=0.05, abs=1e-5)
    X = 0.5 + rng.multivariate_normal(np.zeros(2), cov, size=16)
    Y, _ = posterior_samples(lims, X, None, 2, draws=40_000, laplace=L)
    assert np.cov(Y.T) == pytest.approx(cov, rel=0.35, abs=1e-4)
    Y, _ = posterior_samples(lims, X, None, 2, draws=40_000, laplace=L, noise_scale=0.25)
    assert np.cov(Y.T) == pytest.approx(0.25 * cov, rel=0.35, abs=0.25e-4)
