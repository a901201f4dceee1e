"""The recording folder (docs/formats.md §1): round trip, streaming, malformed input.

Every malformed recording must fail with a RecordingError whose message names the
offending file and says what is wrong with it.
"""
from __future__ import annotations

import json
import re
import types
from pathlib import Path

import cv2
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.recording import Camera, FolderRecording, RecordingWriter, open_recording
from vid2sim.datasets.shapes import Shape

W, H, N = 40, 30, 4


def _camera(**kw) -> Camera:
    T = np.eye(4)
    T[:3, 3] = [0.0, -1.0, 0.5]
    return Camera(width=W, height=H, fx=35.0, fy=36.0, cx=19.5, cy=14.5, depth_scale=0.001, fps=15.0,
                  world_from_camera=T, **kw)


def _frames(n=N, seed=0):
    rng = np.random.default_rng(seed)
    units = [rng.integers(400, 2500, (H, W)).astype(np.uint16) for _ in range(n)]
    for u in units:
        u[:2, :3] = 0  # holes
    rgb = [rng.integers(0, 256, (H, W, 3), dtype=np.uint8) for _ in range(n)]
    return units, rgb


def write(path: Path, n=N, shapes=None) -> Path:
    units, rgb = _frames(n)
    with RecordingWriter(path, _camera(), shapes) as w:
        for u, c in zip(units, rgb):
            w.add(u * 0.001, c)
    return path


# ---- round trip ------------------------------------------------------------------------

def test_folder_round_trip_exact(tmp_path):
    units, rgb = _frames()
    shapes = {"cart": Shape("cart", "box", size=(0.4, 0.2, 0.1)), "pole": Shape("pole", "capsule", radius=0.03, length=0.8)}
    with RecordingWriter(tmp_path / "rec", _camera(), shapes) as w:
        for u, c in zip(units, rgb):
            w.add(u * 0.001, c)  # metres on 1 mm steps
        w.add_file("truth.json", '{"bodies": []}')
    rec = open_recording(tmp_path / "rec")
    assert isinstance(rec, FolderRecording)
    assert rec.num_frames == N and rec.has_depth and rec.has_color
    assert rec.camera.to_json() == _camera().to_json()
    assert rec.shapes == shapes
    assert json.loads((tmp_path / "rec" / "truth.json").read_text()) == {"bodies": []}
    for i in range(N):
        np.testing.assert_array_equal(rec.depth_raw(i), units[i])  # exact at 1 mm
        np.testing.assert_allclose(rec.depth(i), units[i] * 0.001, atol=1e-7)
        assert rec.depth(i).dtype == np.float32
        np.testing.assert_array_equal(rec.color(i), rgb[i])  # PNG: exact


def test_frames_are_streamed(tmp_path):
    rec = open_recording(write(tmp_path / "rec"))
    it = rec.frames(1, 3)
    assert isinstance(it, types.GeneratorType)  # one frame in memory at a time
    got = [(i, d.shape, c.shape) for i, d, c in it]
    assert got == [(1, (H, W), (H, W, 3)), (2, (H, W), (H, W, 3))]
    assert [i for i, _, _ in rec.frames(2)] == [2, 3]


def test_writer_is_atomic_and_refuses_to_overwrite(tmp_path):
    with pytest.raises(RuntimeError):
        with RecordingWriter(tmp_path / "rec", _camera()) as w:
            w.add(np.full((H, W), 1.0), None)
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []  # nothing half-written, no temp folder left
    write(tmp_path / "rec")
    with pytest.raises(FileExistsError, match="already exists"):
        RecordingWriter(tmp_path / "rec", _camera())


def test_colour_only_and_depth_only_folders(tmp_path):
    units, rgb = _frames(2)
    with RecordingWriter(tmp_path / "c", _camera()) as w:
        for c in rgb:
            w.add(None, c)
    with RecordingWriter(tmp_path / "d", _camera()) as w:
        for u in units:
            w.add(u * 0.001, None)
    c, d = open_recording(tmp_path / "c"), open_recording(tmp_path / "d")
    assert (c.has_depth, c.has_color, d.has_depth, d.has_color) == (False, True, True, False)
    np.testing.assert_array_equal(c.color(1), rgb[1])
    np.testing.assert_array_equal(d.depth_raw(1), units[1])


# ---- malformed recordings --------------------------------------------------------------

def _edit_camera(**changes):
    def f(rec: Path):
        d = json.loads((rec / "camera.json").read_text())
        for k, v in changes.items():
            if v is None:
                d.pop(k)
            else:
                d[k] = v
        (rec / "camera.json").write_text(json.dumps(d))  # json writes NaN/Infinity literally
    return f


def _write_png(rel: str, img_fn):
    def f(rec: Path):
        cv2.imwrite(str(rec / rel), img_fn())
    return f


def _all_depth(fn):
    def f(rec: Path):
        for p in sorted((rec / "depth").iterdir()):
            cv2.imwrite(str(p), fn(cv2.imread(str(p), cv2.IMREAD_UNCHANGED)))
    return f


def _rename_frame(rec: Path):
    for sub in ("depth", "color"):
        (rec / sub / "000002.png").rename(rec / sub / "000007.png")


def _truncate(rel: str, keep: int):
    def f(rec: Path):
        p = rec / rel
        p.write_bytes(p.read_bytes()[:keep])
    return f


MALFORMED = {
    # name: (break the folder, file the message must name, problem it must state, read frame or None = at open)
    "missing camera.json": (lambda r: (r / "camera.json").unlink(), "camera.json", r"camera\.json is missing", None),
    "camera.json not JSON": (lambda r: (r / "camera.json").write_text("{width: 40"), "camera.json", r"not valid JSON", None),
    "non-finite fx": (_edit_camera(fx=float("nan")), "camera.json", r"fx must be a finite number, got nan", None),
    "infinite cy": (_edit_camera(cy=float("inf")), "camera.json", r"cy must be a finite number, got inf", None),
    "negative fy": (_edit_camera(fy=-36.0), "camera.json", r"fy must be > 0, got -36", None),
    "zero depth_scale": (_edit_camera(depth_scale=0), "camera.json", r"depth_scale must be > 0", None),
    "missing key": (_edit_camera(depth_scale=None, fps=None), "camera.json", r"missing key\(s\) depth_scale, fps", None),
    "width not an integer": (_edit_camera(width=40.5), "camera.json", r"width must be a positive integer, got 40\.5", None),
    "world_from_camera not rigid": (_edit_camera(world_from_camera=(2 * np.eye(4)).tolist()), "camera.json",
                                    r"not a rigid transform", None),
    "camera size differs from frames": (_edit_camera(width=41), "depth/000000.png", r"image is 40x30 but camera\.json says 41x30", None),
    "colour size differs from camera": (_write_png("color/000000.png", lambda: np.zeros((H + 1, W, 3), np.uint8)),
                                        "color/000000.png", r"image is 40x31 but camera\.json says 40x30", None),
    "depth size differs from camera": (_write_png("depth/000002.png", lambda: np.full((H, W + 2), 900, np.uint16)),
                                       "depth/000002.png", r"image is 42x30 but camera\.json says 40x30", 2),
    "gap in frame numbering": (_rename_frame, "depth/000002.png", r"frame 2 is missing: frames must be numbered 0\.\.N-1 without gaps", None),
    "stray file in frame folder": (lambda r: (r / "color" / "frame_9.png").write_bytes(b""), "color/frame_9.png",
                                   r"unexpected file in a frame folder", None),
    "corrupt PNG": (_truncate("color/000003.png", 40), "color/000003.png", r"cannot be decoded as an image", 3),
    "corrupt first PNG": (_truncate("depth/000000.png", 40), "depth/000000.png", r"cannot be decoded as an image", None),
    "8-bit depth PNG": (_write_png("depth/000000.png", lambda: np.full((H, W), 90, np.uint8)), "depth/000000.png",
                        r"depth must be a 16-bit PNG, got uint8", None),
    "3-channel depth PNG": (_write_png("depth/000001.png", lambda: np.full((H, W, 3), 900, np.uint16)), "depth/000001.png",
                            r"depth must be single-channel, got 3 channels", 1),
    "all-zero depth": (_all_depth(lambda d: np.zeros_like(d)), "depth/000000.png", r"no valid reading \(all zero\)", None),
    "metres stored as mm": (_edit_camera(depth_scale=1.0), "depth/000000.png",
                            r"median depth 1\d{3} m is implausible .* is depth_scale 1\.0 in camera\.json the right unit", None),
    "depth and colour counts differ": (lambda r: (r / "color" / "000003.png").unlink(), ".",
                                       r"depth/ has 4 frames but color/ has 3", None),
    "unknown shape type": (lambda r: (r / "shapes.json").write_text('{"blob": {"type": "blob", "radius": 1}}'), "shapes.json",
                           r"shape 'blob' has unknown type 'blob'; known: box, capsule, sphere, cylinder, mesh", None),
    "negative shape size": (lambda r: (r / "shapes.json").write_text('{"cart": {"type": "box", "size": [0.4, -0.2, 0.1]}}'),
                            "shapes.json", r"shape 'cart': size must be finite and > 0, got -0\.2", None),
    "no frames at all": (lambda r: [p.unlink() for p in (r / "depth").iterdir()] and
                         [p.unlink() for p in (r / "color").iterdir()], "depth", r"frame folder is empty", None),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_folder_fails_clearly(tmp_path, case):
    breaker, rel, problem, read = MALFORMED[case]
    rec_dir = write(tmp_path / "rec", shapes={"cart": Shape("cart", "box", size=(0.4, 0.2, 0.1))})
    breaker(rec_dir)
    with pytest.raises(RecordingError) as e:
        rec = open_recording(rec_dir)
        if read is not None:
            rec.depth(read) if rel.startswith("depth") else rec.color(read)
    bad = (rec_dir / rel).resolve() if rel != "." else rec_dir
    msg = str(e.value)
    assert Path(e.value.path).resolve() == bad.resolve(), msg
    assert msg.startswith(f"{e.value.path}: "), msg
    assert re.search(problem, msg), msg


def test_missing_recording_and_unknown_type(tmp_path):
    with pytest.raises(RecordingError, match=r"nowhere: recording does not exist"):
        open_recording(tmp_path / "nowhere")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(RecordingError, match=r"notes\.txt: unknown recording type '\.txt'"):
        open_recording(tmp_path / "notes.txt")


def test_truncated_bag_and_empty_video_fail_clearly(tmp_path):
    """Files that are not what their suffix says: errors name the file (details in
    test_realsense.py / test_video.py)."""
    bag = tmp_path / "cut.db3"
    bag.write_bytes(b"SQLite format 3\x00" + bytes(200))
    with pytest.raises(RecordingError, match=r"cut\.db3: cannot be read as a RealSense recording \(truncated or corrupt\?\)"):
        open_recording(bag)
    vid = tmp_path / "empty.mp4"
    cv2.VideoWriter(str(vid), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (32, 32)).release()
    with pytest.raises(RecordingError, match=r"empty\.mp4: "):
        open_recording(vid)


def test_pixel_rays_project_back_onto_their_pixels():
    T = np.eye(4)
    T[:3, :3] = Rotation.from_rotvec([0.3, -0.2, 0.1]).as_matrix()
    T[:3, 3] = [0.1, -0.4, 0.2]
    cam = Camera(width=7, height=5, fx=60.0, fy=55.0, cx=3.2, cy=1.9, world_from_camera=T)
    rays = cam.pixel_rays()
    assert rays.shape == (5, 7, 3) and np.all(rays[..., 2] == 1.0)
    depth = np.random.default_rng(0).uniform(0.5, 2.0, (5, 7))
    p_cam = cam.backproject(depth)
    uv, z = cam.project(p_cam @ T[:3, :3].T + T[:3, 3])
    v, u = np.mgrid[0:5, 0:7]
    assert np.abs(uv - np.stack([u, v], -1)).max() < 1e-9 and np.abs(z - depth).max() < 1e-12
