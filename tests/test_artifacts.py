"""Stage artifacts: exact round trips, and hand-edited invalid files fail naming the file."""
import json

import numpy as np
import pytest

from vid2sim.pipeline.artifacts import (ArtifactError, Articulation, Joint, JointPositions, PoseTracks, Posterior,
                                        Segmentation)


def test_segmentation_round_trip(tmp_path):
    masks = np.zeros((2, 4, 5), np.uint8)
    masks[0, 1:3, 1:3] = 1
    masks[1, 0, :] = 1
    s = Segmentation(masks, 3, ["cart", "pole"], np.array([0.9, 0.8]))
    s.save(tmp_path / "segmentation.npz")
    t = Segmentation.load(tmp_path / "segmentation.npz")
    assert np.array_equal(t.masks, masks) and t.frame == 3 and t.shape_names == ["cart", "pole"]
    np.testing.assert_allclose(t.scores, [0.9, 0.8])


def test_posetracks_round_trip_and_nonfinite(tmp_path):
    T = np.tile(np.eye(4), (5, 2, 1, 1))
    T[:, 0, 0, 3] = np.linspace(0, 1, 5)
    p = PoseTracks(T, ["a", "b"], ["box", "ball"], np.arange(5.0), fps=25.0)
    p.save(tmp_path / "poses.npz")
    q = PoseTracks.load(tmp_path / "poses.npz")
    assert np.array_equal(q.world_from_body, T) and q.fps == 25.0 and q.body_names == ["a", "b"]
    assert q.lost.shape == (5, 2) and not q.lost.any() and q.depth_noise_k is None
    PoseTracks(T, ["a", "b"], ["box", "ball"], np.arange(5.0), depth_noise_k=0.004).save(tmp_path / "k.npz")
    assert PoseTracks.load(tmp_path / "k.npz").depth_noise_k == 0.004
    bad = dict(np.load(tmp_path / "poses.npz"))
    bad["world_from_body"][2, 1, 0, 0] = np.nan
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(ArtifactError, match=r"bad\.npz: poses: world_from_body has non-finite"):
        PoseTracks.load(tmp_path / "bad.npz")


def test_articulation_round_trip_and_hand_edit(tmp_path):
    art = Articulation(["cart", "pole"], [
        Joint("slider", "prismatic", "world", "cart", (1.0, 0.0, 0.0), (0.0, 0.0, 0.5), 0.01),
        Joint("hinge", "revolute", "cart", "pole", (0.0, 1.0, 0.0), (0.0, 0.0, 0.5), 0.02)])
    path = tmp_path / "articulation.json"
    art.save(path)
    assert Articulation.load(path) == art
    d = json.loads(path.read_text())
    d["joints"][1]["type"] = "hinge"
    path.write_text(json.dumps(d))
    with pytest.raises(ArtifactError, match=r"articulation\.json: .*unknown type 'hinge'"):
        Articulation.load(path)
    d["joints"][1]["type"] = "revolute"
    d["joints"][1]["axis"] = [0, 2, 0]
    path.write_text(json.dumps(d))
    with pytest.raises(ArtifactError, match="axis must be a finite unit 3-vector"):
        Articulation.load(path)
    path.write_text("{not json")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        Articulation.load(path)


def test_joint_positions_and_posterior_round_trip(tmp_path):
    jp = JointPositions(np.random.default_rng(0).normal(size=(7, 2)), ["slider", "hinge"], np.zeros((7, 7)))
    jp.save(tmp_path / "jp.npz")
    jq = JointPositions.load(tmp_path / "jp.npz")
    assert np.array_equal(jq.q, jp.q) and jq.names == jp.names and jq.root_pose.shape == (7, 7)
    post = Posterior(["cart.mass", "pole.mass"], {"cart.mass": (0.1, 5.0), "pole.mass": (0.01, 1.0)},
                     {"cart.mass": 1.0, "pole.mass": 0.1}, np.array([[1.0, 0.1], [1.1, 0.12]]), "csvgd", -12.5)
    post.save(tmp_path / "params.json")
    back = Posterior.load(tmp_path / "params.json")
    assert back.estimate == post.estimate and np.array_equal(back.particles, post.particles)
    d = json.loads((tmp_path / "params.json").read_text())
    del d["limits"]["pole.mass"]
    (tmp_path / "params.json").write_text(json.dumps(d))
    with pytest.raises(ArtifactError, match=r"params\.json: .*'pole\.mass' lacks limits"):
        Posterior.load(tmp_path / "params.json")


def test_missing_artifact_names_the_file(tmp_path):
    with pytest.raises(ArtifactError, match=r"poses\.npz: missing"):
        PoseTracks.load(tmp_path / "poses.npz")
    (tmp_path / "segmentation.npz").write_bytes(b"garbage")
    with pytest.raises(ArtifactError, match=r"segmentation\.npz: cannot be read"):
        Segmentation.load(tmp_path / "segmentation.npz")


def test_truth_articulation_and_tracks_from_a_synthetic_truth():
    from vid2sim.datasets.synthetic import simulate

    s = simulate("cartpole", seed=0, frames=3, fps=30.0)
    art = Articulation.from_truth(s.truth)
    assert art.bodies == ["cart", "pole"] and [(j.type, j.parent, j.child) for j in art.joints] == [
        ("prismatic", "world", "cart"), ("revolute", "cart", "pole")]
    poses = PoseTracks.from_truth(s.truth, s.world_from_body, 30.0)
    assert poses.body_names == ["cart", "pole"] and poses.shape_names == [b["shape"] for b in s.truth["bodies"]]
    assert poses.world_from_body.shape == (3, 2, 4, 4) and not poses.residual.any() and poses.fps == 30.0
