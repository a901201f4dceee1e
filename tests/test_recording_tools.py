"""``convert`` (any recording -> folder) and ``inspect`` / ``contact_sheet``."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from vid2sim.datasets.convert import convert
from vid2sim.datasets.inspect import contact_sheet, format_summary, inspect
from vid2sim.datasets.recording import Camera, FolderRecording, RecordingWriter, open_recording

W, H = 40, 30


def _folder(path: Path, units: list[np.ndarray], rgb: list[np.ndarray] | None = None) -> Path:
    cam = Camera(width=W, height=H, fx=35.0, fy=35.0, cx=19.5, cy=14.5, depth_scale=0.001, fps=10.0)
    with RecordingWriter(path, cam) as w:
        for i, u in enumerate(units):
            w.add(u * 0.001, None if rgb is None else rgb[i])
        w.add_file("truth.json", '{"bodies": []}')
        w.add_file("meshes/part.obj", "v 0 0 0\n")
    return path


def _units(n=5):
    out = []
    for i in range(n):
        u = np.full((H, W), 1000 + 100 * i, np.uint16)
        u[:, : 4 * (i + 1)] = 0  # holes: 4, 8, ... columns of 40
        out.append(u)
    return out


def test_inspect_numbers(tmp_path):
    units = _units()
    rgb = [np.full((H, W, 3), 5 if i == 2 else 120, np.uint8) for i in range(5)]
    info = inspect(_folder(tmp_path / "rec", units, rgb), progress=False)
    json.dumps(info)  # JSON-ready
    assert (info["num_frames"], info["width"], info["height"], info["fps"]) == (5, W, H, 10.0)
    assert info["duration_s"] == pytest.approx(0.5)
    d = info["depth"]
    assert (d["min_m"], d["max_m"]) == (pytest.approx(1.0), pytest.approx(1.4))
    # Valid columns per frame: 36, 32, 28, 24, 20 (140): cumulative 36, 68, 96 -> the median (70th) is 1.2 m.
    assert d["p50_m"] == pytest.approx(1.2) and d["p1_m"] == pytest.approx(1.0) and d["p99_m"] == pytest.approx(1.4)
    hf = d["hole_fraction"]
    assert (hf["min"], hf["max"], hf["mean"], hf["worst_frame"]) == (pytest.approx(0.1), pytest.approx(0.5),
                                                                    pytest.approx(0.3), 4)
    assert d["frames_without_depth"] == 0
    assert info["color"]["dark_frames"] == 1
    text = format_summary(info)
    assert "5 frames, 40x30" in text and "holes 30.0%" in text


def test_inspect_stride(tmp_path):
    info = inspect(_folder(tmp_path / "rec", _units()), stride=2, progress=False)
    assert info["frames_inspected"] == 3 and info["depth"]["hole_fraction"]["worst_frame"] == 4
    assert "color" not in info


def test_contact_sheet(tmp_path):
    rec = _folder(tmp_path / "rec", _units(), [np.full((H, W, 3), 90, np.uint8)] * 5)
    out = contact_sheet(rec, tmp_path / "sheets" / "sheet.png", n=4, thumb_width=80)
    img = cv2.imread(str(out))
    assert img is not None and img.shape[1] >= 2 * 80  # colour and depth side by side
    assert sorted(p.name for p in out.parent.iterdir()) == ["sheet.png"]  # atomic: no temp file left


def test_convert_folder_keeps_extra_files(tmp_path):
    src = _folder(tmp_path / "src", _units(3))
    dst = convert(src, tmp_path / "dst", progress=False)
    rec = FolderRecording(dst)
    for i, u in enumerate(_units(3)):
        np.testing.assert_array_equal(rec.depth_raw(i), u)
    assert (dst / "truth.json").read_text() == '{"bodies": []}'
    assert (dst / "meshes" / "part.obj").exists()
    with pytest.raises(FileExistsError):
        convert(src, dst, progress=False)
    convert(src, dst, overwrite=True, progress=False)
    with pytest.raises(ValueError, match="destination is the source"):
        convert(src, src, overwrite=True, progress=False)


def test_convert_video_to_folder(write_mp4, tmp_path):

    vid = write_mp4(tmp_path / "clip.mp4", n=5)
    dst = convert(vid, tmp_path / "clip", progress=False)
    src, rec = open_recording(vid), open_recording(dst)
    assert (rec.num_frames, rec.has_depth, rec.has_color) == (5, False, True)
    assert rec.camera.to_json() == src.camera.to_json()
    for i in range(5):
        np.testing.assert_array_equal(rec.color(i), src.color(i))  # the decoded video frames, losslessly


def test_convert_db3_to_folder_exact(write_bag, realsense_frames, tmp_path):

    depth, color = realsense_frames(n=4)
    bag = write_bag(tmp_path / "rec.db3", depth, color)
    dst = convert(bag, tmp_path / "rec", progress=False)
    rec = open_recording(dst)
    assert rec.num_frames == 4 and rec.camera.to_json() == open_recording(bag).camera.to_json()
    for i in range(4):
        np.testing.assert_array_equal(rec.depth_raw(i), depth[i])  # bit-identical depth units
        np.testing.assert_array_equal(rec.color(i), color[i])


def test_cli_threads_option_caps_torch(tmp_path):
    """``vid2sim --threads N`` sets torch's CPU threads before any stage runs."""
    import torch
    from typer.testing import CliRunner

    from vid2sim.pipeline.cli import app

    rec = _folder(tmp_path / "rec", _units())
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        r = CliRunner().invoke(app, ["--threads", "1", "inspect", str(rec), "--sheet", str(tmp_path / "sheet.png")])
        assert r.exit_code == 0, r.output
        assert torch.get_num_threads() == 1
        r = CliRunner().invoke(app, ["--threads", "-1", "inspect", str(rec), "--sheet", str(tmp_path / "s2.png")])
        assert r.exit_code != 0 and "threads" in r.output
    finally:
        torch.set_num_threads(before)
