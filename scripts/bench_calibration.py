"""Calibration of identify's posterior: how often do its credible intervals hold the truth?

For each mechanism (cartpole, double pendulum) and recording seed, true parameters are
drawn at random: each body's density uniform in ``DENSITY`` (kg/m^3) x its shape's
volume, each joint's damping = the anchor body's true mass x a rate uniform in
``DAMPING_RATE`` (per joint type). The synthetic clip (PyBullet, ``datasets.synthetic``,
the seed also draws the initial state) gives the true joint trajectories, to which white
Gaussian track noise is added (``TRACK_NOISE``: per joint type, the tracker's noise on
bench_forecast's realistic cartpole, identify.track_noise's docstring; none at frame 0,
whose pose the model's geometry is built from). Identify then runs
as the pipeline does on those tracks (truth articulation and shapes, noise std estimated
from the tracks, ``identify.inference.method=csvgd`` unless ``--method``), but at the generator's
simulation rate (960 Hz: ``identify.shooting.substeps=32`` at 30 fps; ``--set shooting.substeps=0`` for
identify's default 480 Hz, whose integration differs from PyBullet's by 2-6x the track
noise on these clips): this isolates the posterior's calibration from segment, track,
articulate and the integrator, and white noise is kinder than a tracker's (temporally
correlated) errors.

Scored, for every identifiable quantity (``pipeline/identifiability.py``: mass ratios to
the anchor body, damping per anchor mass): whether the truth lies inside the posterior's
equal-tailed 50 % and 90 % intervals (``identifiable.quantities``). Baseline in the same
run: the bare particles' intervals, the same with stragglers left out, and the Laplace
approximation at the best particle (Gauss-Newton covariance of the
whitened single-shooting residuals over parameters and start state, by finite
differences; normal intervals, delta method for nothing since the anchor is fixed), which
says whether the likelihood (its noise model) or the particles' spread is off. Each result
keeps its raw fit (particles, metrics, log-likelihoods, Laplace covariance), from which
``rescore`` reads other interval rules without fitting again (``"rules"`` in the last line:
the particles' kernel density, the Laplace mixture without the noise check, the Laplace
approximation at the best particle).

    python scripts/bench_calibration.py --seeds 0-19 --jobs 2 [--frames 45] [--mechanisms cartpole,double_pendulum]
        [--set shooting.substeps=32] [--jsonl results.jsonl]
    python scripts/bench_calibration.py --prepare recs --seeds 0-19    # simulate only (PyBullet) ...
    python scripts/bench_calibration.py --recordings recs --seeds 0-19 --jobs 16   # ... fit elsewhere (no PyBullet)
    python scripts/bench_calibration.py --merge a.json b.jsonl --out all.json   # runs of other seeds, same settings

Last stdout line: {"cartpole": {"coverage50", "coverage90", "laplace50", "laplace90",
"bare_particles50", ..., "screened_particles90", ..., "rules": {"kde50", ...}},
"double_pendulum": {...}}. Targets: coverage90 in [0.80, 0.98], coverage50 in [0.35, 0.65].
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np

log = logging.getLogger("bench_calibration")
DENSITY = (150.0, 1500.0)                                         # kg/m^3
DAMPING_RATE = {"prismatic": (0.05, 0.5), "revolute": (0.0005, 0.01)}   # damping / anchor mass
TRACK_NOISE = {"prismatic": 0.0006, "revolute": 0.0026}          # m, rad
GENERATOR_HZ = 960.0                                              # datasets/synthetic/physics.py SIM_HZ
Z = {50: 0.6744897501960817, 90: 1.6448536269514722}              # normal quantiles of the central intervals


def seeds_of(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def draw_truth(mech, rng: np.random.Generator, anchor_body: str) -> dict[str, float]:
    """Random true masses (density x volume) and damping (anchor mass x rate) of ``mech``."""
    params = {f"{b.name}.mass": float(b.shape.volume() * rng.uniform(*DENSITY)) for b in mech.bodies}
    m_anchor = params[f"{anchor_body}.mass"]
    for j in mech.joints:
        if j.type in DAMPING_RATE:
            params[f"{j.name}.damping"] = float(m_anchor * rng.uniform(*DAMPING_RATE[j.type]))
    return params


def laplace_intervals(prob, res, sim, h: float = 1e-6) -> tuple[dict[str, dict[int, list[float]]], np.ndarray]:
    """Normal intervals of each parameter from the Gauss-Newton covariance at the best particle, in
    the scale of the anchor (identify.anchored: the covariance through to_anchor's Jacobian), and that
    covariance (P, P) before the rescaling (physical, every mass free)."""
    from vid2sim.pipeline.identifiability import anchor_jacobian, to_anchor

    import torch

    from vid2sim.models.inference import Shooting

    sh = Shooting(prob, 1)
    P = prob.num_params
    b = res.best
    z0 = torch.cat([prob.to_unit(res.theta[b]), (res.start[b, 0] / prob.state_scale)])
    D = z0.numel()
    Zs = z0[None].repeat(D + 1, 1)
    Zs[1:] += torch.eye(D, dtype=z0.dtype) * h
    with torch.no_grad():
        r = sh.residuals(prob.to_physical(Zs[:, :P]), (Zs[:, P:] * prob.state_scale)[:, None]).reshape(D + 1, -1)
    J = ((r[1:] - r[:1]) / h).numpy()
    span = (prob.upper - prob.lower).numpy()
    cov = np.linalg.pinv(J @ J.T)[:P, :P] * np.outer(span, span)      # physical, every mass free
    free = cov.copy()
    names, theta = list(prob.names), res.theta[b].numpy()
    A = anchor_jacobian(theta, names, sim.anchor)
    cov, theta = A @ cov @ A.T, to_anchor(theta, names, sim.anchor)
    out = {}
    for i, n in enumerate(names):
        sd, est = math.sqrt(max(cov[i, i], 0.0)), float(theta[i])
        out[n] = {p: [est - z * sd, est + z * sd] for p, z in Z.items()}
    return out, free


def prepare(job: dict) -> dict:
    """The recording of one job, from the generator (PyBullet): the true parameters and trajectories,
    the noisy joint positions identify sees, and what the fit needs of the mechanism (picklable, so
    that ``--prepare`` can write it for a machine without PyBullet)."""
    from vid2sim.datasets.synthetic import mechanism, simulate
    from vid2sim.pipeline.identifiability import scale_anchor

    name, seed, frames, fps = job["mechanism"], job["seed"], job["frames"], job["fps"]
    mech = mechanism(name)
    types = {j.child: j.type for j in mech.joints}
    vols = {b.name: float(b.shape.volume()) for b in mech.bodies}
    anchor = scale_anchor({}, [b.name for b in mech.bodies], [types.get(b.name, "fixed") for b in mech.bodies],
                          vols, 500.0)["body"]
    rng = np.random.default_rng(10_000 + seed)
    truth = draw_truth(mech, rng, anchor)
    s = simulate(name, seed=seed, frames=frames, fps=fps, params=truth)
    jtype = {j["name"]: j["type"] for j in s.truth["joints"]}
    sig = np.array([TRACK_NOISE[jtype[n]] for n in s.joint_names])
    noise = rng.standard_normal(np.shape(s.q)) * sig
    noise[0] = 0.0   # frame 0 defines the model's geometry (joint_trajectory's q = 0): no error simulated there
    return {"mechanism": name, "seed": seed, "fps": fps, "truth": truth, "truth_tracks": s.truth,
            "world_from_body": s.world_from_body, "shapes": s.shapes, "joint_names": list(s.joint_names),
            "q": np.asarray(s.q, float) + noise}


def fit(job: dict, rec: dict) -> tuple:
    """Identify on ``rec``'s noisy joint positions as the pipeline does (truth articulation and
    shapes) -> (problem, inference result, anchored posterior, simulator, seconds)."""
    from vid2sim.models.inference import infer
    from vid2sim.pipeline import identify
    from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks
    from vid2sim.pipeline.config import config_from_json

    fps, tr = rec["fps"], rec["truth_tracks"]
    art, poses = Articulation.from_truth(tr), PoseTracks.from_truth(tr, rec["world_from_body"], fps)
    jp = JointPositions(rec["q"], rec["joint_names"])
    cfg = config_from_json(identify.IdentifyConfig, job["identify"], "bench_calibration")
    t0 = time.perf_counter()
    sim = identify.build_simulator(cfg, art, poses, rec["shapes"], fps)
    prob = identify.make_problem(cfg, sim, identify.joint_trajectory(jp, sim.dof_names, cfg.frames), fps)
    res = infer(cfg.inference.method, prob, particles=cfg.inference.particles, iterations=cfg.inference.iterations,
                seed=cfg.seed, **identify.method_options(cfg, cfg.inference.method, prob, fps))
    post = identify.fitted_posterior(cfg, sim, prob, res, {})
    post = identify.with_identifiability(cfg, post, sim.anchor)
    return prob, res, post, sim, time.perf_counter() - t0


def one(job: dict) -> dict:
    """Simulate (or load ``job["recording"]``), identify and score one recording (runs in a worker
    process). The result keeps the raw fit (``"fit"``) so that ``--rescore`` can compare interval rules
    without fitting again."""
    import pickle

    import torch

    from vid2sim.pipeline.identifiability import summarise

    torch.set_num_threads(1)
    rec = pickle.loads(Path(job["recording"]).read_bytes()) if job.get("recording") else prepare(job)
    name, seed, truth = rec["mechanism"], rec["seed"], rec["truth"]
    prob, res, post, sim, seconds = fit(job, rec)
    ref = f"{sim.anchor['body']}.mass"
    lap, lap_cov = laplace_intervals(prob, res, sim)
    # peers from the same particles: the bare particles, and the particles with stragglers left out
    bare = summarise(post.names, post.limits, post.estimate, post.particles, sim.anchor)["quantities"]
    screened = summarise(post.names, post.limits, post.estimate, post.particles, sim.anchor, (),
                         res.log_likelihood.tolist(), len(post.names) + res.start.shape[-1])["quantities"]
    rows = {}
    for label, v in post.identifiable["quantities"].items():
        param = label.split("/")[0]
        true = truth[param] / truth[ref] if "/" in label else truth[param]
        den = sim.anchor["mass"] if "/" in label else 1.0
        row = {"truth": true, "median": v["median"], "estimate": v["estimate"]}
        for p in (50, 90):
            for prefix, src in (("", v), ("bare_", bare[label]), ("screened_", screened[label])):
                lo, hi = src[f"interval{p}"]
                row[f"{prefix}in{p}"] = bool(lo <= true <= hi)
                row[f"{prefix}width{p}"] = hi - lo
            llo, lhi = (x / den for x in lap[param][p])
            row[f"laplace_in{p}"] = bool(llo <= true <= lhi)
            row[f"laplace_width{p}"] = lhi - llo
        rows[label] = row
    log.info("%s seed %d: %.0f s, ll %.1f, %s", name, seed, seconds, float(res.log_likelihood.max()),
             {k: (round(r["truth"], 4), round(r["median"], 4), r["in50"], r["in90"]) for k, r in rows.items()})
    metrics = res.trace.get("kernel_metrics")
    raw = {"names": list(prob.names), "lower": prob.lower.tolist(), "upper": prob.upper.tolist(),
           "theta": res.theta.tolist(), "best": int(res.best), "log_likelihood": res.log_likelihood.tolist(),
           "dims": len(post.names) + int(res.start.shape[-1]), "anchor": sim.anchor,
           "kernel_metrics": None if metrics is None else np.asarray(metrics).tolist(),
           "laplace_cov": lap_cov.tolist(), "phases": res.trace.get("phases"),
           "noise_scale": post.extra.get("noise_scale")}
    return {"mechanism": name, "seed": seed, "seconds": seconds, "truth": truth, "quantities": rows,
            "sigma": prob.sigma.tolist(), "log_likelihood": float(res.log_likelihood.max()),
            "particle_log_likelihood": res.log_likelihood.tolist(), "fit": raw}


RULES = ("kde", "laplace_mixture_unscaled", "laplace_best")


def rescore(result: dict) -> dict:
    """Coverage rows {rule: {quantity: {"in50", "in90", "width90"}}} of one result's stored fit under
    each interval rule of ``RULES``, peers of identify's (the particles' Laplace mixture with the
    noise checked by the fit's residuals): the kernel density of the particles (identify's rule
    until 2026-11-27), the Laplace mixture without the noise check, and the Laplace covariance at
    the best particle alone (no noise check); all in the anchor's scale, stragglers left out."""
    from vid2sim.pipeline.identifiability import (anchor_jacobian, anchor_kernel_covariance,
                                                  anchor_laplace_covariances, anchor_limits, summarise, to_anchor)

    f, truth = result["fit"], result["truth"]
    names, anchor = f["names"], f["anchor"]
    theta, ll = np.asarray(f["theta"], float), f["log_likelihood"]
    span = np.asarray(f["upper"]) - np.asarray(f["lower"])
    limits = anchor_limits({n: (lo, hi) for n, lo, hi in zip(names, f["lower"], f["upper"])}, names, anchor)
    X, best = to_anchor(theta, names, anchor), f["best"]
    estimate = dict(zip(names, X[best].tolist()))
    M = np.asarray(f["kernel_metrics"], float)
    J = anchor_jacobian(theta[best], names, anchor)
    args = {"kde": (X, ll, {"kernel_covariance": anchor_kernel_covariance(theta, M, span, names, anchor)}),
            "laplace_mixture_unscaled": (X, ll, {"laplace": anchor_laplace_covariances(theta, M, span, names, anchor)}),
            "laplace_best": (X[best:best + 1], None, {"laplace": (J @ np.asarray(f["laplace_cov"]) @ J.T)[None]})}
    ref = f"{anchor['body']}.mass"
    out = {}
    for rule, (P, lls, kw) in args.items():
        q = summarise(names, limits, estimate, P, anchor, (), lls, f["dims"], **kw)["quantities"]
        out[rule] = {}
        for label, v in q.items():
            param = label.split("/")[0]
            true = truth[param] / truth[ref] if "/" in label else truth[param]
            out[rule][label] = {f"in{p}": bool(v[f"interval{p}"][0] <= true <= v[f"interval{p}"][1]) for p in (50, 90)}
            out[rule][label]["width90"] = v["interval90"][1] - v["interval90"][0]
    return out


def rescored_summary(results: list[dict]) -> dict:
    """Coverage per mechanism and interval rule (``rescore``) over the results that keep their fit."""
    out = {}
    for name in sorted({r["mechanism"] for r in results if (r.get("fit") or {}).get("kernel_metrics")}):
        per = [rescore(r) for r in results if r["mechanism"] == name and (r.get("fit") or {}).get("kernel_metrics")]
        out[name] = {"recordings": len(per)}
        for rule in RULES:
            rows = [q for p in per for q in p[rule].values()]
            for p in (50, 90):
                out[name][f"{rule}{p}"] = float(np.mean([q[f"in{p}"] for q in rows])) if rows else float("nan")
    return out


def summary(results: list[dict]) -> dict:
    """Coverage per mechanism (over every quantity of every recording) and per quantity."""
    out = {}
    for name in sorted({r["mechanism"] for r in results}):
        rs = [r for r in results if r["mechanism"] == name]
        rows = [(k, q) for r in rs for k, q in r["quantities"].items()]
        m = {"recordings": len(rs), "quantities": len(rows)}
        for key, label in (("in", "coverage"), ("laplace_in", "laplace"), ("bare_in", "bare_particles"),
                           ("screened_in", "screened_particles")):
            for p in (50, 90):
                m[f"{label}{p}"] = float(np.mean([q[f"{key}{p}"] for _, q in rows])) if rows else float("nan")
        m["per_quantity"] = {k: {"coverage50": float(np.mean([q["in50"] for kk, q in rows if kk == k])),
                                 "coverage90": float(np.mean([q["in90"] for kk, q in rows if kk == k])),
                                 "laplace90": float(np.mean([q["laplace_in90"] for kk, q in rows if kk == k])),
                                 "median_rel_width90": float(np.median([q["width90"] / abs(q["truth"])
                                                                        for kk, q in rows if kk == k and q["truth"]])),
                                 "median_rel_laplace_width90": float(np.median(
                                     [q["laplace_width90"] / abs(q["truth"]) for kk, q in rows if kk == k and q["truth"]]))}
                             for k in dict(rows)}
        m["seconds_median"] = float(np.median([r["seconds"] for r in rs]))
        out[name] = m
    return out


def settings_of(a: argparse.Namespace) -> dict:
    """The IdentifyConfig settings of the run: identify at the generator's rate (PyBullet, 960 Hz),
    since its default 480 Hz integrates differently by 2-6x the track noise on these clips, an error
    the parameters absorb as bias (docs/results.md)."""
    from vid2sim.pipeline.config import set_path

    settings = {"inference": {"method": a.method, "particles": a.particles, "iterations": a.iterations},
                "plots": False, "shooting": {"substeps": math.ceil(GENERATOR_HZ / a.fps - 1e-9)}}
    for kv in a.set:
        k, v = kv.split("=", 1)
        try:
            set_path(settings, k, json.loads(v))
        except json.JSONDecodeError:
            set_path(settings, k, v)
    return settings


def run_jobs(jobs: list[dict], n: int, jsonl: Path | None) -> list[dict]:
    """``one`` of every job on ``n`` worker processes; each result is appended to ``jsonl`` as it
    ends (so that a run cut short keeps what it finished)."""
    from concurrent.futures import as_completed

    results = []

    def keep(r: dict) -> None:
        results.append(r)
        if jsonl:
            with jsonl.open("a") as fh:
                fh.write(json.dumps(r) + "\n")

    if n > 1:
        with ProcessPoolExecutor(n) as ex:
            for fut in as_completed([ex.submit(one, j) for j in jobs]):
                keep(fut.result())
    else:
        for j in jobs:
            keep(one(j))
    return sorted(results, key=lambda r: (r["mechanism"], r["seed"]))


def print_summary(out: dict, rescored: dict | None = None) -> None:
    line = {m: {k: v for k, v in s.items() if k != "per_quantity"} for m, s in out.items()}
    for m, r in (rescored or {}).items():
        line.setdefault(m, {})["rules"] = {k: v for k, v in r.items() if k != "recordings"}
    print(json.dumps(line))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mechanisms", default="cartpole,double_pendulum")
    ap.add_argument("--seeds", default="0-19", help="recording seeds: 0-19 or 0,3,7")
    ap.add_argument("--frames", type=int, default=45, help="frames per recording")
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--method", default="csvgd")
    ap.add_argument("--particles", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=150, help="identify.inference.iterations (its default: 200)")
    ap.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                    help="further IdentifyConfig settings (JSON values), e.g. --set shooting.windows=4")
    ap.add_argument("--out", type=Path, default=Path("bench_calibration.json"))
    ap.add_argument("--jsonl", type=Path, help="also append each recording's result to this file as it ends")
    ap.add_argument("--prepare", type=Path, metavar="DIR",
                    help="only simulate the recordings (PyBullet) and write them to DIR, one pickle each")
    ap.add_argument("--recordings", type=Path, metavar="DIR", help="fit the recordings --prepare wrote to DIR")
    ap.add_argument("--merge", type=Path, nargs="+", help="summarise the results of earlier --out or --jsonl files")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    if a.merge:
        return merge(a.merge, a.out)
    import pickle

    from vid2sim.pipeline.config import config_from_json
    from vid2sim.pipeline.identify import IdentifyConfig

    settings = settings_of(a)
    jobs = [{"mechanism": m, "seed": s, "frames": a.frames, "fps": a.fps, "identify": dict(settings, seed=s)}
            for s in seeds_of(a.seeds) for m in a.mechanisms.split(",")]
    if a.prepare:
        a.prepare.mkdir(parents=True, exist_ok=True)
        for j in jobs:
            (a.prepare / f"{j['mechanism']}_{j['seed']}.pkl").write_bytes(pickle.dumps(prepare(j)))
        log.info("wrote %d recordings to %s", len(jobs), a.prepare)
        return
    for j in jobs if a.recordings else ():
        j["recording"] = str(a.recordings / f"{j['mechanism']}_{j['seed']}.pkl")
    t0 = time.perf_counter()
    results = run_jobs(jobs, a.jobs, a.jsonl)
    out = summary(results)
    full = {"summary": out, "results": results,
            "settings": asdict(config_from_json(IdentifyConfig, settings, "bench_calibration")),
            "frames": a.frames, "fps": a.fps, "density": DENSITY, "damping_rate": DAMPING_RATE,
            "track_noise": TRACK_NOISE, "seconds": time.perf_counter() - t0}
    a.out.write_text(json.dumps(full, indent=1))
    log.info("wrote %s", a.out)
    print_summary(out, rescored_summary(results))


def merge(paths: list[Path], out_path: Path) -> None:
    """Summarise the results of earlier ``--out`` files (same settings) or ``--jsonl`` files."""
    runs = [json.loads(p.read_text()) if p.suffix == ".json" else
            {"results": [json.loads(x) for x in p.read_text().splitlines() if x.strip()]} for p in paths]
    full = [r for r in runs if "settings" in r]
    if len({json.dumps(r["settings"], sort_keys=True) for r in full}) > 1 or len({r["frames"] for r in full}) > 1:
        raise SystemExit("error: bench_calibration: --merge: the files were run with different settings")
    results = sorted({(x["mechanism"], x["seed"]): x for r in runs for x in r["results"]}.values(),
                     key=lambda x: (x["mechanism"], x["seed"]))
    out = summary(results)
    base = full[0] if full else {}
    out_path.write_text(json.dumps(dict(base, summary=out, results=results, merged=[str(p) for p in paths]), indent=1))
    print_summary(out, rescored_summary(results))


if __name__ == "__main__":
    main()
