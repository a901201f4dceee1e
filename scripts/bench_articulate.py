"""Benchmark the articulate stage over a sweep of pose-noise levels on the synthetic set.

For every mechanism, seed and noise level: simulate truth poses (PyBullet), add
Gaussian noise (position sigma per component; orientation sigma = position sigma in
mm / 2, in degrees: 2 mm <-> 1 deg), run ``vid2sim.pipeline.articulate.run`` and
score it with ``vid2sim.models.joints.evaluate.compare``. Progress goes to stderr;
the last stdout line is the JSON summary:

    {"noise_mm": [...], "levels": [{"noise_mm", "rot_noise_deg", "type_accuracy",
      "tree_accuracy", "axis_err_deg": {"median", "p90", "max"}, "pivot_err_m": {...},
      "fk_pos_rms_m": {...}, "per_mechanism": {name: {"type_accuracy", "tree_ok"}}}], ...}

    python scripts/bench_articulate.py --seeds 2 --noise-mm 0.5 1 2 5 10
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from vid2sim.datasets.synthetic import MECHANISMS, simulate
from vid2sim.models.joints import forward_kinematics
from vid2sim.models.joints.evaluate import add_noise, compare, pose_errors
from vid2sim.pipeline.articulate import ArticulateConfig, run
from vid2sim.pipeline.artifacts import PoseTracks


def _stats(x: list[float]) -> dict[str, float | None]:
    if not x:
        return {"median": None, "p90": None, "max": None, "n": 0}
    a = np.asarray(x, float)
    return {"median": float(np.median(a)), "p90": float(np.percentile(a, 90)), "max": float(a.max()), "n": len(a)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--noise-mm", type=float, nargs="+", default=[0.5, 1.0, 2.0, 5.0, 10.0])
    ap.add_argument("--seeds", type=int, default=2, help="seeds 0..N-1 per mechanism")
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    sims = {(m, s): simulate(m, seed=s, frames=args.frames, fps=args.fps)
            for m in args.mechanisms for s in range(args.seeds)}
    levels = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp, tqdm(total=len(sims) * len(args.noise_mm), file=sys.stderr) as bar:
        for mm in args.noise_mm:
            sp, sr_deg = mm * 1e-3, mm / 2
            correct, trees, axis, pivot, fk = [], [], [], [], []
            per = {}
            for (m, s), sim in sims.items():
                W = add_noise(sim.world_from_body, sp, sr_deg, seed=1000 * s + int(mm * 10))
                names = [b["name"] for b in sim.truth["bodies"]]
                art, jp = run(ArticulateConfig(plots=False), PoseTracks(W, names, names, np.zeros(len(W)), args.fps),
                              Path(tmp))
                c = compare(art, sim.truth, (W[0], sim.world_from_body[0]))
                correct += [r["correct"] for r in c["joints"]]
                trees.append(c["tree_ok"])
                axis += [r["axis_err_deg"] for r in c["joints"] if r["axis_err_deg"] is not None]
                pivot += [r["pivot_err_m"] for r in c["joints"] if r["pivot_err_m"] is not None]
                fk.append(pose_errors(forward_kinematics(art, jp, W[0]), W)["pos_rms_m"])
                d = per.setdefault(m, {"correct": [], "tree_ok": []})
                d["correct"] += [r["correct"] for r in c["joints"]]
                d["tree_ok"].append(c["tree_ok"])
                bar.set_description(f"{mm} mm {m} s{s}")
                bar.update()
            levels.append({"noise_mm": mm, "rot_noise_deg": sr_deg, "type_accuracy": float(np.mean(correct)),
                           "tree_accuracy": float(np.mean(trees)), "axis_err_deg": _stats(axis),
                           "pivot_err_m": _stats(pivot), "fk_pos_rms_m": _stats(fk),
                           "per_mechanism": {m: {"type_accuracy": float(np.mean(d["correct"])),
                                                 "tree_ok": f"{sum(d['tree_ok'])}/{len(d['tree_ok'])}"}
                                             for m, d in per.items()}})
    out = {"bench": "articulate", "mechanisms": args.mechanisms, "seeds": args.seeds, "frames": args.frames,
           "noise_mm": args.noise_mm, "rotation_noise": "deg = mm / 2, per component", "levels": levels,
           "seconds": round(time.time() - t0, 1)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
