"""CPU and wall time of the track stage alone, against another checkout's tracker on the same input.

Runs ``pipeline.track.run`` (default settings plus ``--set``, the overlay video included, as
``vid2sim run`` does) on a recording with the segmentation of an earlier run
(``RUN/segmentation.npz``: ``vid2sim segment REC --out RUN``), in a fresh process per run, and
reports per run: CPU seconds of that process (one torch thread; the frame reader's thread
included), wall seconds, frames per CPU and per wall second, and the
mean position / rotation error against ``truth_poses.npz`` when the recording has one
(``bench_pipeline.track_errors``). With ``--base CHECKOUT`` (a folder holding another
revision's ``pipeline/``, ``models/``, ``datasets/``, e.g. ``git worktree add ../base main``)
each round runs that checkout's tracker and this one's, alternating, and the result adds the
ratios of the CPU and of the wall seconds (this / base, medians over rounds) and whether the two wrote the same
poses (``poses.npz`` arrays equal to the last bit) and the same overlay video (bytes).

The last stdout line is the JSON ``{"runs": {"base": [...], "this": [...]}, "ratio_cpu", "ratio_wall",
"identical_poses", "identical_overlay"}``; progress goes to stderr.

    OMP_NUM_THREADS=1 python scripts/bench_track_speed.py REC RUN [--base ../base] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

# Run in the child process: PYTHONPATH there points at the checkout being measured.
CHILD = """
import json, sys, time
from pathlib import Path
import torch
sys.path.insert(0, {scripts!r})
from bench_pipeline import track_errors
from vid2sim.datasets.recording import open_recording
from vid2sim.pipeline import track
from vid2sim.pipeline.artifacts import Segmentation
from vid2sim.pipeline.cli import parse_sets
from vid2sim.pipeline.run import resolve_configs
torch.set_num_threads(1)
rec_path, out = Path({rec!r}), Path({out!r})
rec = open_recording(rec_path)
seg = Segmentation.load(Path({run!r}) / "segmentation.npz")
cfg = resolve_configs(parse_sets({sets!r}))["track"]
c0, w0 = time.process_time(), time.perf_counter()
poses = track.run(cfg, rec, seg, out)
cpu, wall = time.process_time() - c0, time.perf_counter() - w0
poses.save(out / "poses.npz")
err = track_errors(out, rec_path) if (rec_path / "truth_poses.npz").exists() else {{}}
print(json.dumps({{"cpu_s": round(cpu, 3), "fps_cpu": rec.num_frames / cpu, "wall_s": round(wall, 3),
                  "fps_wall": rec.num_frames / wall, "lost": int(poses.lost.sum()), **err}}))
"""


def shim(checkout: Path, tmp: Path, name: str) -> str:
    """A folder whose ``vid2sim`` package is ``checkout``'s pipeline, models and datasets."""
    pkg = tmp / name / "vid2sim"
    pkg.mkdir(parents=True)
    for part in ("pipeline", "models", "datasets"):
        if not (checkout / part).is_dir():
            raise SystemExit(f"error: bench_track_speed: {checkout}: no {part}/ folder (not a checkout?)")
        (pkg / part).symlink_to((checkout / part).resolve())
    return str(tmp / name)


def one_run(path: str, args, out: Path) -> dict:
    code = CHILD.format(scripts=str(HERE), rec=str(args.rec), run=str(args.run), out=str(out), sets=args.set)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: bench_track_speed: {out.name}: {proc.stderr.strip().splitlines()[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def same_poses(a: Path, b: Path) -> bool:
    x, y = np.load(a / "poses.npz"), np.load(b / "poses.npz")
    return x.files == y.files and all(np.array_equal(x[k], y[k]) for k in x.files)


def same_overlay(a: Path, b: Path) -> bool | None:
    fa, fb = sorted(a.glob("track_overlay.*")), sorted(b.glob("track_overlay.*"))
    if not fa and not fb:
        return None
    return [f.name for f in fa] == [f.name for f in fb] and all(p.read_bytes() == q.read_bytes() for p, q in zip(fa, fb))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rec", type=Path, help="recording folder")
    ap.add_argument("run", type=Path, help="run folder holding segmentation.npz")
    ap.add_argument("--base", type=Path, help="another checkout to compare with, run alternately")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting as vid2sim run does (repeatable), in both checkouts")
    args = ap.parse_args()
    if not (args.run / "segmentation.npz").exists():
        raise SystemExit(f"error: bench_track_speed: {args.run}/segmentation.npz: missing (run vid2sim segment first)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = {"this": shim(HERE.parent, tmp, "this")}
        if args.base is not None:
            paths = {"base": shim(args.base, tmp, "base"), **paths}
        runs: dict[str, list] = {k: [] for k in paths}
        for r in range(args.rounds):
            for name, path in paths.items():
                out = tmp / f"out_{name}_{r}"
                out.mkdir()
                runs[name].append(one_run(path, args, out))
                print(f"round {r} {name}: {json.dumps(runs[name][-1])}", file=sys.stderr)
        result: dict = {"runs": runs}
        if args.base is not None:
            for key in ("cpu_s", "wall_s"):
                result["ratio_" + key[:-2]] = float(np.median([t[key] / b[key] for t, b in zip(runs["this"], runs["base"])]))
            last = args.rounds - 1
            result["identical_poses"] = same_poses(tmp / f"out_base_{last}", tmp / f"out_this_{last}")
            result["identical_overlay"] = same_overlay(tmp / f"out_base_{last}", tmp / f"out_this_{last}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
