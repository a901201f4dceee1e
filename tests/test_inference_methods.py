"""Every inference method on a damped oscillator written in torch (known parameters)."""
import pytest
import torch
from oscillator import DT, TRUTH, oscillator
from vid2sim.models.inference import METHODS, Problem, Shooting, infer, nmae, sobol_unit


def problem():
    traj = oscillator(TRUTH[None], torch.tensor([[1.0, 0.0]], dtype=torch.float64), 60)[0]
    pos = traj[:, :1]
    vel = torch.gradient(pos[:, 0], spacing=DT)[0][:, None]   # a rough velocity guess, as from video
    return Problem(("k", "b"), [0.5, 0.0], [10.0, 2.0], oscillator, [pos], [torch.cat([pos, vel], 1)],
                   observe=lambda s: s[..., :1], sigma=0.05)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_method_recovers_oscillator(method):
    prob = problem()
    opts = {"windows": 4} if method == "csvgd" else {}
    res = infer(method, prob, particles=16, iterations=150, seed=0, **opts)
    assert res.theta.shape == (16, 2) and res.start.shape == (16, 1, 2)
    # CMA-ES's polish and CSVGD's Gauss-Newton phase may leave part of the budget unspent
    assert res.evaluations == 16 * 150 or (method in ("cmaes", "csvgd") and 0.9 * 16 * 150 <= res.evaluations <= 16 * 150)
    tol = 0.05 if method in ("mcmc", "svgd") else 0.01   # samplers spread over the posterior; the rest converge
    assert nmae(res.estimate, TRUTH, prob.lower, prob.upper) < tol, res.estimate
    assert ((res.theta >= prob.lower - 1e-9) & (res.theta <= prob.upper + 1e-9)).all()


def test_multiple_shooting_defects_close():
    """The multiple-shooting phase alone (polish=0), with its defaults (defects weighed in observation units, multipliers on their own Adam, c=10): the
    best particle's defects close within 150 iterations (measured 0.006; NMAE 0.001), every
    particle's within 400 (0.026; at 150 iterations the particles the kernel pushes off the
    mode lag, 0.10)."""
    prob = problem()
    res = infer("csvgd", prob, particles=8, iterations=150, seed=0, windows=4, polish=0.0)
    assert res.trace["windows"] == 4 and res.trace["window_length"] == 14
    assert res.trace["final_violation"][res.best] < 0.01    # defects in units of the state spread
    assert nmae(res.estimate, TRUTH, prob.lower, prob.upper) < 0.005, res.estimate
    res = infer("csvgd", prob, particles=8, iterations=400, seed=0, windows=4, polish=0.0)
    assert res.trace["max_violation"][-1] < 0.04 and max(res.trace["final_violation"]) < 0.04


def test_multiple_shooting_defects_close_fixed_rate_multipliers():
    """The earlier scheme (scalar weight, lambda += 0.01 g) with a stiff penalty also closes them."""
    prob = problem()
    res = infer("csvgd", prob, particles=8, iterations=150, seed=0, windows=4, c=10.0, dual="sgd",
                defect_units="scale", lr_multiplier=0.01, polish=0.0)
    assert res.trace["max_violation"][-1] < 0.05


def test_start_weights_price_a_start_error_in_observations():
    """Constant dynamics observed directly: a unit start error (in state_scale) costs
    L x (scale / sigma)^2 per state dimension."""
    def still(theta, x0, steps):
        return x0[:, None].expand(-1, steps, -1)

    traj = torch.stack([torch.linspace(0.0, 1.0, 41), torch.linspace(0.0, 4.0, 41)], 1).double()
    prob = Problem(("a",), [0.0], [1.0], still, [traj], [traj], sigma=0.1)
    sh = Shooting(prob, 4)
    w = sh.start_weights(torch.tensor([0.5], dtype=torch.float64))
    assert torch.allclose(w, sh.L * (prob.state_scale / 0.1) ** 2, rtol=1e-6)
    with pytest.raises(ValueError, match="defect_units"):
        infer("csvgd", prob, particles=2, iterations=1, windows=4, defect_units="nope")


def test_shooting_windows_and_defects_at_truth():
    prob = problem()
    sh = Shooting(prob, 3)
    assert sh.num_windows == 3 and sh.L == 19 and sh.cur.tolist() == [0, 1]
    truth_states = oscillator(TRUTH[None], torch.tensor([[1.0, 0.0]], dtype=torch.float64), 60)[0]
    starts = truth_states[sh.start][None]                   # exact window starts
    ll, ll_k, defects = sh.evaluate(TRUTH[None], starts)
    assert float(defects.abs().max()) < 1e-12
    assert ll_k.shape == (1, 1) and float(ll) == pytest.approx(float(ll_k[0, 0]))


def test_sobol_within_unit_cube_and_seeded():
    a, b = sobol_unit(16, 3, 0), sobol_unit(16, 3, 0)
    assert torch.equal(a, b) and a.shape == (16, 3) and float(a.min()) >= 0 and float(a.max()) <= 1
    assert not torch.equal(a, sobol_unit(16, 3, 1))


def test_unknown_method_and_bad_limits():
    with pytest.raises(ValueError, match="unknown inference method"):
        infer("nope", problem())
    with pytest.raises(ValueError, match="empty limits"):
        Problem(("k",), [1.0], [1.0], oscillator, [torch.zeros(5, 1)], [torch.zeros(5, 2)])


def test_csvgd_polish_ends_on_single_shooting_within_the_budget():
    """polish with Adam steps (precondition="none"): the last quarter of the iterations refines
    each particle by single shooting from its first window's state, less the 4 iterations' worth
    of rollouts (3 x 8 + 3) that scoring both phases costs; within the same budget, and its final
    particles score at least as well."""
    prob = problem()
    plain = infer("csvgd", prob, particles=8, iterations=60, seed=0, windows=4, polish=0.0)
    res = infer("csvgd", prob, particles=8, iterations=60, seed=0, windows=4, polish=0.25, precondition="none")
    assert plain.evaluations == 8 * 60 and res.evaluations == 8 * 45 + 8 * 11 + 3 * 8 + 3
    assert res.trace["polish_iterations"] == 15 and len(res.trace["mean_log_prob"]) == 45
    assert len(res.trace["polish_mean_log_prob"]) == 11 and res.start.shape == (8, 1, 2)
    ph = res.trace["phases"]   # the phase whose particles score higher on the windows is kept (here 115.6 vs 114.0)
    assert ph["kept"] == ("multiple" if ph["multiple_shooting"] > ph["single_shooting"] else "single")
    assert ph["kept"] == "multiple" and res.score is not None and int(res.score.argmax()) == res.best
    assert float(res.log_likelihood.max()) >= float(plain.log_likelihood.max()) - 1.0
    assert nmae(res.estimate, TRUTH, prob.lower, prob.upper) < 0.02, res.estimate


def test_cmaes_least_squares_polish_reaches_the_maximum_within_the_budget():
    """A budget too small for CMA-ES alone: its last half goes to Levenberg-Marquardt on the
    whitened residuals, which ends at the maximum (same start, same generations before it)."""
    prob = problem()
    plain = infer("cmaes", prob, particles=16, iterations=10, seed=0, polish=0.0)
    res = infer("cmaes", prob, particles=16, iterations=10, seed=0, polish=0.5)
    assert plain.evaluations == 16 * 10 and res.evaluations <= 16 * 10
    info = res.trace["polish"]
    assert len(res.trace["best_log_prob"]) == 5 and info["batches"] <= 5
    assert info["log_likelihood_after"] > info["log_likelihood_before"]
    assert float(res.log_likelihood.max()) == pytest.approx(info["log_likelihood_after"])
    # plain CMA-ES is still far off after 10 generations; the polish lands on the truth
    assert nmae(plain.estimate, TRUTH, prob.lower, prob.upper) > 0.01
    assert nmae(res.estimate, TRUTH, prob.lower, prob.upper) < 0.005, res.estimate
    r = Shooting(prob, 1).residuals(res.theta[:1], res.start[:1])
    assert r.shape == (1, 1, 59, 1)  # single shooting: the first L = T - 1 samples
    with pytest.raises(ValueError, match="polish"):
        infer("cmaes", prob, particles=8, iterations=20, polish=1.0)
