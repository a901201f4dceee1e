"""What identify's posterior determines: the scale anchor, identifiable ratios, limit flags."""
import numpy as np
import pytest
import torch
from scipy.stats import norm

from vid2sim.datasets.synthetic import simulate
from vid2sim.pipeline import identify
from vid2sim.pipeline.artifacts import Articulation, PoseTracks, Posterior
from vid2sim.pipeline.identifiability import SCALE_NOTE, posterior_samples, scale_anchor, summarise
from bench_scripts import load

NAMES = ["cart.mass", "pole.mass", "slider.damping", "hinge.damping"]
LIMITS = {"cart.mass": (2.3976, 2.4024), "pole.mass": (0.12, 3.7), "slider.damping": (0.0, 2.0),
          "hinge.damping": (0.0, 0.05)}
ANCHOR = {"body": "cart", "mass": 2.4, "known": False, "source": "volume x identify.bounds.density_anchor (500 kg/m^3)",
          "limit_scale": 1.0}


def test_free_motion_is_invariant_to_the_mass_scale():
    """The reason only ratios are identifiable, checked on identify's simulator: every mass and
    damping x 3 gives the same cartpole motion (to rounding)."""
    s = simulate("cartpole", seed=0, frames=10, fps=30.0)
    art, poses = Articulation.from_truth(s.truth), PoseTracks.from_truth(s.truth, s.world_from_body, 30.0)
    cfg = identify.IdentifyConfig(compile=False, shooting=identify.IdentifyShooting(substeps=4))
    sim = identify.build_simulator(cfg, art, poses, s.shapes, 30.0)
    theta = torch.tensor([[1.0, 0.2, 0.3, 0.004]], dtype=torch.float64)
    x0 = torch.tensor([[0.0, 0.3, 0.1, -0.5]], dtype=torch.float64)
    with torch.no_grad():
        a = sim.simulate(theta, x0, 30)
        b = sim.simulate(3.0 * theta, x0, 30)
    assert float((a - b).abs().max()) < 1e-9
    assert float((a[0, -1] - a[0, 0]).abs().max()) > 0.1   # it did move


def test_anchor_is_a_known_mass_else_the_first_moving_body():
    vols = {"base": 0.01, "cart": 0.0048, "pole": 0.00124}
    a = scale_anchor({}, ["base", "cart", "pole"], ["fixed", "prismatic", "revolute"], vols, 500.0)
    assert a["body"] == "cart" and a["mass"] == pytest.approx(2.4) and a["limit_scale"] == 1.0 and not a["known"]
    k = scale_anchor({"pole": 0.2}, ["base", "cart", "pole"], ["fixed", "prismatic", "revolute"], vols, 500.0)
    assert k["body"] == "pole" and k["known"] and k["limit_scale"] == pytest.approx(0.2 / 0.62)


def test_summary_reports_ratios_intervals_and_limits():
    rng = np.random.default_rng(0)
    n = 20_000
    X = np.column_stack([np.full(n, 2.4), rng.normal(0.5, 0.01, n), rng.normal(0.72, 0.05, n),
                         np.abs(rng.normal(0.0, 1e-5, n))])
    est = {"cart.mass": 2.4, "pole.mass": 0.5, "slider.damping": 0.72, "hinge.damping": 0.0}
    out = summarise(NAMES, LIMITS, est, X, ANCHOR)
    q = out["quantities"]
    assert set(q) == {"pole.mass/cart.mass", "slider.damping/cart.mass", "hinge.damping/cart.mass"}
    r = q["pole.mass/cart.mass"]
    assert r["estimate"] == pytest.approx(0.5 / 2.4)
    assert r["interval90"] == pytest.approx([(0.5 - norm.ppf(0.95) * 0.01) / 2.4, (0.5 + norm.ppf(0.95) * 0.01) / 2.4],
                                            rel=2e-3)
    assert r["interval50"] == pytest.approx([(0.5 - norm.ppf(0.75) * 0.01) / 2.4, (0.5 + norm.ppf(0.75) * 0.01) / 2.4],
                                            rel=2e-3)
    assert [(h["parameter"], h["side"]) for h in out["at_limit"]] == [("hinge.damping", "lower")]
    assert "no damping is measurable" in out["at_limit"][0]["reason"]
    assert out["scale"]["note"].startswith(SCALE_NOTE) and out["scale"]["body"] == "cart"
    assert not out["particles_identical"]


def test_known_scale_reports_absolute_values_and_upper_limits_name_the_setting():
    known = dict(ANCHOR, mass=1.0, known=True, source="identify.bounds.masses")
    X = np.array([[1.0, 0.2, 1.995, 0.004]] * 4)
    est = dict(zip(NAMES, X[0]))
    out = summarise(NAMES, LIMITS, est, X, known, known=("cart",))
    assert set(out["quantities"]) == {"pole.mass", "slider.damping", "hinge.damping"}
    assert [(h["parameter"], h["side"]) for h in out["at_limit"]] == [("slider.damping", "upper")]
    assert "damping_max" in out["at_limit"][0]["reason"]
    assert out["particles_identical"]


def test_stragglers_are_left_out_and_kernel_density_widens_the_particles():
    """A particle 50 nats below the best (chi2_8(0.999) / 2 = 13 nats) is left out; with a kernel
    covariance the samples are the particles' kernel density: for particles at one point, the
    kernel's normal quantiles."""
    X = np.array([[0.5, 0.7]] * 5 + [[0.9, 0.1]])
    ll = [100.0, 99.0, 98.0, 97.0, 96.0, 50.0]
    Y, left = posterior_samples([(0.0, 1.0), (0.0, 1.0)], X, ll, dims=8)
    assert left == 1 and len(Y) == 5
    C = np.diag([0.01 ** 2, 0.02 ** 2])
    Y, left = posterior_samples([(0.0, 1.0), (0.0, 1.0)], X, ll, dims=8, kernel_covariance=C, draws=20_000)
    assert left == 1 and Y.shape == (20_000, 2)
    assert np.quantile(Y[:, 1], 0.95) - 0.7 == pytest.approx(norm.ppf(0.95) * 0.02, rel=0.03)
    # truncation at a limit: nothing outside [0, 1]
    Y, _ = posterior_samples([(0.0, 1.0), (0.0, 0.71)], X, ll, dims=8, kernel_covariance=C, draws=2000)
    assert Y[:, 1].max() <= 0.71


def test_params_json_round_trips_the_summary(tmp_path):
    X = np.array([[2.4, 0.5, 0.72, 0.001], [2.4, 0.52, 0.7, 0.002]])
    est = dict(zip(NAMES, X[0]))
    ident = summarise(NAMES, LIMITS, est, X, ANCHOR)
    post = Posterior(NAMES, LIMITS, est, X, "csvgd", 1.0, {}, ident)
    post.save(tmp_path / "params.json")
    back = Posterior.load(tmp_path / "params.json")
    assert back.identifiable["quantities"]["pole.mass/cart.mass"]["interval90"] == pytest.approx(
        ident["quantities"]["pole.mass/cart.mass"]["interval90"])
    assert back.identifiable["scale"]["body"] == "cart"


@pytest.mark.slow
def test_csvgd_intervals_hold_a_random_cartpole_truth():
    """scripts/bench_calibration.py on one recording (cartpole, seed 0, random truth, 1.5 s of truth
    tracks + white track noise, identify at the generator's 960 Hz): each identifiable ratio's
    90 % interval holds the truth, and its width is that of the Laplace approximation at the
    best particle within a factor 3 (an independent estimate of the posterior's width)."""

    bench = load("bench_calibration")
    out = bench.one({"mechanism": "cartpole", "seed": 0, "frames": 45, "fps": 30.0,
                     "identify": {"inference": {"method": "csvgd", "particles": 16, "iterations": 150},
                                  "plots": False, "shooting": {"substeps": 32}, "seed": 0}})
    q = out["quantities"]
    assert set(q) == {"pole.mass/cart.mass", "slider.damping/cart.mass", "hinge.damping/cart.mass"}
    for k, r in q.items():
        assert r["in90"], (k, r)
        assert 1 / 3 < r["width90"] / r["laplace_width90"] < 3, (k, r)


def test_rescaling_to_the_anchor_keeps_the_motion_and_stays_within_the_anchored_limits():
    """to_anchor: a particle fitted with every mass free, rescaled so the anchor (cart) weighs its
    anchored mass, moves identically on identify's simulator; its Jacobian matches central
    differences; particles drawn in the box land inside anchor_limits."""
    from vid2sim.pipeline.identifiability import anchor_jacobian, anchor_limits, to_anchor

    s = simulate("cartpole", seed=0, frames=10, fps=30.0)
    art, poses = Articulation.from_truth(s.truth), PoseTracks.from_truth(s.truth, s.world_from_body, 30.0)
    sim = identify.build_simulator(identify.IdentifyConfig(shooting=identify.IdentifyShooting(substeps=4),
                                                           compile=False), art, poses, s.shapes, 30.0)
    names, anchor = list(sim.names), sim.anchor
    theta = np.array([1.0, 0.2, 0.3, 0.004])
    scaled = to_anchor(theta, names, anchor)
    assert scaled[names.index(f"{anchor['body']}.mass")] == pytest.approx(anchor["mass"])
    assert scaled / theta == pytest.approx(np.full(4, anchor["mass"] / theta[0]))
    x0 = torch.tensor([[0.0, 0.3, 0.1, -0.5]], dtype=torch.float64)
    with torch.no_grad():
        a = sim.simulate(torch.as_tensor(theta[None]), x0, 30)
        b = sim.simulate(torch.as_tensor(scaled[None]), x0, 30)
    assert float((a - b).abs().max()) < 1e-9
    h = 1e-7
    fd = np.column_stack([(to_anchor(theta + h * e, names, anchor) - to_anchor(theta - h * e, names, anchor)) / (2 * h)
                          for e in np.eye(4)])
    assert anchor_jacobian(theta, names, anchor) == pytest.approx(fd, rel=1e-6, abs=1e-9)
    box = {n: (float(lo), float(hi)) for n, lo, hi in zip(names, sim.lower, sim.upper)}
    env = anchor_limits(box, names, anchor)
    X = sim.lower + np.random.default_rng(0).random((500, 4)) * (sim.upper - sim.lower)
    Y = to_anchor(X, names, anchor)
    for i, n in enumerate(names):
        assert np.all((Y[:, i] >= env[n][0] - 1e-12) & (Y[:, i] <= env[n][1] + 1e-12)), n


def test_floor_and_tip_friction_at_a_limit_are_explained_as_coefficients():
    """A Coulomb coefficient (floor.friction, tip.friction) at a limit gets its own reason, not the
    joint-friction setting's."""
    from vid2sim.pipeline.identifiability import limit_reason

    anchor = {"body": "box", "mass": 1.0, "known": False}
    assert "floor" in limit_reason("floor.friction", "upper", anchor)
    assert "friction_max" not in limit_reason("floor.friction", "upper", anchor)
    assert "unobserved" in limit_reason("tip.friction", "lower", anchor)
    assert "friction_max_revolute" in limit_reason("hinge.friction", "upper", anchor)
