"""How observable the floor friction of a pushed mechanism is in its twin: a profile on the true tracks.

For each seed (``--seeds``) of a push case (``--case``), the generator's true poses over the first
``--frames`` frames (no tracking) and the true model (``bench_forecast.truth_inputs``: true tree,
masses, joint damping; the true tip) build the PyBullet twin that identify calibrates
(``identify_floor._PushTwin``, restarted from the tracked start). For each floor mu of ``--grid``
the rest is refitted (``identify_floor.refine_push`` with the floor mu held: the masses below the
anchored root, the joints' damping, the tip mu; from the truth and from one density), and the
twin's pose residual rms over the frames (m, ``forecast.pose_residual``) is reported: the loss
along mu with the rest refitted. Beside it: the rms at the truth itself, and the floor mu range
whose rms is within ``--tolerance`` (relative) of the profile's best, i.e. what the frames cannot
tell apart from the best once tracking noise or model error of that size is present.

``--tracks`` adds the tracking error of a run's tracked poses of the same frames (``tracking_rms``);
``--on-tracks`` profiles a run's own model and tracks instead of the truth (``track_profile``).
``observability`` (bench_push's ``friction_profile_mm_20pct``) is the profile at the truth x 0.8, 1, 1.2
beside the tracking error.

The last stdout line is one JSON object ``{"seed S": {"profile": [[mu, rms_mm, tip_mu], ...],
"truth_rms_mm", "best_mu", "within_tolerance": [lo, hi], "truth_mu", "seconds"}}`` (``--on-tracks``:
``{"profile", "best_mu", "seconds"}``); progress on stderr.

    python scripts/bench_push_observe.py [--case pushed] [--seeds 0,1,2] [--frames 90]
        [--grid 0.1,0.2,0.3,0.4,0.5,0.6,0.8,1.0,1.5] [--tolerance 0.1] [--tracks DIR/{case}/run/poses.npz]
        [--on-tracks DIR/{case}]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from vid2sim.datasets.synthetic import recording_shapes, simulate  # noqa: E402
from vid2sim.models.bullet import Tip  # noqa: E402
from vid2sim.pipeline import identify_floor  # noqa: E402
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks, Posterior  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_forecast import truth_inputs  # noqa: E402

FPS = 30.0
log = logging.getLogger("bench_push_observe")


def true_posterior(post: Posterior, st) -> Posterior:
    """The truth's posterior with the tip mu and search limits a fit would have: masses within 10x of
    the truth, damping within 1e-5 .. 1 N m s."""
    est = dict(post.estimate, **{"tip.friction": float(st.truth["tip"]["friction"])})
    names = [n for n in est if n.endswith((".mass", ".damping"))] + ["floor.friction", "tip.friction"]
    limits = {n: ((est[n] / 10, est[n] * 10) if n.endswith(".mass") else (1e-5, 1.0)) for n in names}
    limits.update({"floor.friction": (0.05, 1.5), "tip.friction": (0.05, 1.5)})
    X = np.array([[est[n] for n in names]])
    return Posterior(names, limits, est, X, "truth", 0.0, {})


def profile(case: str, seed: int, frames: int, grid: list[float], tolerance: float) -> dict:
    t0 = time.time()
    st = simulate(case, seed=seed, frames=frames, fps=FPS)
    art, poses, jp, post = truth_inputs(st, FPS)
    post = true_posterior(post, st)
    shapes = recording_shapes(st)
    tip = Tip.from_truth(st)
    roots = {j.child for j in art.joints if j.parent == "world"}
    masses = [n for n in post.names if n.endswith(".mass") and n[:-len(".mass")] in set(art.bodies) - roots]
    truth_mu, truth_tip = float(post.estimate["floor.friction"]), float(post.estimate["tip.friction"])
    pt = identify_floor._PushTwin(art, jp, poses, shapes, FPS, post, tip)
    try:
        truth_rms = float(np.sqrt(np.mean(pt.residual(truth_mu, truth_tip) ** 2)))
        rows = []
        for mu in grid:
            start = {"friction": mu, "tip_friction": truth_tip, "rms": np.inf}
            fit = identify_floor.refine_push(pt, art, poses, shapes, post, masses, start, floor=mu)
            rows.append([mu, round(1e3 * fit["rms"], 4), fit["tip_friction"]])
            log.info("seed %d: floor mu %.2f: rms %.3f mm (tip %.3f)", seed, mu, 1e3 * fit["rms"], fit["tip_friction"])
    finally:
        pt.close()
    best = min(r[1] for r in rows)
    near = [r[0] for r in rows if r[1] <= (1 + tolerance) * best]
    return {"profile": rows, "truth_rms_mm": round(1e3 * truth_rms, 4), "truth_mu": truth_mu,
            "best_mu": min(rows, key=lambda r: r[1])[0], "within_tolerance": [min(near), max(near)],
            "seconds": round(time.time() - t0, 1)}


def track_profile(case_dir: Path, grid: list[float]) -> dict:
    """The profile of ``profile`` on a pipeline run's own tracks and model: ``case_dir`` is bench_push's
    ``--out DIR/CASE`` (``run/``: articulation, poses, joint positions, params; ``rec_fit/``: the recording
    of the fitted frames and its pusher). The PyBullet twin of the run's estimate with its tip (the
    twin's tip mu, ``identify_push.twin_friction``), floor mu held at each grid point, the rest refitted
    (``identify_floor.refine_push``). -> {"profile": [[mu, rms_mm, tip_mu], ...], "best_mu", "seconds"}."""
    from vid2sim.datasets.recording import open_recording
    from vid2sim.pipeline.identify_push import pusher_of, twin_friction

    t0 = time.time()
    run = Path(case_dir) / "run"
    art, poses = Articulation.load(run / Articulation.FILE), PoseTracks.load(run / PoseTracks.FILE)
    jp, post = JointPositions.load(run / JointPositions.FILE), Posterior.load(run / Posterior.FILE)
    rec = open_recording(Path(case_dir) / "rec_fit")
    a, shape = pusher_of(rec)
    mu_tip = float(twin_friction(post)["tip.friction"])
    post = replace(post, estimate=dict(post.estimate, **{"tip.friction": mu_tip}))
    tip = Tip(float(shape.radius), float(shape.length), rec.actuation.world_from_actuator[:, a, :3, 3].copy(), mu_tip)
    roots = {j.child for j in art.joints if j.parent == "world"}
    masses = [n for n in post.names if n.endswith(".mass") and n[:-len(".mass")] in set(art.bodies) - roots]
    pt = identify_floor._PushTwin(art, jp, poses, rec.shapes, FPS, post, tip)
    rows = []
    try:
        for mu in grid:
            start = {"friction": mu, "tip_friction": mu_tip, "rms": np.inf}
            fit = identify_floor.refine_push(pt, art, poses, rec.shapes, post, masses, start, floor=mu)
            rows.append([mu, round(1e3 * fit["rms"], 4), fit["tip_friction"]])
            log.info("tracks: floor mu %.2f: rms %.3f mm (tip %.3f)", mu, 1e3 * fit["rms"], fit["tip_friction"])
    finally:
        pt.close()
    return {"profile": rows, "best_mu": min(rows, key=lambda r: r[1])[0], "seconds": round(time.time() - t0, 1)}


def tracking_rms(W_track: np.ndarray, W_true: np.ndarray, kinds: list[str]) -> float:
    """rms (m) of ``forecast.pose_residual`` between tracked poses W_track (T, M, 4, 4) and true poses
    W_true (T, M', 4, 4) over the T frames: each tracked body is matched to the true body nearest it at
    frame 0 and compared in its own frame, the constant offset between the two body frames (the mean of
    inv(W_true) W_track over the frames: translation mean, rotation chordal mean) taken out, so that only
    what changes over the frames counts. ``kinds`` (M,): the tracked bodies' shape types (what of a rotation
    the shape shows, as ``pose_residual``)."""
    from scipy.spatial.transform import Rotation

    from vid2sim.pipeline import forecast

    d = np.linalg.norm(W_track[0, :, None, :3, 3] - W_true[0, None, :, :3, 3], axis=-1)
    true = W_true[:, d.argmin(1)]   # (T, M, 4, 4) in the tracked order
    rel = np.linalg.inv(true) @ W_track
    true = true.copy()
    for m in range(rel.shape[1]):
        C = np.eye(4)
        C[:3, :3] = Rotation.from_matrix(rel[:, m, :3, :3]).mean().as_matrix()
        C[:3, 3] = rel[:, m, :3, 3].mean(0)
        true[:, m] = true[:, m] @ C
    r = forecast.pose_residual(true, W_track, kinds)
    return float(np.sqrt(np.mean(r * r)))


def cost_of_error(rows: list, truth_mu: float) -> dict:
    """From profile rows [[floor mu, rms (mm), tip mu], ...] holding truth_mu and mu off it: for each other
    mu, the rms (mm) its refitted twin adds in quadrature to the twin's at the truth, sqrt(max(rms^2 -
    rms_truth^2, 0)) (0: that wrong mu follows the true poses as well as the truth does), keyed by the
    relative error rounded to a percent ("-20%", "+20%")."""
    at = {round(float(mu), 6): float(r) for mu, r, _ in rows}
    r0 = at[round(float(truth_mu), 6)]
    return {f"{100 * (mu - truth_mu) / truth_mu:+.0f}%": round(float(np.sqrt(max(r * r - r0 * r0, 0.0))), 4)
            for mu, r in at.items() if abs(mu - truth_mu) > 1e-9}


def observability(case: str, seed: int, frames: int, W_track: np.ndarray | None = None, kinds: list[str] | None = None,
                  off: float = 0.2) -> dict:
    """How much a floor mu ``off`` (relative) from the truth costs the refitted twin on the true poses of the
    first ``frames`` frames (``profile`` at the truth x (1 - off, 1, 1 + off); ``cost_of_error``), beside what
    tracking errs by on the same frames (``tracking_rms`` of ``W_track`` (T, M, 4, 4), the tracked poses, with
    ``kinds``, where given): {"profile": rows, "truth_mu", "cost_mm" {"-20%", "+20%"}, "tracking_rms_mm",
    "observable": the cheaper of the two errors costs more than the tracking rms} ("observable" null
    without tracks)."""
    st = simulate(case, seed=seed, frames=frames, fps=FPS)
    mu = float(st.truth["params"]["floor.friction"])
    prof = profile(case, seed, frames, [round(mu * (1 - off), 6), mu, round(mu * (1 + off), 6)], 0.1)
    cost = cost_of_error(prof["profile"], mu)
    out = {"profile": prof["profile"], "truth_mu": mu, "cost_mm": cost, "tracking_rms_mm": None, "observable": None,
           "seconds": prof["seconds"]}
    if W_track is not None:
        T = min(len(W_track), frames)
        out["tracking_rms_mm"] = round(1e3 * tracking_rms(W_track[:T], st.world_from_body[:T], kinds), 4)
        out["observable"] = bool(min(cost.values()) > out["tracking_rms_mm"])
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="pushed", help="the push case (datasets.synthetic)")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated generator seeds")
    ap.add_argument("--frames", type=int, default=90, help="frames of the clip (the fitted ones)")
    ap.add_argument("--grid", default="0.1,0.2,0.3,0.4,0.5,0.6,0.8,1.0,1.5", help="floor mu held in turn")
    ap.add_argument("--tolerance", type=float, default=0.1, help="relative rms above the best that counts as as good")
    ap.add_argument("--on-tracks", default=None, help="bench_push's --out DIR/CASE of a run ({seed}, {case} filled in): "
                    "the profile on its own tracks and model instead of the truth's")
    ap.add_argument("--tracks", default=None, help="tracked poses of the same clip (bench_push's DIR/CASE/run/poses.npz; "
                    "{seed} and {case} filled in): adds their tracking_rms_mm against the truth")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    grid = [float(g) for g in args.grid.split(",")]
    out = {}
    for s in (int(x) for x in args.seeds.split(",")):
        if args.on_tracks:
            out[f"seed {s}"] = track_profile(Path(args.on_tracks.format(seed=s, case=args.case)), grid)
            continue
        out[f"seed {s}"] = profile(args.case, s, args.frames, grid, args.tolerance)
        if args.tracks:   # the same frames as tracked: how far tracking is off the truth
            poses = PoseTracks.load(Path(args.tracks.format(seed=s, case=args.case)))
            st = simulate(args.case, seed=s, frames=args.frames, fps=FPS)
            kinds = [recording_shapes(st)[n].type for n in poses.shape_names]
            T = min(poses.num_frames, args.frames)
            out[f"seed {s}"]["tracking_rms_mm"] = round(1e3 * tracking_rms(poses.world_from_body[:T],
                                                                            st.world_from_body[:T], kinds), 4)
        print(f"bench_push_observe: seed {s}: {json.dumps(out[f'seed {s}'])}", file=sys.stderr)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
