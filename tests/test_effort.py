"""A known joint effort (actuation.npz ``joint_effort``): the synthetic ``driven_pendulum``'s
torque, applied by identify's simulator and replayed by forecast's PyBullet twin, checked
against the generator's PyBullet truth (which neither of them made)."""
from __future__ import annotations

import os
import types

import numpy as np
import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")

from vid2sim.datasets.synthetic import actuation_of, simulate  # noqa: E402
from vid2sim.pipeline import export, forecast, identify  # noqa: E402
from vid2sim.pipeline.identify_config import IdentifyConfig  # noqa: E402
from vid2sim.pipeline.identify_effort import attach_effort, forecast_effort  # noqa: E402

FPS = 30.0


@pytest.fixture(scope="module")
def clip():
    return simulate("driven_pendulum", seed=0, frames=150, fps=FPS)


def _problem(st, truth_inputs, frames: int, with_effort: bool):
    art, poses, jp, post = truth_inputs(st, FPS)
    cfg = IdentifyConfig(plots=False, compile=False)
    sim = identify.build_simulator(cfg, art, poses, st.shapes, FPS)
    q = identify.joint_trajectory(jp, sim.dof_names, frames)
    prob = identify.make_problem(cfg, sim, q, FPS)
    rec = types.SimpleNamespace(actuation=actuation_of(st), shapes=st.shapes) if with_effort else None
    driven = attach_effort(cfg, sim, prob, rec, FPS)
    return (driven if driven is not None else (sim, prob)), post


@pytest.mark.parametrize("start", [0, 40])
def test_identify_simulator_with_the_recorded_effort_follows_pybullet(clip, truth_inputs, start):
    """At the true mass and damping, from the true state at frame ``start`` (a shooting window's
    start: the effort rows from there on), 2 s of the simulator against PyBullet's hinge angle."""
    for with_effort, bound in ((True, 0.01), (False, None)):
        (sim, prob), post = _problem(clip, truth_inputs, 150, with_effort)
        theta = torch.tensor([[post.estimate[n] for n in sim.names]], dtype=torch.float64)
        x0 = prob.state_guess[0][start:start + 1]   # the tracked angle and its central-difference rate
        out = sim.simulate(theta, x0, 60)[0, :, 0].numpy()
        err = np.abs(out - prob.observations[0][start:start + 60, 0].numpy()).max()
        if with_effort:
            assert err < bound, err
            effort_err = err
        else:
            assert err > 10 * effort_err, (err, effort_err)   # the torque moves it: without it the model is off


def test_forecast_replays_the_effort_on_the_twin(clip, truth_inputs, tmp_path):
    """The true model exported and restarted in PyBullet at frame 89 from the tracked state:
    with the recorded effort replayed it stays on the truth for 2 s, without it it does not."""
    art, poses, jp, post = truth_inputs(clip, FPS)
    urdf = export.run(export.ExportConfig(), art, post, clip.shapes, poses, tmp_path)
    rec = types.SimpleNamespace(actuation=actuation_of(clip))
    effort = forecast_effort(rec, art)
    assert effort is not None and effort.joints == ("world_to_arm",)
    err = {}
    for name, eff in (("effort", effort), ("none", None)):
        W = forecast.simulate_twin(urdf, art, poses.head(90), 89, 60, FPS, jp=jp, shapes=clip.shapes, effort=eff)
        err[name] = float(np.linalg.norm(W[:, 0, :3, 3] - clip.world_from_body[90:150, 0, :3, 3], axis=-1).max())
    assert err["effort"] < 0.005, err          # m, tip of a 0.3-m arm over 2 s
    assert err["none"] > 5 * err["effort"], err


@pytest.mark.slow
def test_identify_with_the_known_effort_recovers_absolute_mass_and_damping(clip, truth_inputs, tmp_path):
    """Identify on the true tracks (2 s, 15 CSVGD iterations at 240 Hz): with the recorded effort
    the mass and damping come out absolute and near the truth (0.4 kg, 0.02 N m s/rad); without it
    the torque-driven swing is explained by neither, the mass is only the density anchor's and
    the damping/mass ratio is further off."""
    from dataclasses import replace

    art, poses, jp, _ = truth_inputs(clip, FPS)
    cfg = IdentifyConfig(plots=False, compile=False, frames=60)
    cfg = replace(cfg, inference=replace(cfg.inference, iterations=15),
                  shooting=replace(cfg.shooting, substeps=8))
    rec = types.SimpleNamespace(actuation=actuation_of(clip), shapes=clip.shapes)
    out = {}
    for name, r in (("effort", rec), ("none", None)):
        post = identify.run(cfg, art, jp, poses, clip.shapes, tmp_path, rec=r)
        m, d = post.estimate["arm.mass"], post.estimate["world_to_arm.damping"]
        out[name] = (abs(m / 0.4 - 1), abs(d / 0.02 - 1), abs((d / m) / 0.05 - 1), post)
    m_err, d_err, ratio_err, post = out["effort"]
    assert m_err < 0.05 and d_err < 0.2, out["effort"][:3]
    assert "known_effort" in post.identifiable["scale"] and "arm.mass" in post.identifiable["quantities"]
    assert post.extra["known_effort"] == {"joints": ["world_to_arm"], "signs": {"world_to_arm": 1.0}}
    assert out["none"][0] > 0.3 and out["none"][2] > ratio_err, (out["none"][:3], out["effort"][:3])


@pytest.mark.parametrize("seed", [0, 1])
def test_the_effort_sign_is_checked_against_the_tracks(truth_inputs, seed):
    """An axis articulate found reversed reverses the torque: the least-squares check keeps the
    recorded sign on the true tracks and reverses a negated recording."""
    from vid2sim.pipeline.identify_effort import effort_columns, effort_signs

    st = simulate("driven_pendulum", seed=seed, frames=90, fps=FPS)
    art, poses, jp, _ = truth_inputs(st, FPS)
    sim = identify.build_simulator(IdentifyConfig(plots=False, compile=False), art, poses, st.shapes, FPS)
    q = identify.joint_trajectory(jp, sim.dof_names, 90)
    E, joints = effort_columns(types.SimpleNamespace(actuation=actuation_of(st)), list(sim.dof_names))
    assert joints == ("world_to_arm",)
    assert effort_signs(sim, q, E, FPS).tolist() == [1.0]
    assert effort_signs(sim, q, -E, FPS).tolist() == [-1.0]


@pytest.mark.parametrize("name", ["pushed_box", "pushed_cylinder", "driven_pendulum"])
def test_synth_cli_writes_the_known_actuators(tmp_path, monkeypatch, name):
    """``vid2sim synth`` takes the push cases; the recording's actuation.npz holds the pusher's
    rows or the hinge's torque, equal to the generator's own truth."""
    import sys

    from vid2sim.datasets.recording import open_recording
    from vid2sim.pipeline import cli

    monkeypatch.setattr(sys, "argv", ["vid2sim", "synth", name, "--out", str(tmp_path / "rec"), "--frames", "6",
                                      "--size", "80x60"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code in (0, None)
    act = open_recording(tmp_path / "rec").actuation
    st = simulate(name, seed=0, frames=6, fps=FPS)
    if name == "driven_pendulum":
        assert act.names == () and act.effort_joints == ("world_to_arm",)
        np.testing.assert_allclose(act.joint_effort, st.joint_effort)
        assert np.abs(act.joint_effort).max() > 0.05
    else:
        assert act.names == ("pusher",) and act.joint_effort is None
        np.testing.assert_allclose(act.positions(0), st.tip_position)
