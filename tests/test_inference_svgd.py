"""SVGD engine and metrics against problems with known answers."""
import math

import numpy as np
import pytest
import torch

from vid2sim.models.inference import knn_kl, mmd, nmae, rbf_kernel, run_svgd, svgd_direction, trajectory_metrics

MEAN = torch.tensor([1.0, -2.0], dtype=torch.float64)
COV = torch.tensor([[1.0, 0.5], [0.5, 2.0]], dtype=torch.float64)


def gaussian_logp(x):
    d = x - MEAN
    return -0.5 * (d @ torch.linalg.inv(COV) * d).sum(1)


def test_median_heuristic_bandwidth():
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    K, h = rbf_kernel(x)
    # squared distances 1, 4, 5 -> median 4; h = 4 / log(4)
    assert float(h) == pytest.approx(4.0 / math.log(4.0), rel=1e-12)
    assert float(K[0, 1]) == pytest.approx(math.exp(-1.0 / float(h)), rel=1e-12)


def test_svgd_direction_batch_independent_rows_and_attraction():
    x = torch.randn(5, 2, dtype=torch.float64)
    g = torch.randn(5, 2, dtype=torch.float64)
    phi = svgd_direction(x, g)
    # permuting particles permutes the update
    perm = torch.tensor([3, 0, 4, 1, 2])
    assert torch.allclose(svgd_direction(x[perm], g[perm]), phi[perm], atol=1e-12)
    # a single particle follows its own gradient
    assert torch.allclose(svgd_direction(x[:1], g[:1]), g[:1])


def test_svgd_samples_2d_gaussian():
    torch.manual_seed(0)
    x0 = torch.randn(100, 2, dtype=torch.float64) * 0.5
    x, logp, _ = run_svgd(lambda x: (gaussian_logp(x), None), x0, iterations=400, lr=0.05, lr_final=0.01)
    assert torch.allclose(x.mean(0), MEAN, atol=0.15)
    cov = torch.cov(x.T)
    assert torch.allclose(cov, COV, atol=0.35), cov   # SVGD with 100 particles: within ~20 %


@pytest.mark.parametrize("dual,rate", [("sgd", 0.05), ("adam", 1.0)])
def test_mdmm_enforces_equality_constraint(dual, rate):
    """Maximise a Gaussian subject to x0 + x1 = 1 (per-particle multipliers): analytic optimum known,
    with fixed-rate multiplier steps and with the multipliers on their own Adam."""
    torch.manual_seed(1)

    def density(x):
        return gaussian_logp(x), (x[:, :1] + x[:, 1:] - 1.0)

    x0 = torch.randn(8, 2, dtype=torch.float64)
    x, _, tr = run_svgd(density, x0, iterations=1000, lr=0.05, lr_final=0.005, c=1.0, lr_multiplier=rate,
                        use_kernel=False, dual=dual)
    assert float((x.sum(1) - 1).abs().max()) < 1e-3
    # optimum on the line: x = MEAN + COV a (a a scalar multiple of (1, 1)) with sum 1
    ones = torch.ones(2, dtype=torch.float64)
    a = (1.0 - MEAN.sum()) / (ones @ COV @ ones)
    x_star = MEAN + a * (COV @ ones)
    assert torch.allclose(x, x_star.expand_as(x), atol=1e-4)
    assert tr.max_violation[-1] < 1e-3 and max(tr.final_violation) < 1e-3
    with pytest.raises(ValueError, match="dual"):
        run_svgd(density, x0, iterations=1, dual="newton")


def test_knn_kl_and_mmd_known_values():
    rng = np.random.default_rng(0)
    p = rng.standard_normal((1500, 1))
    q = rng.standard_normal((1500, 1)) + 1.0
    p2 = rng.standard_normal((1500, 1))
    assert knn_kl(p, q) == pytest.approx(0.5, abs=0.1)      # KL(N(0,1) || N(1,1)) = 0.5
    assert knn_kl(q, p) == pytest.approx(0.5, abs=0.1)
    assert abs(knn_kl(p, p2)) < 0.05
    assert abs(mmd(p, p2)) < 5e-3 and mmd(p, q) > 0.1
    m = trajectory_metrics(p.reshape(-1, 1, 1)[:300], q.reshape(-1, 1, 1)[:300])
    assert set(m) == {"kl_real_sim", "kl_sim_real", "mmd"} and m["mmd"] > 0.05


def test_nmae():
    assert nmae([1.0, 5.0], [0.0, 5.0], [0.0, 0.0], [10.0, 10.0]) == pytest.approx(0.05)
