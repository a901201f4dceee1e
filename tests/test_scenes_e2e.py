"""One small randomised scene per renderer, end to end (segment ... export): a cartpole seen
by a camera, room and clutter the default look never has, rendered once by Open3D's ray
caster and once by PyBullet's TinyRenderer (datasets/synthetic/scene.py)."""
import json

import numpy as np
import pytest

from vid2sim.datasets.synthetic import make_recording
from vid2sim.pipeline import run as runner
from vid2sim.pipeline.artifacts import Articulation, PoseTracks

FAST = {"track": {"overlay": False}, "identify": {"inference": {"iterations": 20, "particles": 4}, "plots": False},
        "forecast": {"holdout": 0.0}}


# seed 0: 1.3 % of a 320 x 240 image, a distractor box beside it (found by the magnified second look)
@pytest.mark.parametrize("seed,renderer", [(13, "tiny"), (18, "raycast"), (0, "raycast")])
def test_random_scene_runs_to_a_urdf_with_the_true_joints(seed, renderer, tmp_path):
    rec = make_recording("cartpole", tmp_path / "rec", seed=seed, frames=30, noise="none", scene="random")
    scene = json.loads((rec / "truth.json").read_text())["scene"]
    assert scene["renderer"] == renderer and scene["distractors"] >= 1, scene
    run = tmp_path / "run"
    status = runner.run_pipeline(rec, run, runner.resolve_configs(FAST),
                                 stages=["segment", "track", "articulate", "identify", "export"])
    assert set(status.values()) == {"ran"}, status
    art = Articulation.load(run / Articulation.FILE)
    rail, hinge = art.joint_of("cart"), art.joint_of("pole")
    assert (rail.type, rail.parent, hinge.type, hinge.parent) == ("prismatic", "world", "revolute", "cart"), art.joints
    # tracked centres within 0.3 % of the camera distance of the truth (the clean-depth bar)
    truth = np.load(rec / "truth_poses.npz")["world_from_body"]
    names = [b["name"] for b in json.loads((rec / "truth.json").read_text())["bodies"]]
    poses = PoseTracks.load(run / PoseTracks.FILE)
    for m, name in enumerate(poses.body_names):
        err = np.linalg.norm(poses.world_from_body[:, m, :3, 3] - truth[:, names.index(name), :3, 3], axis=-1)
        assert np.median(err) < 0.003 * scene["distance_m"], (name, np.median(err), scene["distance_m"])
    assert "<robot" in (run / "model.urdf").read_text()
