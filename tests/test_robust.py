"""Inputs nobody planned for, through the real command line: every outcome is success (exit 0)
or one line "error: STAGE: FILE: cause" (exit 2), never a Python traceback.

Tiny clips (160 x 120, 10-12 frames) and short identify settings keep the file quick; the
scenes are the synthetic generator's, changed the way a user's recordings differ from them
(no background, nothing moving, parts leaving the view, a far camera, damaged files).
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from vid2sim.datasets.recording import RecordingWriter
from vid2sim.datasets.synthetic import make_recording, mechanism, renderer_for, simulate
from vid2sim.datasets.synthetic.render import camera_looking_at

pytestmark = pytest.mark.slow  # end to end through every stage, the CLI in subprocesses

VID2SIM = [sys.executable, "-m", "vid2sim.pipeline.cli", "--threads", "1"]
FAST = ["--set", "identify.inference.iterations=10", "--set", "identify.inference.particles=4",
        "--set", "forecast.horizon=10", "--set", "forecast.particles=2", "--set", "forecast.video=false",
        "--set", "track.overlay=false"]
STAGES = ("segment", "track", "articulate", "identify", "export", "forecast", "report", "run")
ERROR_LINE = re.compile(r"^error: (?P<stage>[a-z-]+): (?P<file>\S+?): (?P<cause>\S.*)$")


def vid2sim(*args, ok=(0, 2)) -> subprocess.CompletedProcess:
    """Run the CLI; assert the exit code is in ``ok``, no traceback, and a failure is one error line
    of the form ``error: STAGE: FILE: cause``."""
    r = subprocess.run(VID2SIM + [str(a) for a in args], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "COLUMNS": "400"})
    assert r.returncode in ok, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    if r.returncode == 0:
        assert not errors, r.stderr[-3000:]
    else:
        assert len(errors) == 1, r.stderr[-3000:]
        m = ERROR_LINE.match(errors[0])
        assert m and m["stage"] in STAGES, errors[0]
    return r


def error_of(r: subprocess.CompletedProcess) -> re.Match:
    return ERROR_LINE.match(next(line for line in r.stderr.splitlines() if line.startswith("error:")))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 12-frame 160 x 120 cartpole with clean depth."""
    return make_recording("cartpole", tmp_path_factory.mktemp("robust") / "tiny", seed=1, frames=12, size=(160, 120))


@pytest.fixture
def rec(tiny, tmp_path):
    dst = tmp_path / "rec"
    shutil.copytree(tiny, dst)
    return dst


def frames(rec: Path, sub: str) -> list[Path]:
    return sorted((rec / sub).iterdir())


def test_ten_frames_through_forecast(rec, tmp_path):
    """10 frames, the fewest the pipeline takes, through every stage: too few to hold any back
    (identify needs 10), so the twin is fitted on all of them and forecast says it is not
    validated instead of failing."""
    for sub in ("depth", "color", "truth_masks"):
        for f in frames(rec, sub)[10:]:
            f.unlink()
    vid2sim("run", rec, "--out", tmp_path / "run", *FAST, ok=(0,))
    fc = json.loads((tmp_path / "run" / "forecast.json").read_text())
    assert fc["validated"] is False and fc["fitted"] == [0, 9] and fc["metrics"] == {}, fc
    assert "Not validated" in (tmp_path / "run" / "report.html").read_text()


def test_no_background_at_all(rec, tmp_path):
    """Depth 0 and black everywhere but the mechanism: no static pixel to measure the depth
    noise from, so it comes from the parts' surfaces (clean depth: the 1 mm floor applies)."""
    for d, c, t in zip(frames(rec, "depth"), frames(rec, "color"), frames(rec, "truth_masks")):
        ids = cv2.imread(str(t), cv2.IMREAD_UNCHANGED)
        depth, rgb = cv2.imread(str(d), cv2.IMREAD_UNCHANGED), cv2.imread(str(c))
        depth[ids == 0], rgb[ids == 0] = 0, 0
        cv2.imwrite(str(d), depth)
        cv2.imwrite(str(c), rgb)
    run = tmp_path / "run"
    vid2sim("segment", rec, "--out", run, ok=(0,))
    r = vid2sim("track", rec, "--out", run, "--set", "track.overlay=false", ok=(0,))
    assert "from surface" in r.stderr, r.stderr[-2000:]
    poses = np.load(run / "poses.npz")
    assert np.isfinite(poses["world_from_body"]).all()
    assert 0 <= float(poses["depth_noise_k"]) < 1e-4  # clean render: about 0 (quantisation only)


def test_depth_noise_without_background_from_the_parts_surfaces(tmp_path, caplog):
    """Realistic sensor noise (the generator's k = 0.004 /m) with the background blanked: the
    parts' surfaces measure k (0.00384-0.00417 on cartpole, cabinet, double pendulum at 320 x
    240, seeds 0-1, frames 0-2); with no part masks either, DEFAULT_K and a WARNING."""
    from vid2sim.datasets import noise
    from vid2sim.datasets.recording import open_recording

    path = make_recording("cartpole", tmp_path / "rec", seed=0, frames=3, size=(320, 240), noise="realistic")
    masks = []
    for d, t in zip(frames(path, "depth"), frames(path, "truth_masks")):
        ids = cv2.imread(str(t), cv2.IMREAD_UNCHANGED)
        depth = cv2.imread(str(d), cv2.IMREAD_UNCHANGED)
        depth[ids == 0] = 0
        cv2.imwrite(str(d), depth)
        masks.append(np.stack([ids == 1, ids == 2]))
    rec = open_recording(path)
    est = noise.estimate_depth_noise(rec, exclude=masks[0].any(0), surface=masks[1], surface_frame=1)
    assert est.source == "surface" and est.pixels > 1000 and 0.0035 < est.k < 0.0045, est
    with caplog.at_level("WARNING", logger="vid2sim.datasets.noise"):
        est = noise.estimate_depth_noise(rec, exclude=masks[0].any(0))
    assert est.source == "default" and est.k == noise.DEFAULT_K
    assert any("too few on the parts" in r.getMessage() for r in caplog.records)


def test_nothing_moving(rec, tmp_path):
    """Every frame is frame 0: no motion to infer a joint from."""
    for sub in ("depth", "color"):
        first = frames(rec, sub)[0].read_bytes()
        for f in frames(rec, sub)[1:]:
            f.write_bytes(first)
    vid2sim("run", rec, "--out", tmp_path / "run", *FAST)


def test_parts_leave_the_view(rec, tmp_path):
    """From frame 4 on the picture slides sideways, 30 px a frame, off the parts."""
    for i, (d, c) in enumerate(zip(frames(rec, "depth"), frames(rec, "color"))):
        if i < 4:
            continue
        M = np.float32([[1, 0, 30 * (i - 3)], [0, 1, 0]])
        depth = cv2.imread(str(d), cv2.IMREAD_UNCHANGED)
        far = int(np.percentile(depth[depth > 0], 90))
        cv2.imwrite(str(d), cv2.warpAffine(depth, M, (160, 120), flags=cv2.INTER_NEAREST, borderValue=far))
        cv2.imwrite(str(c), cv2.warpAffine(cv2.imread(str(c)), M, (160, 120), flags=cv2.INTER_NEAREST))
    vid2sim("run", rec, "--out", tmp_path / "run", *FAST)


def test_empty_shape_library(rec, tmp_path):
    (rec / "shapes.json").write_text("{}")
    r = vid2sim("run", rec, "--out", tmp_path / "run", ok=(2,))
    assert "shapes.json" in error_of(r)["file"]


def test_corrupt_first_depth_png(rec, tmp_path):
    (rec / "depth" / "000000.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 50)
    r = vid2sim("segment", rec, "--out", tmp_path / "run", ok=(2,))
    m = error_of(r)
    assert m["file"].endswith("depth/000000.png") and "cannot be decoded" in m["cause"], m.group(0)


def test_library_part_not_in_the_scene_is_named(rec, tmp_path):
    shapes = json.loads((rec / "shapes.json").read_text())
    shapes["spare"] = {"type": "sphere", "radius": 0.04}
    (rec / "shapes.json").write_text(json.dumps(shapes))
    one = ["--set", "segment.frames=[0]"]
    r = vid2sim("segment", rec, "--out", tmp_path / "run", *one, ok=(2,))
    m = error_of(r)
    assert m["stage"] == "segment" and m["file"] == str(rec / "shapes.json"), m.group(0)
    assert "lists 3 part(s), segment found 2: spare is missing" in m["cause"], m.group(0)
    vid2sim("segment", rec, "--out", tmp_path / "run", *one, "--set", "segment.missing=allow", ok=(0,))


def test_an_actuators_shape_is_not_a_missing_part(tmp_path):
    """docs/formats.md §1.2: a known actuator's shape (the pusher's tip) is in shapes.json,
    but it is no part of the mechanism; segment does not ask for it."""
    from vid2sim.datasets.shapes import Shape
    from vid2sim.pipeline.run import StageError
    from vid2sim.pipeline.segment import SegmentConfig, _check_missing

    shapes = {"link": Shape("link", "capsule", radius=0.02, length=0.3),
              "tip": Shape("tip", "cylinder", radius=0.02, length=0.1)}
    with pytest.raises(StageError, match="lists 2 part.s., segment found 1: tip is missing"):
        _check_missing(SegmentConfig(), shapes, ["link"], [0], tmp_path / "shapes.json")
    np.savez(tmp_path / "actuation.npz", names=np.array(["pusher"]), shapes=np.array(["tip"]),
             world_from_actuator=np.tile(np.eye(4), (12, 1, 1, 1)))
    _check_missing(SegmentConfig(), shapes, ["link"], [0], tmp_path / "shapes.json")


def far_recording(name: str, out: Path, distance: float, size=(320, 240), n: int = 1) -> Path:
    """``name`` filmed from ``distance`` m (the mechanism covers a few % of the frame), with the
    generator's floor and back wall in view."""
    st = simulate(name, seed=0, frames=n, size=size)
    az, el = mechanism(name).view
    cam = camera_looking_at(st.world_from_body[0, :, :3, 3].mean(0), az, el, distance, size, st.fps)
    renderer = renderer_for(st, cam)
    with RecordingWriter(out, cam, st.shapes) as w:
        for k in range(n):
            depth, rgb, ids = renderer.render(st.world_from_body[k])
            w.add(depth, rgb)
            w.add_file(f"truth_masks/{k:06d}.png", cv2.imencode(".png", ids)[1].tobytes())
    return out


def test_far_camera_wall_and_floor_are_background(tmp_path):
    """The cabinet 3 m away at 320 x 240 (4 % of the frame), its floor and back wall in view:
    what fits no library shape is background, each on one INFO line; every part is found."""
    rec = far_recording("cabinet", tmp_path / "far", 3.0, n=13)
    run = tmp_path / "run"
    r = vid2sim("segment", rec, "--out", run, ok=(0,))
    seg = np.load(run / "segmentation.npz")
    assert sorted(seg["shape_names"]) == ["carcass", "door", "drawer"], r.stderr[-2000:]
    ids = cv2.imread(str(rec / "truth_masks" / f"{int(seg['frame']):06d}.png"), cv2.IMREAD_UNCHANGED)
    for k, name in enumerate(seg["shape_names"]):
        gt = ids == 1 + ["carcass", "drawer", "door"].index(str(name))
        m = seg["masks"][k] > 0
        assert (m & gt).sum() / (m | gt).sum() > 0.5, name


def test_thin_rods_of_a_far_double_pendulum(tmp_path):
    """The double pendulum 5 m away at 320 x 240: its links (capsules 0.05 m thick) are 2.8 px
    across and cover 50-60 px each. At full frame the network found neither (0 of 2 with
    segment.zoom=1); magnified, both."""
    rec = far_recording("double_pendulum", tmp_path / "far", 5.0, n=13)
    run = tmp_path / "run"
    r = vid2sim("segment", rec, "--out", run, ok=(0,))
    seg = np.load(run / "segmentation.npz")
    ids = cv2.imread(str(rec / "truth_masks" / f"{int(seg['frame']):06d}.png"), cv2.IMREAD_UNCHANGED)
    for body in (1, 2):
        gt = ids == body
        assert 40 < gt.sum() < 80
        iou = [((m > 0) & gt).sum() / ((m > 0) | gt).sum() for m in seg["masks"]]
        assert max(iou) > 0.5, (body, iou, r.stderr[-2000:])


def test_a_wall_is_background_by_default(caplog):
    """The lab-framing report: a wall seen as a box 4.97 x 1.64 m fits no library shape. By
    default it is background, on one INFO line with its class and size; with
    ``unmatched="error"`` it stops segment, naming what was seen."""
    from vid2sim.datasets.errors import RecordingError
    from vid2sim.datasets.shapes import Shape
    from vid2sim.models.segmenter.model import Detection
    from vid2sim.pipeline.segment import SegmentConfig, match_shapes

    shapes = {"carcass": Shape("carcass", "box", size=(0.5, 0.4, 0.6)),
              "door": Shape("door", "box", size=(0.46, 0.02, 0.36))}
    mask = np.zeros((8, 8), bool)
    mask[:4] = True
    dets = [Detection(mask, 0, 0.97), Detection(mask, 0, 0.95)]
    seen = [(4.97, 1.64), (0.45, 0.3)]
    with caplog.at_level("INFO", logger="vid2sim.pipeline.segment"):
        names = match_shapes(dets, seen, shapes, True, 1.6, Path("rec/shapes.json"), 0, SegmentConfig().unmatched)
    assert names == [None, "door"]
    lines = [r.getMessage() for r in caplog.records if "background" in r.getMessage()]
    assert lines == ["segment: frame 0: background: a box about 4.97 x 1.64 m (score 0.97, 32 px) "
                     "matches no library shape"], lines
    with pytest.raises(RecordingError, match="a box about 4.97 x 1.64 m .* matches no library shape"):
        match_shapes(dets, seen, shapes, True, 1.6, Path("rec/shapes.json"), 0, "error")


def test_unexpected_exception_in_a_stage_is_one_line(rec, tmp_path, monkeypatch, capsys):
    """A bug inside a stage (here: track raising ZeroDivisionError) is wrapped as
    "STAGE: RECORDING: ExceptionType: message", exit 2; --debug adds the traceback."""
    from vid2sim.pipeline import cli, track

    run = tmp_path / "run"
    vid2sim("segment", rec, "--out", run, ok=(0,))

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(track, "run", broken)
    for debug in ([], ["--debug"]):
        monkeypatch.setattr(sys, "argv", ["vid2sim", *debug, "track", str(rec), "--out", str(run)])
        with pytest.raises(SystemExit) as e:
            cli.main()
        assert e.value.code == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert lines == [f"error: track: {rec}: ZeroDivisionError: float division by zero"], err
        assert ("Traceback" in err) == bool(debug), err


def test_ctrl_c_is_exit_130_without_a_traceback(rec, tmp_path):
    """SIGINT while segment runs, repeated every 0.3 s until the process ends: exit code 130, no
    traceback, no error line (a Ctrl-C during Python's finalisation would otherwise kill it by
    the signal)."""
    import signal
    import time

    # SIGINT's default action in the child: an earlier test in this process (Ray) may have set it
    # to "ignore", which a child inherits, and a Python started so never installs its handler
    proc = subprocess.Popen(VID2SIM + ["run", str(rec), "--out", str(tmp_path / "run")], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env={**os.environ, "COLUMNS": "400"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stderr:  # the stage's progress line: segment is running
        seen.append(line)
        if "segment" in line:
            break
    time.sleep(0.5)
    import threading

    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stderr.read()), daemon=True)
    reader.start()  # drained while we wait: a full pipe would block the command
    for _ in range(200):  # pressed again and again, as an impatient user would, also while the process shuts down
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=0.3)
            break
        except subprocess.TimeoutExpired:
            continue
    reader.join(timeout=60)
    rest = "".join(out)
    assert proc.wait(timeout=120) == 130, "".join(seen) + rest
    assert "Traceback" not in rest and "error:" not in rest, rest


def test_batch_with_a_failed_recording_ends_in_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """`vid2sim batch` whose recordings partly fail: each row printed, then one error line naming
    the summary and the first failure, exit code 2 (run_batch stubbed: no Ray cluster here; the
    batch itself is tests/test_batch.py's)."""
    from vid2sim.pipeline import batch, cli

    rows = [{"recording": "a", "status": "ok", "error": ""},
            {"recording": "b", "status": "failed", "error": "b/camera.json: missing"}]
    monkeypatch.setattr(batch, "run_batch", lambda *a, **k: rows)
    monkeypatch.setattr(sys, "argv", ["vid2sim", "batch", "a", "b", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert lines == [f"error: batch: {tmp_path / 'out' / 'summary.html'}: 1 of 2 recordings failed "
                     f"(first: b: b/camera.json: missing)"], lines
