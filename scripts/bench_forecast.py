"""Video forecasting benchmark (Heiden et al., §4.3.5.2, Table 4.6) on the synthetic cartpole.

A depth recording of ``--frames`` frames, split in time as ``vid2sim run`` splits it: identify
fits the frames before the last ``--holdout`` of them (``identify.run_with_holdout``), and
forecast restarts that fit from its last fitted state (estimated over its last ``--observe``
fitted frames) and predicts every held-back frame, which no fit saw.
Prints JSON ``{"twin"|"hold"|"constvel"|"posterior": {"mse", "mae", "ssim", "iou"}, "inputs":
{...}, "seconds": ...}``; ``inputs`` says where each input came from: the pipeline
stage, or ``truth`` where a stage is missing or failed (the error is kept), so a
figure is never passed off as the pipeline's when it is not.

    python scripts/bench_forecast.py [--frames 300] [--holdout 0.5] [--observe 10]
        [--noise realistic] [--source pipeline|truth] [--out DIR] [--method csvgd]
"""
from __future__ import annotations

import argparse
import dataclasses
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
from vid2sim.datasets.synthetic import make_recording, simulate  # noqa: E402
from vid2sim.pipeline import export, forecast  # noqa: E402
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks, Posterior  # noqa: E402

log = logging.getLogger("bench_forecast")


def truth_inputs(st, fps: float):
    tr = st.truth
    art, poses = Articulation.from_truth(tr), PoseTracks.from_truth(tr, st.world_from_body, fps)
    names, q = export.joint_coordinates(art, poses)
    p = tr["params"]
    post = Posterior(list(p), {k: (v, v) for k, v in p.items()}, dict(p), np.array([[p[k] for k in p]]), "truth", 0.0)
    return art, poses, JointPositions(q, names, export.root_poses(art, poses)), post


def _stage(name: str, fn, fallback, inputs: dict, source: str):
    if source == "truth":
        inputs[name] = "truth"
        return fallback()
    try:
        out = fn()
        inputs[name] = "pipeline"
        return out
    except Exception as e:  # a missing or failing upstream stage: say so, use the truth
        log.warning("%s stage failed (%s: %s); using the truth", name, type(e).__name__, e)
        inputs[name] = f"truth ({name} failed: {type(e).__name__}: {str(e)[:200]})"
        return fallback()


def build_twin(mechanism: str, out: Path, frames: int, holdout: float, noise: str, source: str, seed: int = 0,
               fps: float = 30.0, masses: dict | None = None, method: str | None = None):
    """Recording + the pipeline up to export (identify fits the frames before the last ``holdout``
    of them, then refits on all for the export, as ``vid2sim run`` does).

    Returns (rec, poses, art, jp, post, post_train, inputs); ``inputs`` names each input's source.
    """
    rec = open_recording(make_recording(mechanism, out / "rec", seed=seed, frames=frames, fps=fps,
                                        noise=noise, overwrite=True))
    st = simulate(mechanism, seed=seed, frames=frames, fps=fps)
    t_art, t_poses, t_jp, t_post = truth_inputs(st, fps)
    run = out / "run"
    run.mkdir(parents=True, exist_ok=True)
    inputs: dict[str, str] = {}

    def tracked():
        from vid2sim.pipeline import segment, track

        seg = segment.run(segment.SegmentConfig(), rec, run)
        return track.run(track.TrackConfig(), rec, seg, run)

    poses = _stage("track", tracked, lambda: t_poses, inputs, source)

    def articulated():
        from vid2sim.pipeline import articulate

        return articulate.run(articulate.ArticulateConfig(plots=False), poses, run, shapes=rec.shapes)

    art, jp = _stage("articulate", articulated, lambda: (t_art, t_jp), inputs, source)

    def identified():
        from vid2sim.pipeline import identify

        cfg = identify.IdentifyConfig(bounds=identify.IdentifyBounds(masses=dict(masses or {})))
        if method is not None:
            cfg = dataclasses.replace(cfg, inference=dataclasses.replace(cfg.inference, method=method))
        return identify.run_with_holdout(cfg, art, jp, poses, rec.shapes, run, holdout=holdout)

    post_train, post = _stage("identify", identified, lambda: (t_post, t_post), inputs, source)
    poses.save(run / PoseTracks.FILE)
    art.save(run / Articulation.FILE)
    jp.save(run / JointPositions.FILE)
    post.save(run / Posterior.FILE)
    post_train.save(run / Posterior.TRAIN_FILE)
    (run / export.MODEL_FILE).unlink(missing_ok=True)
    export.run(export.ExportConfig(), art, post, rec.shapes, poses, run)
    return rec, poses, art, jp, post, post_train, inputs


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mechanism", default="cartpole")
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--holdout", type=float, default=0.5, help="last fraction of the frames held back and predicted")
    ap.add_argument("--observe", type=int, default=10)
    ap.add_argument("--particles", type=int, default=8)
    ap.add_argument("--noise", default="realistic", choices=("none", "realistic"))
    ap.add_argument("--source", default="pipeline", choices=("pipeline", "truth"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--method", default=None, help="identify's inference method (default: IdentifyConfig's)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    t0 = time.time()
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_forecast_"))
    rec, poses, art, jp, post, post_train, inputs = build_twin(args.mechanism, out, args.frames, args.holdout,
                                                               args.noise, args.source, args.seed, method=args.method)
    run = out / "run"
    cfg = forecast.ForecastConfig(holdout=args.holdout, observe=args.observe, particles=args.particles)
    fc = forecast.run(cfg, rec, poses, art, jp, post, run, post_train=post_train)
    fc.save(run)
    result = {**fc.metrics, "inputs": inputs, "fitted": fc.info["fitted"], "frames": [int(fc.frames[0]), int(fc.frames[-1])],
              "depth_range_m": fc.info["depth_range_m"], "renderer": fc.info["renderer"],
              "simulator": fc.info["simulator"], "noise": args.noise, "run": str(run), "seconds": round(time.time() - t0, 1)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
