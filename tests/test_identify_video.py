"""Pixel-space likelihood of the identify stage (``observation=video``) on a small synthetic
cartpole recording (clean depth, 160x120): the rendered twin at the true trajectory
reproduces the observed depth, the likelihood prefers the true dynamics, gradients are
right (finite differences), and the stage runs end to end."""
import numpy as np
import pytest
import torch

from vid2sim.datasets.recording import open_recording
from vid2sim.datasets.synthetic import make_recording, simulate
from vid2sim.models.inference import Shooting
from vid2sim.pipeline import identify
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks

FRAMES = 30


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    rec = open_recording(make_recording("cartpole", tmp_path_factory.mktemp("rec") / "rec", seed=0, frames=FRAMES,
                                        fps=30.0, size=(160, 120)))
    s = simulate("cartpole", seed=0, frames=FRAMES, fps=30.0)
    tr = s.truth
    art, poses = Articulation.from_truth(tr), PoseTracks.from_truth(tr, s.world_from_body, 30.0)
    jp = JointPositions(np.asarray(s.q, float), list(s.joint_names))
    cfg = identify.IdentifyConfig(observation="video",
                                  shooting=identify.IdentifyShooting(substeps=8),
                                  video=identify.IdentifyVideo(render_dtype="float64"))
    sim = identify.build_simulator(cfg, art, poses, s.shapes, 30.0)
    q = identify.joint_trajectory(jp, sim.dof_names)
    prob = identify.make_video_problem(cfg, sim, identify.make_problem(cfg, sim, q, 30.0), rec, poses, s.shapes)
    return rec, art, jp, poses, s, sim, prob, tr["params"]


def test_rendered_truth_matches_the_observed_depth(case):
    *_, prob, _ = case
    obs = prob.observations[0]
    assert obs.shape == (FRAMES, 1000)
    err = (prob.observe(prob.state_guess[0][None])[0] - obs).abs()
    assert err.median() < 1e-3 and err.quantile(0.9) < 0.01   # m; the rest are soft silhouette edges
    shifted = prob.state_guess[0].clone()
    shifted[:, 0] += 0.02                                      # the cart 2 cm off along its rail
    assert (prob.observe(shifted[None])[0] - obs).abs().mean() > 1.8 * err.mean()


def test_likelihood_prefers_the_true_dynamics(case):
    *_, sim, prob, truth = case
    sh = Shooting(prob, 1)
    theta = torch.tensor([[truth[n] for n in sim.names]], dtype=torch.float64)
    heavy_pole = theta.clone()
    heavy_pole[0, sim.names.index("pole.mass")] *= 4
    damped = theta.clone()
    damped[0, sim.names.index("hinge.damping")] = 0.04
    start = prob.state_guess[0][:1][:, None]  # (1, 1, S)
    ll = [float(sh.evaluate(t, start)[0]) for t in (theta, heavy_pole, damped)]
    assert ll[0] > ll[1] + 50 and ll[0] > ll[2] + 50, ll


def test_observer_gradient_matches_finite_differences(case):
    *_, prob, _ = case
    x = prob.state_guess[0][:2].clone()
    obs = prob.observations[0][:2]

    def loss(s):
        return ((prob.observe(s[None])[0] - obs) ** 2).sum()

    s = x.clone().requires_grad_()
    loss(s).backward()
    for i in range(2):                   # cart and hinge positions of frame 1
        e = torch.zeros_like(x)
        e[1, i] = 1e-6
        fd = (loss(x + e) - loss(x - e)) / 2e-6
        assert float(s.grad[1, i]) == pytest.approx(float(fd), rel=2e-3, abs=1e-6)


def test_identify_from_video_runs_and_records_the_observation(case, tmp_path):
    rec, art, jp, poses, s, *_ = case
    cfg = identify.IdentifyConfig(observation="video", plots=True,
                                  inference=identify.IdentifyInference(particles=4, iterations=3),
                                  video=identify.IdentifyVideo(pixels=300))
    post = identify.run(cfg, art, jp, poses, s.shapes, tmp_path, rec=rec)
    assert post.particles.shape == (4, 4) and np.isfinite(post.log_likelihood)
    assert post.extra["config"]["observation"] == "video"
    assert (tmp_path / "trajectories.png").stat().st_size > 10_000


def test_video_observation_needs_the_recording(case, tmp_path):
    _, art, jp, poses, s, *_ = case
    with pytest.raises(ValueError, match="needs the recording"):
        identify.run(identify.IdentifyConfig(observation="video"), art, jp, poses, s.shapes, tmp_path)
    with pytest.raises(ValueError, match="observation must be one of joints, video"):
        identify.IdentifyConfig(observation="pixels")     # refused when the settings are read


def test_float32_rendering_equals_float64(case):
    rec, art, jp, poses, s, sim, prob, _ = case
    q = identify.joint_trajectory(jp, sim.dof_names)
    cfg = identify.IdentifyConfig(observation="video",
                                  shooting=identify.IdentifyShooting(substeps=8),
                                  video=identify.IdentifyVideo(render_dtype="float32"))
    prob32 = identify.make_video_problem(cfg, sim, identify.make_problem(cfg, sim, q, 30.0), rec, poses, s.shapes)
    x = prob.state_guess[0][None]
    assert (prob32.observe(x) - prob.observe(x)).abs().max() < 1e-4   # m
