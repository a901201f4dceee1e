"""Twin benchmark, held out in time: does each synthetic mechanism's twin, built from the
first part of a clip, predict the part it never saw?

For every mechanism (``--mechanisms``, default every synthetic one): a recording of
``--fit-seconds`` + ``--seconds`` (default 3 s + 2 s; ``thrown`` 1.0 s + 2 s: its pair
first touches the floor at frames 20-23 and rests from about 1.3 s, so a fit that ends
before the landing holds no evidence of the floor's friction and restitution, which decide
every later frame; 1.0 s holds the landing and the first bounces); the pipeline (segment ... export)
runs on a copy holding only the first ``fit`` frames (``write_first_frames``: no stage
sees the rest, not even articulate); its ``model.urdf`` is restarted in PyBullet from the
state estimated over its last tracked frames (``forecast.simulate_twin``) and simulated over
the unseen ``--seconds``. Its rendered silhouette is compared frame by frame with the
recording's true body masks (IoU of the union of the mechanism's pixels; ``pushed``'s tip
is not the twin's, and is replayed from the truth).

Beside it, in the same run:
- ``oracle``: the twin exported from the truth's joints, parameters and whole true motion
  (the true URDF), restarted the same way from the true poses;
- ``hold``: the last fitted frame's tracked silhouette held;
- ``constvel``: the tracked poses extrapolated at constant velocity.

Prints one JSON object as the last stdout line: ``{mechanism: {"pipeline": {"iou_mean",
"iou_min", "joints"} | {"error"}, "oracle", "hold", "constvel": {"iou_mean", "iou_min"},
"ratio": pipeline / oracle, "seconds"}, ...}``; progress goes to stderr.

    python scripts/bench_twin.py [--mechanisms cartpole,cabinet] [--fit-seconds 3] [--seconds 2]
        [--noise none] [--seed 0] [--out DIR] [--set identify.inference.method=csvgd ...]
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

from vid2sim.datasets.recording import open_recording, write_first_frames  # noqa: E402
from vid2sim.datasets.synthetic import MECHANISMS, make_recording, simulate, true_masks  # noqa: E402
from vid2sim.models.render.depth import DepthRenderer  # noqa: E402
from vid2sim.pipeline import export, forecast  # noqa: E402
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks, Posterior  # noqa: E402
from vid2sim.pipeline.cli import parse_sets  # noqa: E402
from vid2sim.pipeline.run import resolve_configs, run_pipeline  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_forecast import truth_inputs  # noqa: E402

log = logging.getLogger("bench_twin")
FPS = 30.0
STAGES = ["segment", "track", "articulate", "identify", "export"]
# mechanisms whose motion is over before the default fit window ends: their own window
FIT_SECONDS = {"thrown": 1.0}  # the pair first hits the floor at frames 20-23 (seeds 0-2) and rests from about 38


def silhouettes(rec_path: Path, W: np.ndarray, shapes: list) -> np.ndarray:
    """(N, H, W) bool silhouettes of bodies at poses W (N, M, 4, 4) through the recording's camera."""
    renderer = DepthRenderer(open_recording(rec_path).camera, shapes)
    return np.stack([renderer.render(Wk)[1] >= 0 for Wk in W])


def _iou(pred: np.ndarray, real: np.ndarray) -> dict:
    v = forecast.mask_iou(pred, real)
    return {"iou_mean": round(float(v.mean()), 4), "iou_min": round(float(v.min()), 4)}


def _ordered(art: Articulation, poses: PoseTracks, shapes: dict) -> tuple[np.ndarray, list]:
    idx = [poses.body_names.index(b) for b in art.bodies]
    return poses.world_from_body[:, idx], [shapes[poses.shape_names[i]] for i in idx]


def bench(name: str, out: Path, fit: int, steps: int, noise: str, seed: int, configs: dict) -> dict:
    t0 = time.time()
    frames = fit + steps
    rec_path = make_recording(name, out / "rec", seed=seed, frames=frames, fps=FPS, noise=noise, overwrite=True)
    st = simulate(name, seed=seed, frames=frames, fps=FPS)
    tip = forecast.Tip.from_truth(st)
    at = fit - 1
    real = true_masks(rec_path, range(fit, frames))
    res: dict = {}
    art, poses, jp, post = truth_inputs(st, FPS)
    urdf = export.run(export.ExportConfig(), art, post, st.shapes, poses, out / "oracle")
    W = forecast.simulate_twin(urdf, art, poses.head(fit), at, steps, FPS, floor=forecast.default_floor(art, post), tip=tip,
                               jp=jp, shapes=st.shapes)
    res["oracle"] = _iou(silhouettes(rec_path, W, _ordered(art, poses, st.shapes)[1]), real)
    run = out / "run"
    try:
        fit_rec = write_first_frames(open_recording(rec_path), out / "rec_fit", fit, overwrite=True)
        run_pipeline(fit_rec, run, configs, stages=STAGES)
        art, poses = Articulation.load(run / Articulation.FILE), PoseTracks.load(run / PoseTracks.FILE)
        post, jp = Posterior.load(run / Posterior.FILE), JointPositions.load(run / JointPositions.FILE)
        library = open_recording(fit_rec).shapes
        Wt, shapes = _ordered(art, poses, library)
        W = forecast.simulate_twin(run / export.MODEL_FILE, art, poses, at, steps, FPS,
                                   floor=forecast.default_floor(art, post), tip=tip, jp=jp, shapes=library)
        res["pipeline"] = {**_iou(silhouettes(rec_path, W, shapes), real),
                           "joints": [f"{j.name}:{j.type}" for j in art.joints]}
        tracks = PoseTracks(Wt, list(art.bodies), [poses.shape_names[poses.body_names.index(b)] for b in art.bodies],
                            poses.residual, poses.fps)
        res["hold"] = _iou(np.repeat(silhouettes(rec_path, Wt[at:at + 1], shapes), steps, axis=0), real)
        res["constvel"] = _iou(silhouettes(rec_path, forecast.constant_velocity(tracks, at, steps), shapes), real)
        res["ratio"] = round(res["pipeline"]["iou_mean"] / max(res["oracle"]["iou_mean"], 1e-9), 4)
    except Exception as e:  # a failing stage is a result to report, not to hide
        log.warning("%s: pipeline failed: %s: %s", name, type(e).__name__, e)
        res["pipeline"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    res["seconds"] = round(time.time() - t0, 1)
    return res


def add_split_arguments(ap: argparse.ArgumentParser) -> None:
    """--seconds, --seed, --out and --set: the arguments every split-in-time benchmark takes."""
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds predicted after them, never seen")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="STAGE.KEY=VALUE",
                    help="override a setting as vid2sim run does (repeatable), e.g. --set identify.inference.method=csvgd")


def chosen(ap: argparse.ArgumentParser, text: str, known, what: str) -> list[str]:
    """The comma-separated names of ``text``; an unknown one stops the parser with the known list."""
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"unknown {what}(s) {unknown}; known: {', '.join(known)}")
    return names


def first_part_configs(sets: list[str]) -> dict:
    """Stage configs for a pipeline run on a copy that holds only the fitted frames: ``--set``
    overrides, no further hold-out (identify fits all of the copy, once), no overlay video."""
    overrides = parse_sets(sets)
    overrides.setdefault("forecast", {}).setdefault("holdout", 0.0)
    overrides.setdefault("track", {}).setdefault("overlay", False)
    return resolve_configs(overrides)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mechanisms", default=",".join(MECHANISMS))
    ap.add_argument("--fit-seconds", type=float, default=None,
                    help="seconds of the clip the pipeline sees (default 3, thrown 1.0: FIT_SECONDS)")
    ap.add_argument("--noise", default="none", choices=("none", "realistic"))
    add_split_arguments(ap)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    names = chosen(ap, args.mechanisms, MECHANISMS, "mechanism")
    configs = first_part_configs(args.set)
    steps = int(round(args.seconds * FPS))
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_twin_"))
    results = {}
    for name in names:
        print(f"bench_twin: {name} ...", file=sys.stderr)
        fit = int(round((args.fit_seconds or FIT_SECONDS.get(name, 3.0)) * FPS))
        results[name] = bench(name, out / name, fit, steps, args.noise, args.seed, configs)
        print(f"bench_twin: {name}: {json.dumps(results[name])}", file=sys.stderr)
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
