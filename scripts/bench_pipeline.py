"""End-to-end wall time of ``vid2sim run`` and of each stage, with tracking error and twin IoU.

For each case (default: the cartpole and the cabinet at 640x480 and the cartpole at
1280x720, RealSense-like noise) it writes the synthetic recording (cached in ``--work``),
runs the whole pipeline on it from scratch (``run_pipeline(force=True)``, default
settings plus ``--set``) and reports, per case:

- ``total_s``: wall time of the run; ``stages``: each stage's own wall time (s), as the
  run records it in ``RUN/.cache/STAGE.json``; ``total_cpu_s``, ``stages_cpu``: the same in
  this process's CPU seconds (on a shared machine the wall times include waiting for a core);
- ``error``: the one-line error of a stage that failed (later stages then did not run), or null;
- ``clip_s``: the clip's duration (frames / fps); ``x_realtime``: ``total_s / clip_s``
  (1.0: the twin is ready as fast as the clip plays);
- ``track_fps``: frames / track seconds; ``track_err_m``: mean distance (m) between the
  tracked and the true body centres over frames and bodies (``truth_poses.npz``; each
  tracked body matched to the true body of the same shape with the smallest error,
  since the segmenter orders instances its own way), ``track_rot_err_deg`` likewise
  (``bench_track.rotation_error_deg``);
- ``twin_iou``: the twin's IoU on the held-back frames (``forecast.json``
  ``metrics.twin.iou``: frames no fit saw); ``track_fps_cpu``: frames / track CPU seconds.

With ``--compare KEY=VALUE`` every case runs twice, interleaved (default settings, then
with the override), and each case reports both under ``base`` and ``alt``. The last stdout
line is the JSON ``{case: {...}}``; progress goes to stderr.

    OMP_NUM_THREADS=1 python scripts/bench_pipeline.py --frames 60 [--cases cartpole_640] [--set track.iterations=6]
"""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_track import rotation_error_deg  # noqa: E402

from vid2sim.datasets.recording import open_recording  # noqa: E402
from vid2sim.models.render import Primitive  # noqa: E402
from vid2sim.pipeline.artifacts import PoseTracks  # noqa: E402
from vid2sim.pipeline.cli import parse_sets  # noqa: E402
from vid2sim.pipeline.run import STAGES, resolve_configs, run_pipeline  # noqa: E402

CASES = {"cartpole_640": ("cartpole", (640, 480)), "cabinet_640": ("cabinet", (640, 480)),
         "cartpole_1280": ("cartpole", (1280, 720))}
log = logging.getLogger("bench_pipeline")


def track_errors(run_dir: Path, rec_path: Path) -> dict:
    """Mean position (m) and rotation (deg) error of the run's poses against the recording's truth."""
    truth = json.loads((rec_path / "truth.json").read_text())
    true_shapes = [b["shape"] for b in truth["bodies"]]
    T_true = np.load(rec_path / "truth_poses.npz")["world_from_body"]
    poses = PoseTracks.load(run_dir / "poses.npz")
    rec = open_recording(rec_path)
    pos, rot, used = [], [], set()
    for m, shape in enumerate(poses.shape_names):
        est = poses.world_from_body[:, m]
        cands = [k for k, s in enumerate(true_shapes) if s == shape and k not in used]
        if not cands:
            continue
        errs = [np.linalg.norm(est[:, :3, 3] - T_true[:, k, :3, 3], axis=-1) for k in cands]
        j = int(np.argmin([e.mean() for e in errs]))
        used.add(cands[j])
        prim = Primitive.from_shape(rec.shapes[shape])
        pos.append(errs[j])
        rot.append(rotation_error_deg(prim.kind, est[:, :3, :3], T_true[:, cands[j], :3, :3],
                                      [2 * h for h in prim.half_size]))
    return {"track_err_m": float(np.mean(pos)), "track_rot_err_deg": float(np.mean(rot)),
            "bodies_matched": len(pos), "bodies_true": len(true_shapes)}


def run_case(name: str, size: tuple[int, int], args, sets: list[str], tag: str) -> dict:
    from vid2sim.datasets.synthetic import make_recording

    rec_path = Path(args.work) / f"{name}_{size[0]}x{size[1]}_{args.noise}_{args.frames}_s{args.seed}"
    if not rec_path.exists():
        make_recording(name, rec_path, seed=args.seed, frames=args.frames, size=size, noise=args.noise)
    run_dir = Path(args.work) / "runs" / f"{rec_path.name}_{tag}"
    shutil.rmtree(run_dir, ignore_errors=True)  # no stage record of an earlier run may remain
    configs = resolve_configs(parse_sets(sets))
    t0, c0 = time.perf_counter(), time.process_time()
    cpu: dict[str, float] = {}

    def on_stage(stage: str, state: str) -> None:
        if state == "start":
            cpu[stage] = -time.process_time()
        elif stage in cpu:
            cpu[stage] = round(cpu[stage] + time.process_time(), 2)
        log.warning("%s %s: %s %s (%.0f s)", name, tag, stage, state, time.perf_counter() - t0)

    error = None
    try:
        run_pipeline(rec_path, run_dir, configs, force=True, on_stage=on_stage)
    except Exception as e:  # noqa: BLE001 - a failed stage is a result of the case, reported in its row
        error = " ".join(str(e).split())
        log.warning("%s %s: failed: %s", name, tag, error)
    total, total_cpu = time.perf_counter() - t0, time.process_time() - c0
    stages = {}
    for spec in STAGES:
        f = run_dir / ".cache" / f"{spec.name}.json"
        if f.exists():
            stages[spec.name] = json.loads(f.read_text())["seconds"]
    rec = open_recording(rec_path)
    clip = rec.num_frames / rec.fps
    forecast = json.loads((run_dir / "forecast.json").read_text()) if (run_dir / "forecast.json").exists() else {}
    out = {"total_s": round(total, 2), "stages": stages, "total_cpu_s": round(total_cpu, 2),
           "stages_cpu": {k: v for k, v in cpu.items() if v >= 0}, "frames": rec.num_frames, "error": error,
           "track_fps": rec.num_frames / stages["track"] if stages.get("track") else None,
           "track_fps_cpu": rec.num_frames / cpu["track"] if cpu.get("track", -1) > 0 else None,
           **(track_errors(run_dir, rec_path) if (run_dir / "poses.npz").exists() else {}),
           "twin_iou": forecast.get("metrics", {}).get("twin", {}).get("iou"),
           "validated": forecast.get("validated"), "clip_s": clip, "x_realtime": total / clip}
    log.warning("%s %s: %s", name, tag, json.dumps(out))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated of {', '.join(CASES)}")
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--noise", default="realistic", choices=("none", "realistic"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="/tmp/vid2sim_bench_pipeline")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting as vid2sim run does (repeatable)")
    ap.add_argument("--compare", action="append", default=[], metavar="KEY=VALUE",
                    help="also run every case with these overrides, interleaved with the plain run (repeatable)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    results = {}
    for case in args.cases.split(","):
        if case not in CASES:
            raise SystemExit(f"error: bench_pipeline: --cases: unknown case {case!r} (one of {', '.join(CASES)})")
        name, size = CASES[case]
        if args.compare:
            results[case] = {"base": run_case(name, size, args, args.set, "base"),
                             "alt": run_case(name, size, args, args.set + args.compare, "alt")}
        else:
            results[case] = run_case(name, size, args, args.set, "run")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
