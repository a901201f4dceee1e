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
says whether the likelihood (its noise model) or the particles' spread is off.

    python scripts/bench_calibration.py --seeds 0-19 --jobs 2 [--frames 45] [--mechanisms cartpole,double_pendulum]
        [--set shooting.substeps=32]
    python scripts/bench_calibration.py --merge a.json b.json --out all.json   # runs of other seeds, same settings

Last stdout line: {"cartpole": {"coverage50", "coverage90", "laplace50", "laplace90",
"bare_particles50", ..., "screened_particles90", ...},
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


def laplace_intervals(prob, res, sim, h: float = 1e-6) -> dict[str, dict[int, list[float]]]:
    """Normal intervals of each parameter from the Gauss-Newton covariance at the best particle, in
    the scale of the anchor (identify.anchored: the covariance through to_anchor's Jacobian)."""
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
    names, theta = list(prob.names), res.theta[b].numpy()
    A = anchor_jacobian(theta, names, sim.anchor)
    cov, theta = A @ cov @ A.T, to_anchor(theta, names, sim.anchor)
    out = {}
    for i, n in enumerate(names):
        sd, est = math.sqrt(max(cov[i, i], 0.0)), float(theta[i])
        out[n] = {p: [est - z * sd, est + z * sd] for p, z in Z.items()}
    return out


def one(job: dict) -> dict:
    """Simulate, identify and score one recording (runs in a worker process)."""
    import torch

    from vid2sim.datasets.synthetic import mechanism, simulate
    from vid2sim.models.inference import infer
    from vid2sim.pipeline import identify
    from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks
    from vid2sim.pipeline.config import config_from_json
    from vid2sim.pipeline.identifiability import scale_anchor, summarise

    torch.set_num_threads(1)
    name, seed, frames, fps = job["mechanism"], job["seed"], job["frames"], job["fps"]
    mech = mechanism(name)
    types = {j.child: j.type for j in mech.joints}
    vols = {b.name: float(b.shape.volume()) for b in mech.bodies}
    anchor = scale_anchor({}, [b.name for b in mech.bodies], [types.get(b.name, "fixed") for b in mech.bodies],
                          vols, 500.0)["body"]
    rng = np.random.default_rng(10_000 + seed)
    truth = draw_truth(mech, rng, anchor)
    s = simulate(name, seed=seed, frames=frames, fps=fps, params=truth)
    tr = s.truth
    art, poses = Articulation.from_truth(tr), PoseTracks.from_truth(tr, s.world_from_body, fps)
    jtype = {j["name"]: j["type"] for j in tr["joints"]}
    sig = np.array([TRACK_NOISE[jtype[n]] for n in s.joint_names])
    noise = rng.standard_normal(np.shape(s.q)) * sig
    noise[0] = 0.0   # frame 0 defines the model's geometry (joint_trajectory's q = 0): no error simulated there
    q = np.asarray(s.q, float) + noise
    jp = JointPositions(q, list(s.joint_names))
    cfg = config_from_json(identify.IdentifyConfig, job["identify"], "bench_calibration")
    t0 = time.perf_counter()
    sim = identify.build_simulator(cfg, art, poses, s.shapes, fps)
    prob = identify.make_problem(cfg, sim, identify.joint_trajectory(jp, sim.dof_names, cfg.frames), fps)
    res = infer(cfg.inference.method, prob, particles=cfg.inference.particles, iterations=cfg.inference.iterations,
                seed=cfg.seed, **identify.method_options(cfg, cfg.inference.method))
    post = identify.posterior_from(res, prob)
    post = identify.anchored(post, sim.anchor, res.trace.get("kernel_metrics")) if sim.rescale else post
    post = identify.with_identifiability(cfg, post, sim.anchor)
    seconds = time.perf_counter() - t0
    ref = f"{sim.anchor['body']}.mass"
    lap = laplace_intervals(prob, res, sim)
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
    return {"mechanism": name, "seed": seed, "seconds": seconds, "truth": truth, "quantities": rows,
            "sigma": prob.sigma.tolist(), "log_likelihood": float(res.log_likelihood.max()),
            "particle_log_likelihood": res.log_likelihood.tolist()}


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
    ap.add_argument("--merge", type=Path, nargs="+", help="summarise the results of earlier --out files instead")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    if a.merge:
        runs = [json.loads(p.read_text()) for p in a.merge]
        if len({json.dumps(r["settings"], sort_keys=True) for r in runs}) > 1 or len({r["frames"] for r in runs}) > 1:
            raise SystemExit("error: bench_calibration: --merge: the files were run with different settings")
        results = [x for r in runs for x in r["results"]]
        out = summary(results)
        a.out.write_text(json.dumps(dict(runs[0], summary=out, results=results, merged=[str(p) for p in a.merge]),
                                    indent=1))
        print(json.dumps({m: {k: v for k, v in s.items() if k != "per_quantity"} for m, s in out.items()}))
        return
    # identify at the generator's rate (PyBullet, 960 Hz): its default 480 Hz integrates differently by 2-6x
    # the track noise on these clips, an error the parameters absorb as bias (docs/results.md)
    from vid2sim.pipeline.config import config_from_json, set_path
    from vid2sim.pipeline.identify import IdentifyConfig

    settings = {"inference": {"method": a.method, "particles": a.particles, "iterations": a.iterations},
                "plots": False, "shooting": {"substeps": math.ceil(GENERATOR_HZ / a.fps - 1e-9)}}
    for kv in a.set:
        k, v = kv.split("=", 1)
        try:
            set_path(settings, k, json.loads(v))
        except json.JSONDecodeError:
            set_path(settings, k, v)
    jobs = [{"mechanism": m, "seed": s, "frames": a.frames, "fps": a.fps, "identify": dict(settings, seed=s)}
            for m in a.mechanisms.split(",") for s in seeds_of(a.seeds)]
    t0 = time.perf_counter()
    if a.jobs > 1:
        with ProcessPoolExecutor(a.jobs) as ex:
            results = list(ex.map(one, jobs))
    else:
        results = [one(j) for j in jobs]
    out = summary(results)
    full = {"summary": out, "results": results,
            "settings": asdict(config_from_json(IdentifyConfig, settings, "bench_calibration")),
            "frames": a.frames, "fps": a.fps, "density": DENSITY, "damping_rate": DAMPING_RATE,
            "track_noise": TRACK_NOISE, "seconds": time.perf_counter() - t0}
    a.out.write_text(json.dumps(full, indent=1))
    log.info("wrote %s", a.out)
    print(json.dumps({m: {k: v for k, v in s.items() if k != "per_quantity"} for m, s in out.items()}))


if __name__ == "__main__":
    main()
