"""scripts/bench_scenes.py's scorer: the masks, not only the shape names, against the truth masks; the tracks
per part."""
import numpy as np
import pytest


def test_bench_scores_masks_against_the_truth_masks(tmp_path):
    """bench_scenes' seg_masks_ok: the truth's own masks (frame 2) score right, the same masks
    under swapped names (cart over the pole) wrong, with what each wrong mask covers."""
    import importlib.util
    import json
    from pathlib import Path

    import cv2

    from vid2sim.datasets.synthetic import make_recording

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_scenes.py"
    spec = importlib.util.spec_from_file_location("bench_scenes", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rec = make_recording("cartpole", tmp_path / "rec", seed=2, frames=4, scene="random")
    truth = json.loads((rec / "truth.json").read_text())
    tm = cv2.imread(str(rec / "truth_masks" / "000002.png"), cv2.IMREAD_UNCHANGED)
    masks = np.stack([tm == k + 1 for k in range(len(truth["bodies"]))]).astype(np.uint8)
    names = [b["shape"] for b in truth["bodies"]]
    run = tmp_path / "run"
    run.mkdir()
    np.savez(run / "segmentation.npz", masks=masks, frame=np.int64(2), shape_names=np.array(names))
    s = bench._segmentation_scores(run, truth, rec)
    assert s["seg_shapes_ok"] and s["seg_masks_ok"] and s["seg_masks_wrong"] == []
    np.savez(run / "segmentation.npz", masks=masks, frame=np.int64(2), shape_names=np.array(names[::-1]))
    s = bench._segmentation_scores(run, truth, rec)
    assert s["seg_shapes_ok"] and not s["seg_masks_ok"]
    assert sorted(s["seg_masks_wrong"]) == sorted(f"{a}<-{b}" for a, b in zip(names[::-1], names))


def test_a_pushed_cell_is_long_enough_to_show_the_push():
    """bench_scenes' clip of the pushed linkage: 40 frames end before the pusher meets it (its
    hinges at rest), the ``clip_frames`` it makes show the hinges turning by degrees."""
    import importlib.util
    from pathlib import Path

    from vid2sim.datasets.synthetic import simulate

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_scenes.py"
    spec = importlib.util.spec_from_file_location("bench_scenes", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.clip_frames("cartpole", 40) == 40
    n = bench.clip_frames("pushed", 40)
    assert n >= 90
    for seed in (0, 1):
        q = simulate("pushed", seed=seed, frames=n, fps=30.0).q
        assert np.degrees(np.ptp(q[:40], axis=0)).max() < 0.5
        assert np.degrees(np.ptp(q, axis=0)).max() > 10.0


def test_a_reused_recording_keeps_its_own_length(tmp_path):
    """``--reuse`` of a pushed cell kept before ``clip_frames`` existed (a 40-frame clip): the row
    says 40, not the 90 a fresh pushed cell gets, so a linkage at rest is not reported as pushed."""
    import importlib.util
    import json
    from pathlib import Path
    from types import SimpleNamespace

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_scenes.py"
    spec = importlib.util.spec_from_file_location("bench_scenes", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    src = tmp_path / "kept"
    rec = src / "cells" / "pushed_s7" / "rec"
    (rec / "depth").mkdir(parents=True)
    for i in range(40):
        (rec / "depth" / f"{i:06d}.png").write_bytes(b"")
    (src / "cells.jsonl").write_text(json.dumps({"mechanism": "pushed", "seed": 7, "frames": 40, "noise": "none",
                                                 "stages": {"segment": {"rc": 2}}}) + "\n")
    args = SimpleNamespace(reuse=src, start="segment", frames=40, noise="none")
    row = {"clip_frames": bench.clip_frames("pushed", 40), "stages": {}}
    assert row["clip_frames"] >= 90
    bench._reused("pushed", 7, args, tmp_path / "out", row)
    assert row["clip_frames"] == 40


def test_one_part_off_in_most_frames_is_named_not_hidden_in_the_median(tmp_path):
    """bench_scenes' tracking scores: three parts tracked 0.1 mm off, the middle one slid 250 mm in
    24 of 40 frames (as pendulum3 s96's link1 slid 133-273 mm along its axis, hidden behind a
    distractor), its track listed first. The median over parts and frames stays 0.1 mm; the worst
    part is named by the truth (link1) with its own median, 250.1 mm, 0.2017 of the 1.24 m distance."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_scenes.py"
    spec = importlib.util.spec_from_file_location("bench_scenes", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    T = 40
    truth_W = np.tile(np.eye(4), (T, 3, 1, 1))
    truth_W[:, :, 0, 3] = [0.0, 0.3, 0.6]  # three parts 0.3 m apart along x
    truth_W[:, :, 2, 3] = np.linspace(0.0, 0.1, T)[:, None]
    rec, run = tmp_path / "rec", tmp_path / "run"
    rec.mkdir()
    run.mkdir()
    np.savez(rec / "truth_poses.npz", world_from_body=truth_W)
    W = truth_W.copy()
    W[:, :, 2, 3] += 0.0001
    W[:24, 1, 2, 3] += 0.25
    order = [1, 0, 2]  # the run lists the parts in another order than the truth
    np.savez(run / "poses.npz", world_from_body=W[:, order], lost=np.zeros((T, 3), bool),
             body_names=np.array(["a", "b", "c"]))
    truth = {"bodies": [{"name": n} for n in ("link0", "link1", "link2")], "scene": {"distance_m": 1.24}}
    s = bench._tracking_scores(rec, run, truth)
    assert s["track_err_m"] == pytest.approx(0.0001, abs=1e-9)
    assert s["track_worst_body"] == "link1"
    assert s["track_err_worst_m"] == pytest.approx(0.2501, abs=1e-9)
    assert s["track_err_worst_rel"] == pytest.approx(0.2501 / 1.24, abs=1e-9)
    assert s["bodies_missing"] == 0
