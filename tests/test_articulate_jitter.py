"""Articulate on small parts that jitter: a weld whose parts are tracked several mm off, with the
tracker's glitches, stays a weld (not a slider along the jitter), while slow and short real
motions stay joints. The truth is the generator's mechanism; the spoiling mimics what the tracker
did to tree5 in the RealSense-like randomised scene of seed 20 (a 4.5-cm ball 0.7 m away: median
4 mm, up to 59 mm off along the camera's rays; arm_b off by 54 and 20 mm in two frames)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from vid2sim.datasets.synthetic import simulate
from vid2sim.models import geometry
from vid2sim.models.joints import fit
from vid2sim.models.joints.evaluate import add_noise, compare
from vid2sim.pipeline.articulate import ArticulateConfig, run
from vid2sim.pipeline.articulate_motion import coordinate_sigma, glitch_frames, steady_motion_sigma, still_reason
from vid2sim.pipeline.artifacts import PoseTracks

CFG = ArticulateConfig(plots=False)
RAY = np.array([0.33, 0.88, -0.34]) / np.linalg.norm([0.33, 0.88, -0.34])  # a camera ray (azimuth -69 deg)


def _tracker_like_tree5(seed: int, frames: int = 40) -> tuple[object, PoseTracks]:
    """tree5's true poses with 0.3 mm / 0.1 deg white noise on every part, then: ball_b's
    orientation kept at frame 0's (a sphere's turn is not seen), its position off
    along the camera ray by 4 mm white noise plus 15-55 mm in every fourth frame;
    fin_a by 5 mm along its own x; arm_b by a 5-mm bias that wanders, and 20-55 mm off in
    three frames (the tracker's glitches)."""
    sim = simulate("tree5", seed=seed, frames=frames, fps=30.0)
    names = [b["name"] for b in sim.truth["bodies"]]
    W = add_noise(sim.world_from_body, 0.0003, 0.1, seed=seed)
    rng = np.random.default_rng(seed + 100)
    ball, fin, arm_b = (names.index(n) for n in ("ball_b", "fin_a", "arm_b"))
    off = rng.normal(0, 0.004, frames)
    far = np.arange(rng.integers(4), frames, 4)  # a quarter of the frames, one in four
    off[far] += rng.uniform(0.015, 0.055, len(far)) * rng.choice([-1, 1], len(far))
    W[:, ball, :3, 3] += off[:, None] * RAY
    W[:, ball, :3, :3] = W[0, ball, :3, :3]  # the tracker leaves a sphere's orientation where it was
    W[:, fin, :3, 3] += rng.normal(0, 0.005, frames)[:, None] * W[:, fin, :3, 0]
    bias = np.cumsum(rng.normal(0, 0.0015, (frames, 3)), 0)
    W[:, arm_b, :3, 3] += 0.005 * bias / np.abs(bias).max()
    for t in rng.choice(np.arange(5, frames - 5), 3, replace=False):
        W[t, arm_b, :3, 3] += rng.uniform(0.02, 0.055) * (lambda v: v / np.linalg.norm(v))(rng.normal(size=3))
    shape_of = {b["name"]: b["shape"] for b in sim.truth["bodies"]}
    return sim, PoseTracks(W, names, [shape_of[n] for n in names], np.zeros(frames), 30.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree5_welds_with_jittering_parts_stay_welds(seed, tmp_path):
    """The ball and the fin stay welded to their arms, and arm_b (with the ball) hangs from
    arm_a by its hinge, on tracks spoiled as the tracker spoils them; the hinge axes within
    6 deg of the truth (arm_b's wandering 5-mm bias tilts its hinge)."""
    sim, poses = _tracker_like_tree5(seed)
    art, _ = run(CFG, poses, tmp_path, shapes=sim.shapes)
    c = compare(art, sim.truth, (poses.world_from_body[0], sim.world_from_body[0]))
    found = sorted((j.parent, j.child, j.type) for j in art.joints)
    assert c["tree_ok"] and c["types_ok"], found
    axes = [r["axis_err_deg"] for r in c["joints"] if r.get("axis_err_deg") is not None]
    assert len(axes) == 2 and max(axes) <= 6.0, axes


def _slide(frames: int, travel_m: float, jitter_m: float, seed: int) -> np.ndarray:
    """(T, 1, 4, 4) a box sliding ``travel_m`` along world x at constant speed over the clip,
    tracked with white noise of ``jitter_m`` per axis and 0.3 deg."""
    W = np.tile(np.eye(4), (frames, 1, 1, 1))
    W[:, 0, :3, 3] = [0.1, 0.2, 0.8]
    W[:, 0, 0, 3] += np.linspace(0.0, travel_m, frames)
    return add_noise(W, jitter_m, 0.3, seed=seed)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_slow_short_slide_stays_prismatic(seed, tmp_path):
    """A 3-cm slide over 40 frames (0.75 mm a frame) tracked with 2 mm of white noise: a
    prismatic joint to the world along x (within 5 deg), not a weld."""
    W = _slide(40, 0.03, 0.002, seed)
    art, _ = run(CFG, PoseTracks(W, ["box"], ["box"], np.zeros(40), 30.0), tmp_path)
    (j,) = art.joints
    assert j.type == "prismatic", j
    assert np.degrees(np.arccos(abs(j.axis[0]))) <= 5.0, j.axis


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_2_cm_slide_under_measured_white_noise_keeps_that_noise_and_stays_prismatic(seed, tmp_path):
    """A 2-cm slide over 40 frames tracked with 2 mm of white noise, which the third differences
    measure (2.1-2.4 mm): the noise check reads the slider's own residuals (Birge ratios 1), not
    the weld's, whose excess over the measured noise is the slide (2.0 x; with the noise doubled
    the slide was 5 sigma and welded, in 5 of 6 seeds), so the joint stays prismatic along x
    (within 8 deg: 2 cm of travel against 2 mm of noise)."""
    W = _slide(40, 0.02, 0.002, seed)
    art, _ = run(CFG, PoseTracks(W, ["box"], ["box"], np.zeros(40), 30.0), tmp_path)
    (j,) = art.joints
    noise = json.loads((tmp_path / "articulate_costs.json").read_text())["noise"]
    assert noise["birge_ratios"] == [1.0, 1.0], noise
    assert 0.0018 <= noise["position_m"] <= 0.0025, noise
    assert j.type == "prismatic", j
    assert np.degrees(np.arccos(abs(j.axis[0]))) <= 8.0, j.axis


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_box_at_rest_jittering_along_a_ray_is_welded(seed, tmp_path):
    """A box at rest whose tracked position jitters along one ray, 4 mm of white noise plus
    15-55 mm in every fourth frame (the small ball's depth errors), is welded to the
    world: its slider along the ray has a q that scatters from frame to frame."""
    W = _slide(40, 0.0, 0.0003, seed)
    rng = np.random.default_rng(seed)
    off = rng.normal(0, 0.004, 40)
    far = np.arange(rng.integers(4), 40, 4)
    off[far] += rng.uniform(0.015, 0.055, len(far)) * rng.choice([-1, 1], len(far))
    W[:, 0, :3, 3] += off[:, None] * RAY
    art, _ = run(CFG, PoseTracks(W, ["box"], ["box"], np.zeros(40), 30.0), tmp_path)
    assert [j.type for j in art.joints] == ["fixed"]


def test_steady_motion_sigma_separates_a_slide_from_jitter():
    """The same prismatic fit machinery on two coordinates of equal 5-95 % spread (24 mm): a
    ramp with 2 mm of white noise moves >= 20 sigma of its jitter; white noise of 7 mm std
    (the same spread) moves < 6 sigma."""
    t = np.arange(40)
    rng = np.random.default_rng(0)
    ramp = 0.0267 * t / 39 + rng.normal(0, 0.002, 40)
    noise = rng.normal(0, 0.0073, 40)
    zs = []
    for q in (ramp, noise):
        f = fit.JointFit("prismatic", np.array([1.0, 0, 0]), np.zeros(3), np.eye(4), q, np.zeros(40),
                         np.ones(40, bool), 0.0, True)
        zs.append(steady_motion_sigma(f))
    assert zs[0] >= 20 and zs[1] < 6, zs


def test_a_hinge_that_only_turns_a_ball_is_still():
    """A ball (rotation unseen: 1 rad) sitting on a revolute joint's axis, turned 90 deg about
    it by a parent that turns: its coordinate's noise under the full model is about 1 rad, so
    the hinge shows no motion, though its isotropic stand-in (0.5 deg) says 180 sigma."""
    q = np.linspace(0.0, np.pi / 2, 40)
    X = np.tile(np.eye(4), (40, 1, 1))
    X[:, :3, :3] = geometry.rot_axis(np.array([0.0, 0.0, 1.0]), q)
    X[:, :3, 3] = [0.0, 0.0, 0.1]
    f = fit.JointFit("revolute", np.array([0.0, 0, 1]), np.zeros(3), np.eye(4), q, np.zeros(40),
                     np.ones(40, bool), 0.0, True)
    st = fit.FitSettings(0.001, np.deg2rad(0.5), child_axes=((0.001,) * 3, (1.0,) * 3))
    assert coordinate_sigma(f, X, st) == pytest.approx(1.0, rel=0.01)
    assert still_reason(f, X, st, 6.0).startswith("no significant motion")


def test_glitch_frames_are_the_injected_ones():
    """A 0.3-m pendulum bob swinging at up to 60 mm a frame, 1 mm of white noise: three frames
    pushed 20-40 mm off, two of them a frame apart, are the glitches found, and nothing else;
    without them, none."""
    t = np.arange(60) / 30.0
    th = 0.9 * np.sin(2 * np.pi * 1.1 * t)
    W = np.tile(np.eye(4), (60, 1, 1, 1))
    W[:, 0, :3, 3] = np.stack([0.3 * np.sin(th), np.zeros(60), 1.0 - 0.3 * np.cos(th)], 1)
    W = add_noise(W, 0.001, 0.0, seed=3)
    valid = np.ones((60, 1), bool)
    assert not glitch_frames(W, valid, 4.0, 0.005).any()
    for t_, d in ((7, 0.02), (30, 0.04), (32, 0.03)):
        W[t_, 0, :3, 3] += d * np.array([0.6, 0.0, 0.8])
    assert np.flatnonzero(glitch_frames(W, valid, 4.0, 0.005)[:, 0]).tolist() == [7, 30, 32]
