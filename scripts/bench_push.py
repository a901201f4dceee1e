"""Push benchmark, held out in time: parts pushed across a floor by a robot's known tip.

Cases (``--cases``): the three-link ``pushed`` linkage, a single pushed box
(``pushed_box``; ``pushed_box_strokes``: pushed in strokes, sliding on alone after each;
``pushed_strokes``, the linkage so, only when named), an upright puck (``pushed_cylinder``) and a pendulum whose hinge to the world
is driven by a known torque (``driven_pendulum``: ``joint_effort`` in ``actuation.npz``, no pusher). For each: a recording of
``--fit-seconds`` + ``--seconds`` (default 3 s + 2 s) with the tip in ``actuation.npz``;
the pipeline (segment ... export) runs on a copy holding only the first ``fit`` frames
(``write_first_frames``, which keeps every actuation row: the robot's planned motion);
identify fits all of them. Its twin (``model.urdf`` + ``contacts.json``) is restarted in
PyBullet from the state estimated over its last tracked frames and simulated over the
unseen frames with the tip replayed from ``actuation.npz`` at the identified tip friction.

Reported per case, against the truth of the unseen frames:
- ``pos_err_1s_m``, ``pos_err_2s_m``: mean over bodies of the centre distance after 1 s / 2 s;
- ``rot_err_1s_deg``, ``rot_err_2s_deg``: mean over bodies of the angle between predicted and
  true rotation change since the last fitted frame, modulo the rotations a body's shape cannot
  show (a cylinder's or capsule's spin about its own axis and its end-for-end flip; a sphere's
  every rotation: ``rotation_error_deg``); ``rot_err_raw_*``: the same angle without that;
- ``iou``: silhouette IoU with the true body masks, mean over the unseen frames (the pixels
  where the tip is in front are left out of the prediction: the masks do not show them);
- ``friction_rel_err``: |identified - true| / true of ``floor.friction`` and ``tip.friction`` of the
  twin (``identify_push.twin_friction``: calibrated in PyBullet, as contacts.json holds them);
  ``friction_fit_rel_err``: the same of identify's penalty-model fit (params.json's estimate;
  ``friction_particles_5_95``: its posterior particles' 5-95 % range of each);
  ``twin_calibration``: the PyBullet search of the twin's floor and tip friction (``identify_floor.calibrate_push``,
  with its floor profile);
  ``floor_release``: identify's floor friction from the slides after the tip stopped, where there are any
  (``identify_push.release_profile``);
  (``driven_pendulum``: ``params_rel_err`` of the mass and the hinge damping, absolute: the
  known torque fixes the scale);
- ``friction_profile_mm_20pct`` {"-20%", "+20%"}: whether a floor-friction error of 20 % is measurable
  on these frames at all: the pose rms (mm) that the PyBullet twin of the true model, its floor mu held
  20 % below or above the truth and its masses, joint damping and tip mu refitted, adds (in quadrature)
  to the same refit at the true mu, on the true poses of the fitted frames; ``friction_observability``
  holds the profile, the tracking error of the same frames (``tracking_rms_mm``: the tracked poses against
  the truth, each body's constant frame offset taken out) and ``observable`` (the cheaper 20 % error costs
  more than that tracking rms) (``bench_push_observe.observability``; ``--no-observability`` skips it);
beside, in the same run: ``oracle_*`` (the true URDF, floor, tip and effort restarted from the
true poses) and ``baseline_*`` (the pipeline's twin without the pusher and without the effort);
with a known effort also ``no_effort_fit_*``: the same tracks identified without the effort
(mass anchored by density, as without actuation.npz) and forecast without it.

The last stdout line is one JSON object ``{case: {"iou", "oracle_iou", "baseline_iou",
"pos_err_1s_m", "rot_err_1s_deg", ..., "friction", "friction_rel_err", "joints", "seconds"}}``;
progress goes to stderr.

    python scripts/bench_push.py [--cases pushed,pushed_box,pushed_cylinder] [--fit-seconds 3]
        [--seconds 2] [--seed 0] [--out DIR] [--tracks truth] [--set identify.inference.push_iterations=15 ...]

``--tracks truth`` runs articulate, identify and export on the true poses of the seen frames
instead of segment's and track's (what the stages after track make of error-free tracks);
``--tracks-from DIR`` on the tracks of an earlier run (``--out DIR``) of the same cases, seed and split.
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

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from vid2sim.datasets.recording import open_recording, write_first_frames  # noqa: E402
from vid2sim.datasets.synthetic import TIP_ID, make_recording, recording_shapes, simulate, true_masks  # noqa: E402
from vid2sim.pipeline import export, forecast, identify  # noqa: E402
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks, Posterior  # noqa: E402
from vid2sim.pipeline.identify_effort import forecast_effort  # noqa: E402
from vid2sim.pipeline.identify_push import forecast_tip, twin_friction  # noqa: E402
from vid2sim.pipeline.run import run_pipeline  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_forecast import truth_inputs  # noqa: E402
from bench_push_observe import observability  # noqa: E402
from bench_twin import add_split_arguments, chosen, first_part_configs, silhouettes  # noqa: E402

log = logging.getLogger("bench_push")
FPS = 30.0
CASES = ("pushed", "pushed_box", "pushed_box_strokes", "pushed_cylinder", "driven_pendulum")
OTHER_CASES = ("pushed_strokes",)   # by name only: even the true model restarted mid-clip misses its strikes (IoU 0.73)
STAGES = ["segment", "track", "articulate", "identify", "export"]


def _ordered(art: Articulation, poses: PoseTracks, shapes: dict) -> tuple[np.ndarray, list]:
    idx = [poses.body_names.index(b) for b in art.bodies]
    return poses.world_from_body[:, idx], [shapes[poses.shape_names[i]] for i in idx]


def _match(W_at: np.ndarray, true_at: np.ndarray) -> list[int]:
    """For each body at poses W_at (M, 4, 4), the truth body (index) nearest at the same frame."""
    d = np.linalg.norm(W_at[:, None, :3, 3] - true_at[None, :, :3, 3], axis=-1)
    return [int(i) for i in d.argmin(1)]


def symmetry_axis(shape) -> np.ndarray | None:
    """The body-frame unit axis about which ``shape`` looks the same at every angle (cylinder,
    capsule: body z), zeros (3,) for a sphere (every rotation looks the same), else None."""
    if shape is None or shape.type not in ("cylinder", "capsule", "sphere"):
        return None
    return np.zeros(3) if shape.type == "sphere" else np.array([0.0, 0.0, 1.0])


def rotation_error_deg(dR_pred: np.ndarray, dR_true: np.ndarray, axis: np.ndarray | None = None) -> float:
    """Angle (deg) between the rotation changes dR_pred and dR_true (3, 3). With ``axis`` (3,)
    (world frame, at the start of the changes): the angle modulo the rotations the shape cannot
    show, spin about that symmetry axis and its end-for-end flip: the angle between dR_pred axis
    and dR_true axis, folded to at most 90 deg; a zero axis (a sphere) shows no rotation: 0."""
    if axis is None:
        c = (np.trace(dR_pred @ dR_true.T) - 1) / 2
        return float(np.degrees(np.arccos(np.clip(c, -1, 1))))
    n = np.linalg.norm(axis)
    if n < 1e-12:
        return 0.0
    a, b = dR_pred @ (axis / n), dR_true @ (axis / n)
    return float(np.degrees(np.arccos(np.clip(abs(a @ b), 0.0, 1.0))))


def pose_errors(W: np.ndarray, true: np.ndarray, W_at: np.ndarray, true_at: np.ndarray, k: int,
                true_shapes: list | None = None) -> tuple[float, float, float]:
    """Mean over bodies at step k of the centre distance (m), the rotation-change angle modulo each
    true body's shape symmetry (deg; ``rotation_error_deg`` with the axis of ``true_shapes``, in the
    truth's order) and the raw rotation-change angle (deg).
    W (N, M, 4, 4) predicted from the last fitted frame (poses W_at (M, 4, 4)); true (N, M', 4, 4)."""
    match = _match(W_at, true_at)
    pos, rot, raw = [], [], []
    for m, t in enumerate(match):
        pos.append(np.linalg.norm(W[k, m, :3, 3] - true[k, t, :3, 3]))
        dR_pred = W[k, m, :3, :3] @ W_at[m, :3, :3].T
        dR_true = true[k, t, :3, :3] @ true_at[t, :3, :3].T
        axis = symmetry_axis(true_shapes[t]) if true_shapes is not None else None
        raw.append(rotation_error_deg(dR_pred, dR_true))
        rot.append(rotation_error_deg(dR_pred, dR_true, None if axis is None else true_at[t, :3, :3] @ axis))
    return float(np.mean(pos)), float(np.mean(rot)), float(np.mean(raw))


def tip_masks(rec_path: Path, frames: range) -> np.ndarray:
    """(N, H, W) bool pixels where the recording shows the pusher tip (truth_masks ``TIP_ID``)."""
    return np.stack([cv2.imread(str(rec_path / "truth_masks" / f"{i:06d}.png"), cv2.IMREAD_UNCHANGED) == TIP_ID
                     for i in frames])


def _scores(prefix: str, W: np.ndarray, shapes: list, true: np.ndarray, W_at, true_at, rec_path: Path,
            real: np.ndarray, tip: np.ndarray, true_shapes: list) -> dict:
    iou = forecast.mask_iou(silhouettes(rec_path, W, shapes) & ~tip, real)   # the tip hides what it covers
    out = {f"{prefix}iou": round(float(iou.mean()), 4)}
    for s in (1, 2):
        k = int(round(s * FPS)) - 1
        if k < len(W):
            p, r, raw = pose_errors(W, true, W_at, true_at, k, true_shapes)
            out[f"{prefix}pos_err_{s}s_m"], out[f"{prefix}rot_err_{s}s_deg"] = round(p, 5), round(r, 3)
            out[f"{prefix}rot_err_raw_{s}s_deg"] = round(raw, 3)
    return out


def _parameter_errors(st, post: Posterior) -> dict:
    """Identified against true: floor and tip friction with a pusher, else (a known effort) every mass and
    joint damping of the truth that the posterior names."""
    p = st.truth["params"]
    if st.tip_position is not None:
        truth, key = {"floor.friction": p["floor.friction"], "tip.friction": st.truth["tip"]["friction"]}, "friction"
    else:
        truth, key = {k: v for k, v in p.items() if k.endswith((".mass", ".damping")) and k in post.estimate}, "params"
    est = {k: post.estimate.get(k) for k in truth}
    if st.tip_position is not None:   # the twin's coefficients (calibrated in PyBullet where identify did)
        twin, fit = twin_friction(post), est
        est = {k: twin[k] for k in truth}
    X = np.asarray(post.particles, float)
    spread = {k: np.percentile(X[:, post.names.index(k)], [5, 95]).round(4).tolist() for k in truth
              if k in post.names and X.ndim == 2 and len(X) > 1}
    out = {key: {k: [None if est[k] is None else round(float(est[k]), 4), v] for k, v in truth.items()},
           f"{key}_rel_err": {k: None if est[k] is None else round(abs(est[k] - v) / v, 4) for k, v in truth.items()},
           f"{key}_particles_5_95": spread}
    if st.tip_position is not None:
        out["friction_fit_rel_err"] = {k: None if fit[k] is None else round(abs(fit[k] - v) / v, 4)
                                       for k, v in truth.items()}
    return out


def bench(name: str, out: Path, fit: int, steps: int, seed: int, configs: dict, tracks: str = "pipeline",
          observe: bool = True) -> dict:
    t0 = time.time()
    frames = fit + steps
    rec_path = make_recording(name, out / "rec", seed=seed, frames=frames, fps=FPS, overwrite=True)
    st = simulate(name, seed=seed, frames=frames, fps=FPS)
    at = fit - 1
    real, tip_px = true_masks(rec_path, range(fit, frames)), tip_masks(rec_path, range(fit, frames))
    true = st.world_from_body[fit:]
    res: dict = {}
    # oracle: the true model, floor and tip (true friction) restarted from the true poses
    art, poses, jp, post = truth_inputs(st, FPS)
    shapes = recording_shapes(st)
    true_shapes = [shapes[n] for n in poses.shape_names]   # in the truth's body order (st.world_from_body)
    urdf = export.run(export.ExportConfig(), art, post, shapes, poses, out / "oracle")
    effort = forecast.Effort(st.effort_joints, st.joint_effort) if st.joint_effort is not None else None
    W = forecast.simulate_twin(urdf, art, poses.head(fit), at, steps, FPS, floor=forecast.default_floor(art, post),
                               tip=forecast.Tip.from_truth(st), jp=jp, shapes=shapes, effort=effort)
    Wo, so = _ordered(art, poses, shapes)
    res.update(_scores("oracle_", W, so, true, Wo[at], st.world_from_body[at], rec_path, real, tip_px, true_shapes))
    run = out / "run"
    try:
        fit_rec = write_first_frames(open_recording(rec_path), out / "rec_fit", fit, overwrite=True)
        if tracks == "truth":   # the stages after track on the true poses of the seen frames
            run.mkdir(parents=True, exist_ok=True)
            PoseTracks.from_truth(st.truth, st.world_from_body[:fit], FPS).save(run / PoseTracks.FILE)
        elif tracks != "pipeline":   # an earlier run's tracks of the same case, seed and split (--tracks-from)
            run.mkdir(parents=True, exist_ok=True)
            PoseTracks.load(Path(tracks) / name / "run" / PoseTracks.FILE).save(run / PoseTracks.FILE)
        run_pipeline(fit_rec, run, configs, stages=STAGES if tracks == "pipeline" else STAGES[2:])
        art, poses = Articulation.load(run / Articulation.FILE), PoseTracks.load(run / PoseTracks.FILE)
        post, jp = Posterior.load(run / Posterior.FILE), JointPositions.load(run / JointPositions.FILE)
        rec = open_recording(fit_rec)
        Wt, body_shapes = _ordered(art, poses, rec.shapes)
        floor = forecast.default_floor(art, post)
        for prefix, tip, eff in (("", forecast_tip(rec, post), forecast_effort(rec, art, post)), ("baseline_", None, None)):
            W = forecast.simulate_twin(run / export.MODEL_FILE, art, poses, at, steps, FPS, floor=floor, tip=tip,
                                       jp=jp, shapes=rec.shapes, effort=eff)
            res.update(_scores(prefix, W, body_shapes, true, Wt[at], st.world_from_body[at], rec_path, real, tip_px,
                               true_shapes))
        res.update(_parameter_errors(st, post))
        rel = (post.extra or {}).get("floor_release")
        if rel is not None:   # the floor friction pinned by the slides after the tip stopped (if it did)
            res["floor_release"] = {k: v for k, v in rel.items() if k != "profile"}
        cal = (post.extra or {}).get("floor_bullet")
        if cal is not None and "tip_friction" in cal:   # the twin's friction searched in PyBullet (calibrate_push)
            res["twin_calibration"] = cal
        if st.joint_effort is not None:   # the same tracks identified without the effort, forecast without it
            post0 = identify.run(configs["identify"], art, jp, poses, rec.shapes, out / "no_effort", rec=None)
            urdf0 = export.run(export.ExportConfig(), art, post0, rec.shapes, poses, out / "no_effort")
            W = forecast.simulate_twin(urdf0, art, poses, at, steps, FPS, floor=floor, jp=jp, shapes=rec.shapes)
            res.update(_scores("no_effort_fit_", W, body_shapes, true, Wt[at], st.world_from_body[at], rec_path, real,
                               tip_px, true_shapes))
            res["no_effort_fit_params"] = _parameter_errors(st, post0)["params"]
        if observe and st.tip_position is not None:   # is the floor mu's error measurable on these frames at all?
            kinds = [rec.shapes[n].type for n in poses.shape_names]
            obs = observability(name, seed, fit, poses.world_from_body[:fit], kinds)
            res["friction_profile_mm_20pct"] = obs["cost_mm"]
            res["friction_observability"] = obs
        res["joints"] = [f"{j.name}:{j.type}" for j in art.joints]
        res["side_file"] = (run / "contacts.json").exists()
    except Exception as e:  # a failing stage is a result to report, not to hide
        log.warning("%s: pipeline failed: %s: %s", name, type(e).__name__, e)
        res["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    res["seconds"] = round(time.time() - t0, 1)
    return res


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"also: {', '.join(OTHER_CASES)}")
    ap.add_argument("--fit-seconds", type=float, default=3.0, help="seconds of the clip the pipeline sees")
    ap.add_argument("--tracks", choices=("pipeline", "truth"), default="pipeline",
                    help="truth: articulate, identify and export run on the true poses of the seen frames (no segment, track)")
    ap.add_argument("--tracks-from", default=None, help="an earlier --out DIR of the same cases, seed and split: its "
                    "tracks (DIR/CASE/run/poses.npz) are reused, articulate on run again (no segment, track)")
    ap.add_argument("--no-observability", action="store_true", help="skip the floor mu profile at the truth +-20 %% "
                    "(friction_profile_mm_20pct, friction_observability: 3 PyBullet refits on the true poses)")
    add_split_arguments(ap)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    names = chosen(ap, args.cases, CASES + OTHER_CASES, "case")
    configs = first_part_configs(args.set)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_push_"))
    fit, steps = int(round(args.fit_seconds * FPS)), int(round(args.seconds * FPS))
    results = {}
    for name in names:
        print(f"bench_push: {name} ...", file=sys.stderr)
        results[name] = bench(name, out / name, fit, steps, args.seed, configs, args.tracks_from or args.tracks,
                              not args.no_observability)
        print(f"bench_push: {name}: {json.dumps(results[name])}", file=sys.stderr)
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
