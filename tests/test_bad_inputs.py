"""Bad input, end to end: each case is a `vid2sim` call that must end with a one-line
error naming the file and the problem, a non-zero exit code, and no partial artifact."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from vid2sim.datasets.synthetic import make_recording

VID2SIM = [sys.executable, "-m", "vid2sim.pipeline.cli"]
ARTIFACTS = ("segmentation.npz", "poses.npz", "articulation.json", "joint_positions.npz", "params.json", "model.urdf")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_recording("cartpole", tmp_path_factory.mktemp("bad") / "base", seed=2, frames=24, noise="realistic")


@pytest.fixture
def rec(base, tmp_path):
    dst = tmp_path / "rec"
    shutil.copytree(base, dst)
    return dst


def fails(args, *needles, run_dir=None):
    """Run vid2sim; assert exit != 0, exactly one 'error:' line containing every needle, no traceback."""
    r = subprocess.run(VID2SIM + [str(a) for a in args], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "COLUMNS": "400"})
    assert r.returncode != 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, r.stderr[-3000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    if run_dir is not None:
        assert list(Path(run_dir).glob(".*.tmp*")) == [], "temporary file left behind"
    return lines[0]


def camera(rec):
    return json.loads((rec / "camera.json").read_text())


def set_camera(rec, **kv):
    (rec / "camera.json").write_text(json.dumps({**camera(rec), **kv}))


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_missing_camera_json(rec, tmp_path):
    (rec / "camera.json").unlink()
    fails(["run", rec, "--out", tmp_path / "run"], "camera.json", "missing")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("key,value,problem", [("fx", float("nan"), "fx must be a finite number"),
                                               ("fy", -300.0, "fy must be > 0"),
                                               ("cx", float("inf"), "cx must be a finite number")])
@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_bad_intrinsics(rec, tmp_path, key, value, problem):
    set_camera(rec, **{key: value})
    fails(["run", rec, "--out", tmp_path / "run"], "camera.json", problem)


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_colour_and_depth_of_different_sizes(rec, tmp_path):
    for f in (rec / "color").iterdir():
        cv2.imwrite(str(f), cv2.resize(cv2.imread(str(f)), (160, 120)))
    fails(["run", rec, "--out", tmp_path / "run"], "color/000000.png", "image is 160x120 but camera.json says 320x240")


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_gap_in_frame_numbering(rec, tmp_path):
    (rec / "depth" / "000005.png").unlink()
    (rec / "color" / "000005.png").unlink()
    fails(["run", rec, "--out", tmp_path / "run"], "000005.png", "frame 5 is missing")


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_corrupt_png_mid_recording_keeps_what_was_written(rec, tmp_path):
    run = tmp_path / "run"
    (rec / "depth" / "000015.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
    fails(["run", rec, "--out", run], "depth/000015.png", "cannot be decoded", run_dir=run)
    assert (run / "segmentation.npz").exists()  # the stage before the damage is complete and kept
    assert not (run / "poses.npz").exists()


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_8bit_depth_png(rec, tmp_path):
    for f in (rec / "depth").iterdir():
        d = cv2.imread(str(f), cv2.IMREAD_UNCHANGED)
        cv2.imwrite(str(f), (d // 16).astype(np.uint8))
    fails(["run", rec, "--out", tmp_path / "run"], "depth/000000.png", "depth must be a 16-bit PNG")


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_all_zero_depth(rec, tmp_path):
    for f in (rec / "depth").iterdir():
        cv2.imwrite(str(f), np.zeros((240, 320), np.uint16))
    fails(["run", rec, "--out", tmp_path / "run"], "depth/000000.png", "no valid reading")


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_one_frame(rec, tmp_path):
    for sub in ("depth", "color", "truth_masks"):
        for f in (rec / sub).iterdir():
            if f.name != "000000.png":
                f.unlink()
    fails(["run", rec, "--out", tmp_path / "run"], str(rec), "has 1 frame(s)", "at least 10")


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_mechanism_leaves_the_view(rec, tmp_path):
    """The camera pans away: from frame 8 on the picture slides sideways off the parts."""
    run = tmp_path / "run"
    bg_depth = None
    for i in range(8, 24):
        shift = 60 * (i - 7)
        d = cv2.imread(str(rec / "depth" / f"{i:06d}.png"), cv2.IMREAD_UNCHANGED)
        c = cv2.imread(str(rec / "color" / f"{i:06d}.png"))
        bg_depth = int(np.percentile(d[d > 0], 90)) if bg_depth is None else bg_depth
        M = np.float32([[1, 0, shift], [0, 1, 0]])
        d = cv2.warpAffine(d, M, (320, 240), flags=cv2.INTER_NEAREST, borderValue=bg_depth)
        c = cv2.warpAffine(c, M, (320, 240), flags=cv2.INTER_NEAREST, borderValue=(140, 140, 140))
        cv2.imwrite(str(rec / "depth" / f"{i:06d}.png"), d)
        cv2.imwrite(str(rec / "color" / f"{i:06d}.png"), c)
    fails(["run", rec, "--out", run], "poses.npz", "is lost (left the view or occluded)", run_dir=run)
    assert (run / "poses.npz").exists()  # the tracks, with their lost flags, are kept for inspection
    assert not (run / "articulation.json").exists()


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_unknown_shape_type(rec, tmp_path):
    shapes = json.loads((rec / "shapes.json").read_text())
    shapes["pole"]["type"] = "torus"
    (rec / "shapes.json").write_text(json.dumps(shapes))
    fails(["run", rec, "--out", tmp_path / "run"], "shapes.json", "unknown type 'torus'")


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_shapes_json_missing(rec, tmp_path):
    (rec / "shapes.json").unlink()
    fails(["run", rec, "--out", tmp_path / "run"], "shapes.json", "missing")
    assert not (tmp_path / "run" / "segmentation.npz").exists()


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_truncated_bag(realsense_ros1_bag, tmp_path):

    rng = np.random.default_rng(0)
    depth = [rng.integers(400, 2000, (24, 32)).astype(np.uint16) for _ in range(4)]
    color = [rng.integers(0, 255, (24, 32, 3)).astype(np.uint8) for _ in range(4)]
    bag = realsense_ros1_bag(tmp_path / "cap.bag", depth, color)
    data = bag.read_bytes()
    bag.write_bytes(data[: len(data) // 2])
    fails(["run", bag, "--out", tmp_path / "run"], "cap.bag")


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_depth_in_the_wrong_unit(rec, tmp_path):
    set_camera(rec, depth_scale=1.0)  # millimetre PNGs declared as metres
    fails(["run", rec, "--out", tmp_path / "run"], "depth/000000.png", "implausible", "depth_scale")


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_video_with_no_frames(tmp_path):
    path = tmp_path / "empty.mp4"
    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30, (64, 48))
    w.release()
    fails(["run", path, "--out", tmp_path / "run"], "empty.mp4")


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_output_folder_not_writable(rec, tmp_path):
    blocker = tmp_path / "ro"
    blocker.write_text("a file where the run folder's parent should be")
    fails(["run", rec, "--out", blocker / "run"], str(blocker / "run"), "cannot be created")
    if os.geteuid() != 0:  # root writes through permission bits, so only a normal user can test those
        ro = tmp_path / "readonly"
        ro.mkdir(mode=0o555)
        fails(["run", rec, "--out", ro / "run"], str(ro / "run"))


@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_stage_artifact_edited_into_an_invalid_state(rec, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    seg = {"masks": np.zeros((2, 240, 320), np.uint8), "frame": np.int64(0),
           "shape_names": np.array(["cart"]), "scores": np.array([0.9, 0.8])}  # 2 masks, 1 name
    np.savez(run / "segmentation.npz", **seg)
    before = (run / "segmentation.npz").read_bytes()
    fails(["track", rec, "--out", run], "segmentation.npz", "1 names", run_dir=run)
    assert (run / "segmentation.npz").read_bytes() == before  # nothing already written is lost
    assert not (run / "poses.npz").exists()


@pytest.mark.parametrize("setting, needle", [
    ("track.noise.depth_noise_k=abc", "setting track.noise.depth_noise_k='abc' of TrackNoise must be float or null"),
    ("track.depth_noise_k=0.004", "setting track.depth_noise_k is now track.noise.depth_noise_k"),
    ("track.noise=0.004", "track.noise is a group of settings"),
    ("track.iterations=2.5", "iterations=2.5 of TrackConfig must be int"),
    ("identify.compile=3", "compile=3 of IdentifyConfig must be bool or str"),
    ("segment.frames=[0,\"a\"]", "frames=(0, 'a') of SegmentConfig must be tuple[int, ...]"),
    ("identify.inference.method=csvdg",
     "identify.inference.method must be one of csvgd, svgd, adam, cmaes, mcmc; got 'csvdg'"),
    ("identify.method=cmaes", "setting identify.method is now identify.inference.method"),
    ("identify.shooting.polish=1.5", "identify.shooting.polish must be in [0, 1]; got 1.5"),
    ("identify.inference.precondition=newton", "identify.inference.precondition must be one of gauss-newton, none"),
    ("track.planar=yes", "track.planar must be one of on, off, auto; got 'yes'"),
    ("segment.method=mask_rcnn", "segment: unknown method 'mask_rcnn'; choose one of learned, geometric"),
])
@pytest.mark.slow  # runs the vid2sim CLI in a subprocess
def test_setting_of_the_wrong_type(rec, tmp_path, setting, needle):
    """A mistyped --set value stops before any stage runs, naming the setting and its type (a
    string for a float once went through to the tracker's arithmetic) or its allowed values (an
    unknown identify method once failed only after segment and track had run)."""
    fails(["run", rec, "--out", tmp_path / "run", "--set", setting], needle)
    assert not (tmp_path / "run" / "segmentation.npz").exists()


def test_type_names_of_optional_settings():
    """typing.Optional reads like the X | None annotations (it once printed 'typing.Optional[float]')."""
    import typing

    from vid2sim.pipeline.config import _type_name
    assert _type_name(typing.Optional[float]) == _type_name(float | None) == "float or null"
