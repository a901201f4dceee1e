"""Twin reproduction benchmark (issue 8): does each synthetic mechanism's exported twin,
restarted in PyBullet from its tracked state, reproduce the recording's next 2 s?

For every mechanism (``--mechanisms``, default all of ``MECHANISMS``): a clean depth
recording, then the whole pipeline (segment ... export) on it; the pipeline's
``model.urdf`` is restarted in PyBullet (default motors off) from the state estimated
over the tracked frames ``at-9 .. at`` (``forecast.simulate_twin``) and simulated for 2 s;
its rendered silhouette is compared with the recording's true body masks frame by
frame (IoU of the union of the mechanism's pixels; ``pushed``'s tip is not the twin's).
The peer in the same run is the twin exported from the truth's tracks and parameters
(what ``tests/test_export.py`` checks), so a low pipeline figure separates perception
and identification errors from export/simulator errors.

Prints one JSON object as the last stdout line: ``{mechanism: {"pipeline": {"iou_mean",
"iou_min"} | {"error"}, "truth": {"iou_mean", "iou_min"}, "seconds"}, ...}``.

    python scripts/bench_twin.py [--mechanisms cartpole,cabinet] [--frames 120] [--at 20]
        [--seconds 2] [--noise none] [--out DIR] [--set identify.method=csvgd ...]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from vid2sim.datasets.recording import open_recording  # noqa: E402
from vid2sim.datasets.synthetic import MECHANISMS, make_recording, simulate  # noqa: E402
from vid2sim.pipeline import export, forecast  # noqa: E402
from vid2sim.pipeline.artifacts import Articulation, PoseTracks, Posterior  # noqa: E402
from vid2sim.pipeline.cli import parse_sets  # noqa: E402
from vid2sim.pipeline.run import resolve_configs, run_pipeline  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_forecast import truth_inputs  # noqa: E402

log = logging.getLogger("bench_twin")
FPS = 30.0


def bench(name: str, out: Path, frames: int, at: int, steps: int, noise: str, seed: int,
          configs: dict | None = None) -> dict:
    t0 = time.time()
    rec_path = make_recording(name, out / "rec", seed=seed, frames=frames, fps=FPS, noise=noise, overwrite=True)
    st = simulate(name, seed=seed, frames=frames, fps=FPS)
    tip = forecast.Tip.from_truth(st)
    res: dict = {}
    # peer: the twin exported from the truth's tracks and parameters
    art, poses, jp, post = truth_inputs(st, FPS)
    tdir = out / "truth_twin"
    tdir.mkdir(parents=True, exist_ok=True)
    urdf = export.run(export.ExportConfig(), art, post, st.shapes, poses, tdir)
    iou = forecast.silhouette_iou(rec_path, urdf, art, poses, post, st.shapes, at, steps, tip)
    res["truth"] = {"iou_mean": float(iou.mean()), "iou_min": float(iou.min())}
    run = out / "run"
    try:
        run_pipeline(rec_path, run, configs, stages=["segment", "track", "articulate", "identify", "export"])
        art, poses = Articulation.load(run / Articulation.FILE), PoseTracks.load(run / PoseTracks.FILE)
        post = Posterior.load(run / Posterior.FILE)
        iou = forecast.silhouette_iou(rec_path, run / "model.urdf", art, poses, post, open_recording(rec_path).shapes,
                                      at, steps, tip)
        res["pipeline"] = {"iou_mean": float(iou.mean()), "iou_min": float(iou.min()),
                           "joints": [f"{j.name}:{j.type}" for j in art.joints]}
    except Exception as e:  # a failing stage is a result to report, not to hide
        log.warning("%s: pipeline failed: %s: %s", name, type(e).__name__, e)
        res["pipeline"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    res["seconds"] = round(time.time() - t0, 1)
    return res


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mechanisms", default=",".join(MECHANISMS))
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--at", type=int, default=20, help="restart frame (state from frames at-9 .. at)")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--noise", default="none", choices=("none", "realistic"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="STAGE.KEY=VALUE",
                    help="override a setting as vid2sim run does (repeatable), e.g. --set identify.method=csvgd")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    names = [n for n in args.mechanisms.split(",") if n]
    unknown = [n for n in names if n not in MECHANISMS]
    if unknown:
        ap.error(f"unknown mechanism(s) {unknown}; known: {', '.join(MECHANISMS)}")
    configs = resolve_configs(parse_sets(args.set)) if args.set else None
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_twin_"))
    results = {}
    for name in names:
        steps = int(round(args.seconds * FPS))
        if args.at + steps >= args.frames:
            ap.error(f"--at {args.at} + {steps} frames does not fit in --frames {args.frames}")
        print(f"bench_twin: {name} ...", file=sys.stderr)
        results[name] = bench(name, out / name, args.frames, args.at, steps, args.noise, args.seed, configs)
        print(f"bench_twin: {name}: {json.dumps(results[name])}", file=sys.stderr)
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
