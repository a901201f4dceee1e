"""Articulate stage on the truth poses of every synthetic mechanism, with pose noise of
2 mm and 1 deg (per component) added: tree, joint types, axes, pivots, and joint
positions that reproduce the poses through forward kinematics."""
from __future__ import annotations

import numpy as np
import pytest

from vid2sim.datasets.synthetic import MECHANISMS, simulate
from vid2sim.models.joints import forward_kinematics
from vid2sim.models.joints.evaluate import add_noise, compare, pose_errors
from vid2sim.models.joints.kinematics import coordinate_names, floating_root
from vid2sim.pipeline.articulate import ArticulateConfig, run
from vid2sim.pipeline.artifacts import ArtifactError, Articulation, JointPositions, PoseTracks

SP, SR_DEG = 0.002, 1.0
# pushed, seeds 0, 2, 3, 7 of 0-7: the linkage's motion over the clip is explained at
# least as well by a revolute joint to the world (about a point of the floor, e.g. seed 0:
# link1 shifts 7 mm and turns 5 deg) as by the truth's planar root (see the test below);
# seeds 1, 4, 5, 6 slide and turn and the planar root is found.
SEEDS = {name: 0 for name in MECHANISMS} | {"pushed": 5}


def _run(name, seed, tmp_path, sp=SP, sr=SR_DEG, cfg=ArticulateConfig(), lost=None):
    sim = simulate(name, seed=seed, frames=120, fps=30.0)
    W = add_noise(sim.world_from_body, sp, sr, seed=seed + 100)
    names = [b["name"] for b in sim.truth["bodies"]]
    poses = PoseTracks(W, names, names, np.zeros(len(W)), 30.0, lost)
    art, jp = run(cfg, poses, tmp_path)
    return sim, W, art, jp


@pytest.fixture(scope="module", params=MECHANISMS)
def result(request, tmp_path_factory):
    name = request.param
    out = tmp_path_factory.mktemp(name)
    return (name, out) + _run(name, SEEDS[name], out)


def test_tree_and_joint_types(result):
    name, _, sim, W, art, _ = result
    c = compare(art, sim.truth, (W[0], sim.world_from_body[0]))
    assert c["tree_ok"], (name, [(j.name, j.type) for j in art.joints])
    assert c["types_ok"], (name, [(r["name"], r["type"], r["found"]) for r in c["joints"]])
    assert c["type_accuracy"] == 1.0


def test_axes_and_pivots(result):
    name, _, sim, W, art, _ = result
    c = compare(art, sim.truth, (W[0], sim.world_from_body[0]))
    for r in c["joints"]:
        if r["axis_err_deg"] is not None:
            assert r["axis_err_deg"] <= 2.0, (name, r)
        if r["pivot_err_m"] is not None:
            assert r["pivot_err_m"] <= 0.01, (name, r)


def test_forward_kinematics_reproduces_the_poses(result):
    """FK(q) against the noisy input differs by the noise of frame t plus that of frame
    0 (the zero configuration): about sqrt(2) x the noise norm (sqrt(3) sigma per pose)."""
    name, _, sim, W, art, jp = result
    e = pose_errors(forward_kinematics(art, jp, W[0]), W)
    assert e["pos_rms_m"] <= 2.5 * np.sqrt(3) * SP, (name, e)
    assert np.rad2deg(e["rot_rms_rad"]) <= 2.5 * np.sqrt(3) * SR_DEG, (name, e)
    # against the noise-free truth only frame 0's noise and the fit remain, plus, for a
    # floating base, the noise of the tracked root pose (root_pose is the tracked pose)
    e_true = pose_errors(forward_kinematics(art, jp, W[0]), sim.world_from_body)
    bound = (2.5 if floating_root(art) is not None else 2.0) * np.sqrt(3) * SP
    assert e_true["pos_rms_m"] <= bound, (name, e_true)


def test_joint_positions_follow_the_convention(result):
    name, out, sim, W, art, jp = result
    froot = floating_root(art)
    expected = [n for j in art.joints for n in coordinate_names(j.type, j.name, j is froot)]
    assert jp.names == expected
    assert (jp.root_pose is not None) == (froot is not None)
    assert np.abs(jp.q[0]).max(initial=0.0) < 0.05  # frame 0 is the zero configuration (up to noise)
    art.save(out / Articulation.FILE)
    jp.save(out / JointPositions.FILE)
    assert Articulation.load(out / Articulation.FILE) == art
    assert np.array_equal(JointPositions.load(out / JointPositions.FILE).q, jp.q)
    for png in ("q_plot.png", "joints_3d.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "articulate_costs.json").stat().st_size > 0


def test_pushed_seed0_is_honestly_a_hinge_to_the_floor(tmp_path):
    """The ambiguous clip: link1 barely moves (it pivots on the floor), so a revolute joint
    to the world is chosen over the truth's planar root; that explanation still
    reproduces every pose within the noise and finds both hinges."""
    sim, W, art, jp = _run("pushed", 0, tmp_path, cfg=ArticulateConfig(plots=False))
    kinds = sorted(j.type for j in art.joints)
    assert kinds == ["revolute", "revolute", "revolute"]
    c = compare(art, sim.truth)
    assert [r["correct"] for r in c["joints"] if r["name"] != "root"] == [True, True]
    e = pose_errors(forward_kinematics(art, jp, W[0]), W)
    assert e["pos_rms_m"] <= 2.5 * np.sqrt(3) * SP


def test_lost_frames_are_skipped_and_interpolated(tmp_path):
    sim = simulate("double_pendulum", seed=1, frames=120, fps=30.0)
    lost = np.zeros((120, 2), bool)
    lost[40:46, 1] = True
    W = add_noise(sim.world_from_body, SP, SR_DEG, seed=5)
    W[40:46, 1, :3, 3] += 0.5  # garbage where the tracker lost the body
    names = [b["name"] for b in sim.truth["bodies"]]
    art, jp = run(ArticulateConfig(plots=False), PoseTracks(W, names, names, np.zeros(120), 30.0, lost), tmp_path)
    assert compare(art, sim.truth)["types_ok"]
    ok = ~lost
    e = pose_errors(forward_kinematics(art, jp, W[0]), W, ok)
    assert e["pos_rms_m"] <= 2.5 * np.sqrt(3) * SP
    e_lost = pose_errors(forward_kinematics(art, jp, W[0]), sim.world_from_body, lost)
    assert e_lost["pos_max_m"] < 0.05  # interpolated through the gap, not the garbage


def test_body_at_rest_is_welded_not_hinged(tmp_path):
    """cabinet with the drawer and door at rest: everything is fixed."""
    sim = simulate("cabinet", seed=0, frames=60, fps=30.0)
    W = add_noise(np.broadcast_to(sim.world_from_body[:1], sim.world_from_body.shape), SP, SR_DEG, seed=3)
    names = [b["name"] for b in sim.truth["bodies"]]
    art, jp = run(ArticulateConfig(plots=False), PoseTracks(W, names, names, np.zeros(60), 30.0), tmp_path)
    assert [j.type for j in art.joints] == ["fixed"] * 3
    assert jp.q.shape == (60, 0)


def test_a_body_seen_in_few_frames_does_not_hijack_the_tree(tmp_path):
    """The pole is tracked in 4 of 60 frames only: its pairs are fitted on those frames,
    but their cost is extrapolated to the whole clip, so the cart keeps its slider."""
    sim = simulate("cartpole", seed=1, frames=60, fps=30.0)
    W = add_noise(sim.world_from_body, 0.005, 2.0, seed=1)
    lost = np.zeros((60, 2), bool)
    lost[4:, 1] = True
    names = [b["name"] for b in sim.truth["bodies"]]
    tracks = PoseTracks(W, names, names, np.zeros(60), 30.0, lost)
    with pytest.raises(ArtifactError, match=r"poses\.npz: body 'pole' is lost .* in 56 of 60 frames"):
        run(ArticulateConfig(plots=False), tracks, tmp_path)  # by default that is an error...
    art, _ = run(ArticulateConfig(plots=False, max_lost_fraction=1.0), tracks, tmp_path)  # ...unless allowed
    assert art.joint_of("cart").type == "prismatic" and art.joint_of("cart").parent == "world"


def test_a_rod_located_poorly_along_its_axis_still_hangs_from_the_cart(tmp_path):
    """Tracked in realistic depth, the cartpole's pole is located 2.9 mm along its own axis
    and ~1 mm across (its end caps are all that fix it lengthwise). With one isotropic
    noise level for all, the cart -> pole hinge paid chi-square for that error while a
    planar joint to the world absorbed it, and the pole came out planar (identify then
    refuses it); whitening each body's noise along its own axes keeps the hinge."""
    sim = simulate("cartpole", seed=0, frames=300, fps=30.0)
    names = [b["name"] for b in sim.truth["bodies"]]
    rng = np.random.default_rng(3)
    W = np.array(sim.world_from_body, float)
    std = {"cart": [0.0005, 0.0005, 0.0005], "pole": [0.0006, 0.0006, 0.004]}  # body axes (m); pole along z
    for m, n in enumerate(names):
        e = rng.normal(size=(len(W), 3)) * np.array(std[n])
        W[:, m, :3, 3] += np.einsum("tij,tj->ti", W[:, m, :3, :3], e)
    art, _ = run(ArticulateConfig(plots=False), PoseTracks(W, names, names, np.zeros(len(W)), 30.0), tmp_path)
    kinds = {(j.parent, j.child): j.type for j in art.joints}
    assert kinds == {("world", "cart"): "prismatic", ("cart", "pole"): "revolute"}, kinds


def test_rotations_a_shape_cannot_show_do_not_break_the_tree(tmp_path):
    """tree5 as the tracker sees it: the ball's orientation stays where it started and the
    capsule arm_b hinged to the turning arm_a carries a spin about its own axis that is not
    the true one (neither shows in depth). Told the shapes, articulate ignores those
    rotations and fits each pair from the body that shows its rotation: the true tree.
    Without them the ball and arm_b float free."""
    from vid2sim.datasets.shapes import Shape
    from vid2sim.models.geometry_torch import so3_exp
    import torch

    sim = simulate("tree5", seed=0, frames=120, fps=30.0)
    W = add_noise(sim.world_from_body, 0.0005, 0.2, seed=7)
    names = [b["name"] for b in sim.truth["bodies"]]
    shapes_of = {b["name"]: b["shape"] for b in sim.truth["bodies"]}
    ball, arm = names.index("ball_b"), names.index("arm_b")
    W[:, ball, :3, :3] = W[0, ball, :3, :3]  # a sphere's orientation: kept from the first frame
    spin = np.linspace(0.0, 0.6, len(W))  # rad about arm_b's own axis (body z)
    W[:, arm, :3, :3] = W[:, arm, :3, :3] @ so3_exp(torch.as_tensor(spin[:, None] * np.array([0.0, 0.0, 1.0]))).numpy()
    poses = PoseTracks(W, names, [shapes_of[n] for n in names], np.zeros(len(W)), 30.0)
    assert isinstance(sim.shapes[shapes_of["ball_b"]], Shape) and sim.shapes[shapes_of["ball_b"]].type == "sphere"
    art, _ = run(ArticulateConfig(plots=False), poses, tmp_path, shapes=sim.shapes)
    c = compare(art, sim.truth, (W[0], sim.world_from_body[0]))
    assert c["tree_ok"] and c["types_ok"], [(j.name, j.type) for j in art.joints]
    art, _ = run(ArticulateConfig(plots=False), poses, tmp_path)
    assert not compare(art, sim.truth, (W[0], sim.world_from_body[0]))["tree_ok"]


def test_level_axis_closed_forms():
    from vid2sim.pipeline.articulate_world import level_axis
    tilt = np.deg2rad(0.5)
    drawer = np.array([0.0, np.cos(tilt), -np.sin(tilt)])
    assert np.allclose(level_axis(drawer, "prismatic", 1.0), [0.0, 1.0, 0.0])
    assert np.array_equal(level_axis(drawer, "prismatic", 0.4), drawer)       # beyond the tolerance
    assert np.array_equal(level_axis(drawer, "revolute", 1.0), drawer)        # a horizontal hinge: a pendulum
    door = np.array([np.sin(tilt), 0.0, -np.cos(tilt)])
    assert np.array_equal(level_axis(door, "revolute", 1.0), [0.0, 0.0, -1.0])  # keeps its sense
    assert np.array_equal(level_axis(door, "revolute", 0.0), door)
    assert np.array_equal(level_axis(door, "prismatic", 1.0), door)           # a vertical slide: gravity works


def test_cabinet_axes_are_levelled_and_still_reproduce_the_poses(tmp_path):
    """Tracking noise tilts the drawer's rail and the door's hinge off gravity-neutral, which
    a frictionless twin turns into a slide; levelled, both are exactly neutral and the poses
    are reproduced as well as with the tilted axes."""
    errs = {}
    for level in (0.0, 1.0):
        sim, W, art, jp = _run("cabinet", 0, tmp_path / str(level), sp=0.0005, sr=0.2,
                               cfg=ArticulateConfig(plots=False, level_deg=level))
        ax = {j.type: np.asarray(j.axis) for j in art.joints if j.type in ("prismatic", "revolute")}
        tilts = (abs(ax["prismatic"][2]), np.hypot(*ax["revolute"][:2]))
        if level:
            assert tilts == (0.0, 0.0)
        else:
            assert 1e-5 < max(tilts) < np.sin(np.deg2rad(1.0)), tilts
        errs[level] = pose_errors(forward_kinematics(art, jp, W[0]), sim.world_from_body)["pos_rms_m"]
    assert errs[1.0] <= errs[0.0] * 1.05 + 1e-5, errs
