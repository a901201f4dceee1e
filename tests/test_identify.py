"""Identify stage on a tiny synthetic double pendulum (truth inputs stand in for track/articulate)."""
import json

import numpy as np
import pytest
import torch

from vid2sim.datasets.synthetic import simulate
from vid2sim.pipeline import identify
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks, Posterior


def truth_inputs(mechanism: str, frames: int):
    """Articulation, joint positions, poses, shapes and truth parameters of a synthetic run (seed 0)."""
    s = simulate(mechanism, seed=0, frames=frames, fps=30.0)
    tr = s.truth
    art, poses = Articulation.from_truth(tr), PoseTracks.from_truth(tr, s.world_from_body, 30.0)
    return art, JointPositions(np.asarray(s.q, float), list(s.joint_names)), poses, s.shapes, tr["params"]


@pytest.fixture(scope="module")
def inputs():
    return truth_inputs("double_pendulum", 12)


def test_parameter_set_and_limits_from_shapes(inputs):
    """link1 (moved by the first revolute joint) anchors the scale at volume x density_anchor, but
    is fitted free within its density limits (identify.anchored rescales afterwards); link2's
    limits are the density limits, the damping limits the configured ones."""
    art, jp, poses, shapes, truth = inputs
    cfg = identify.IdentifyConfig()
    sim = identify.build_simulator(cfg, art, poses, shapes, 30.0)
    assert sim.names == ["link1.mass", "link2.mass", "shoulder.damping", "elbow.damping"]
    v1, v2 = shapes["link1"].volume(), shapes["link2"].volume()
    assert sim.anchor["body"] == "link1" and not sim.anchor["known"]
    assert sim.anchor["mass"] == pytest.approx(500.0 * v1)
    assert sim.lower[0] == pytest.approx(cfg.bounds.density_min * v1) and sim.upper[0] == pytest.approx(3000.0 * v1)
    assert sim.lower[1] == pytest.approx(cfg.bounds.density_min * v2) and sim.upper[1] == pytest.approx(3000.0 * v2)
    assert sim.upper[2] == cfg.bounds.damping_max_revolute
    for i, n in enumerate(sim.names):   # the truth lies inside the limits
        assert sim.lower[i] <= truth[n] <= sim.upper[i]
    # inertia scales with mass (homogeneous parts)
    theta = torch.tensor([[0.3, 0.6, 0.0, 0.0], [0.6, 0.3, 0.0, 0.0]], dtype=torch.float64)
    m = sim.model_for(theta)
    assert torch.allclose(m.inertia[0, 1], 2 * m.inertia[1, 1], rtol=1e-12)


def test_simulator_at_truth_follows_pybullet(inputs):
    """Our dynamics at the true parameters from the observed start: close to PyBullet's clip."""
    art, jp, poses, shapes, truth = inputs
    cfg = identify.IdentifyConfig(shooting=identify.IdentifyShooting(substeps=8))
    sim = identify.build_simulator(cfg, art, poses, shapes, 30.0)
    theta = torch.tensor([[truth[n] for n in sim.names]], dtype=torch.float64)
    q = identify.joint_trajectory(jp, sim.dof_names)
    qd0 = (-3 * q[0] + 4 * q[1] - q[2]) * 15.0    # second-order one-sided difference at t = 0
    x0 = torch.tensor(np.r_[q[0], qd0])[None]
    pred = sim.simulate(theta, x0, 6)[0, :, :2].numpy()
    assert np.abs(pred - q[:6]).max() < 0.03       # rad over 0.17 s (start-velocity error grows)


def test_run_writes_posterior_and_plots(inputs, tmp_path):
    art, jp, poses, shapes, _ = inputs
    cfg = identify.IdentifyConfig(frames=8,
                                  inference=identify.IdentifyInference(method="csvgd", particles=4, iterations=2),
                                  shooting=identify.IdentifyShooting(windows=2, substeps=1))
    post = identify.run(cfg, art, jp, poses, shapes, tmp_path)
    assert post.particles.shape == (4, 4) and post.method == "csvgd"
    for n in post.names:
        lo, hi = post.limits[n]
        assert lo <= post.estimate[n] <= hi
    for f in ("posterior_pairs.png", "trajectories.png", "identify_config.json"):
        assert (tmp_path / f).stat().st_size > 100
    assert json.loads((tmp_path / "identify_config.json").read_text())["inference"]["particles"] == 4
    post.save(tmp_path / Posterior.FILE)
    back = Posterior.load(tmp_path / Posterior.FILE)
    assert back.names == post.names and np.allclose(back.particles, post.particles)


def _errors_at_truth(name: str, frames: int, substeps: tuple) -> dict:
    """{substeps: (frames, 2) |identify's simulator - PyBullet's clip|} of the two-joint
    mechanism ``name`` (seed 0), from the true start state and parameters."""
    from vid2sim.datasets.synthetic.mechanisms import FACTORIES

    art, jp, poses, shapes, truth = truth_inputs(name, frames)
    init = FACTORIES[name]().initial(np.random.default_rng(0))   # simulate()'s initial state for seed 0
    errors = {}
    for sub in substeps:
        cfg = identify.IdentifyConfig(compile=False, shooting=identify.IdentifyShooting(substeps=sub))
        sim = identify.build_simulator(cfg, art, poses, shapes, 30.0)
        theta = torch.tensor([[truth[n] for n in sim.names]], dtype=torch.float64)
        q = identify.joint_trajectory(jp, sim.dof_names)
        x0 = torch.tensor([[0.0, 0.0] + [init.qd[d] for d in sim.dof_names]], dtype=torch.float64)
        with torch.no_grad():
            errors[sub] = np.abs(sim.simulate(theta, x0, frames)[0, :, :2].numpy() - q)
    return errors


def test_default_substeps_follow_pybullet_on_the_swinging_cartpole():
    """At the true start and parameters, the identify simulator's default rate (960 Hz, that of
    forecast's PyBullet twin) follows PyBullet's 960-Hz cartpole over 2 s of large swings to
    float precision; 480 Hz (the earlier default) drifts by about the tracking noise, 4 substeps
    per frame by several times more."""
    errors = {sub: err.max(0) for sub, err in _errors_at_truth("cartpole", 60, (0, 16, 4)).items()}
    assert identify.substeps_for(identify.IdentifyConfig(), 30.0) == 32
    assert errors[0].max() < 1e-5                        # rad or m; measured 6.3e-7 (pole)
    assert 1e-3 < errors[16].max() < 0.015               # measured 0.0073 (pole), 0.0034 (cart)
    assert errors[4].max() > 3 * errors[16].max()        # measured 0.050 (pole)


@pytest.mark.slow  # 4300 eager simulator steps
def test_default_rate_follows_pybullet_on_the_chaotic_double_pendulum():
    """The double pendulum is chaotic: at 480 Hz the simulator at the true start and parameters is
    more than 1 rad off PyBullet's 960-Hz clip after 2 s, at the default 960 Hz within 1e-4 rad
    over 3 s (measured 9.5e-6 after 2 s, 2.8e-5 after 3 s): identify fits the dynamics forecast
    runs the twin with."""
    errors = _errors_at_truth("double_pendulum", 90, (0, 16))
    assert errors[0].max() < 1e-4
    assert errors[16][:60].max() > 1.0


def test_known_masses_fix_the_scale_and_bad_ones_are_named(inputs):
    art, jp, poses, shapes, truth = inputs
    # one known mass fixes the scale after the fit (identify.anchored): the fit's box is unchanged
    known = identify.IdentifyConfig(bounds=identify.IdentifyBounds(masses={"link1": 0.5}))
    sim = identify.build_simulator(known, art, poses, shapes, 30.0)
    i = sim.names.index("link1.mass")
    assert sim.rescale and sim.lower[i] == pytest.approx(known.bounds.density_min * shapes["link1"].volume())
    scale = 0.5 / (500.0 * shapes["link1"].volume())
    assert sim.anchor == pytest.approx({"body": "link1", "mass": 0.5, "known": True, "source": "identify.bounds.masses",
                                        "limit_scale": scale})
    assert sim.upper[sim.names.index("elbow.damping")] == pytest.approx(0.05)
    # two are held during the fit, and the damping limits scale with the first: 0.5 kg against
    # link1's volume x 500 kg/m^3
    both = identify.IdentifyConfig(bounds=identify.IdentifyBounds(masses={"link1": 0.5, "link2": 0.4}))
    sim = identify.build_simulator(both, art, poses, shapes, 30.0)
    assert not sim.rescale
    for n, kg in (("link1", 0.5), ("link2", 0.4)):
        i = sim.names.index(f"{n}.mass")
        assert sim.lower[i] == pytest.approx(kg * 0.999) and sim.upper[i] == pytest.approx(kg * 1.001)
    assert sim.upper[sim.names.index("elbow.damping")] == pytest.approx(0.05 * scale)
    with pytest.raises(ValueError, match="'arm'.*link1, link2"):
        identify.build_simulator(identify.IdentifyConfig(bounds=identify.IdentifyBounds(masses={"arm": 1.0})), art,
                                 poses, shapes, 30.0)
    with pytest.raises(ValueError, match="positive"):
        identify.build_simulator(identify.IdentifyConfig(bounds=identify.IdentifyBounds(masses={"link1": -1.0})), art,
                                 poses, shapes, 30.0)


def test_observation_noise_is_estimated_per_joint_from_the_tracks():
    """sigma=0 (default): each joint's noise from its track's third differences, so a noisier
    joint weighs less; a set sigma applies to every joint."""
    rng = np.random.default_rng(0)
    t = np.arange(300) / 30.0
    q = np.stack([0.3 * np.sin(1.3 * t), 1.5 * np.sin(2.9 * t + 0.4)], 1) + rng.normal(0, [0.0005, 0.003], (300, 2))
    s = identify.observation_sigma(identify.IdentifyConfig(), q)
    np.testing.assert_allclose(s, [0.0005, 0.003], rtol=0.15)
    fixed = identify.IdentifyConfig(noise=identify.IdentifyNoise(sigma=0.01))
    assert identify.observation_sigma(fixed, q).tolist() == [0.01, 0.01]
    smooth = np.stack([np.sin(t), np.cos(t)], 1)
    floored = identify.IdentifyConfig(noise=identify.IdentifyNoise(sigma_floor=2e-4))
    assert identify.observation_sigma(floored, smooth).tolist() == [2e-4, 2e-4]
    with pytest.raises(ValueError, match="too few"):
        identify.observation_sigma(identify.IdentifyConfig(), q[:5])
    with pytest.raises(ValueError, match="sigma"):
        identify.observation_sigma(identify.IdentifyConfig(noise=identify.IdentifyNoise(sigma=-1.0)), q)
