"""Parameter identification on the synthetic cartpole: CSVGD vs Adam, CMA-ES, MCMC (and SVGD).

The dissertation's Table 4.5 (top) protocol. ``--input video`` (default, the paper's
protocol): the synthetic depth video goes through segment -> track -> articulate and identify
fits the tracked joint positions on the inferred articulation. ``--input truth``
(faster, isolates the inference methods): the ground-truth joint trajectory
of the synthetic recording (``simulate("cartpole")`` ``.q``, PyBullet) and the truth
articulation. Every method gets the same parameter set and limits (``pipeline.identify``), the
same number of particles and the same budget of simulator rollouts
(particles x iterations). NMAE of each method's best particle (highest single-shooting
likelihood; the truth is never used to choose) against the truth, normalised by the
limits.

Free motion under gravity and viscous damping is invariant to scaling every mass,
inertia and damping by one factor, so from joint trajectories only ratios are
identifiable. ``--protocol anchored`` (default) fixes the cart's mass to its known
value (one part weighed), which makes the rest identifiable; ``--protocol all_free``
estimates everything. Both are reported when ``--both`` is given.

    python scripts/bench_identify.py [--seeds 0-4] [--out bench_identify.json] [--iterations 150] [--both]
        [--input video|truth] [--observation joints|video]

``--seeds``: recording seeds (each its own synthetic clip; the methods' particle seed is the
recording seed unless ``--particle-seed``); the median NMAE over them is the comparison.

Measured (cartpole, 60 frames, 16 particles x 150 iterations): the README's identify row
(clean depth video, recording seeds 0-4, and the other inputs); CSVGD (with its Gauss-Newton
phase) and CMA-ES both reach the maximum likelihood, and which of them lands nearer the truth
is decided within the posterior's width.

``--observation video`` fits the rendered depth of the simulated parts to the recording's
depth at pixels around the mechanism (``pipeline/identify_video.py``, the paper's
pixel-space likelihood) instead of the tracked joint positions; the tracked positions
then only seed the shooting states.

Last stdout line: {"nmae_median": {method: x}, "nmae": {method: [per seed]}, "default": identify's
default method, "seconds_median": {method: s}}; the whole record goes to ``--out``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch

from vid2sim.models.inference import infer, nmae
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks
from vid2sim.pipeline.identifiability import to_anchor
from vid2sim.pipeline.identify import (IdentifyConfig, IdentifyInference, IdentifyNoise, IdentifyShooting,
                                       IdentifyVideo, build_simulator, joint_trajectory, make_problem,
                                       make_video_problem, method_options)

log = logging.getLogger("bench_identify")
METHODS = ("csvgd", "adam", "cmaes", "mcmc", "svgd")


def truth_inputs(name: str, seed: int, frames: int, fps: float):
    """Articulation, JointPositions, PoseTracks, shapes and truth params of a synthetic mechanism."""
    from vid2sim.datasets.synthetic import simulate

    s = simulate(name, seed=seed, frames=frames, fps=fps)
    tr = s.truth
    art, poses = Articulation.from_truth(tr), PoseTracks.from_truth(tr, s.world_from_body, fps)
    jp = JointPositions(np.asarray(s.q, float), list(s.joint_names))
    return art, jp, poses, s.shapes, dict(tr["params"])


def video_inputs(name: str, seed: int, frames: int, fps: float, noise: str, work: Path):
    """As ``truth_inputs``, but articulation, joint positions and poses from the pipeline:
    synthetic depth video -> segment -> track -> articulate. Truth parameters are renamed
    to the inferred joints (matched by child body)."""
    from vid2sim.datasets.synthetic import make_recording
    from vid2sim.pipeline import run as runner

    rec = make_recording(name, work / "recording", seed=seed, frames=frames, fps=fps, noise=noise, overwrite=True)
    run_dir = work / "run"
    runner.run_pipeline(rec, run_dir, runner.resolve_configs({"track": {"overlay": False}}),
                        stages=["segment", "track", "articulate"])
    art = Articulation.load(run_dir / Articulation.FILE)
    jp = JointPositions.load(run_dir / JointPositions.FILE)
    poses = PoseTracks.load(run_dir / PoseTracks.FILE)
    tr = json.loads((rec / "truth.json").read_text())
    from vid2sim.datasets.recording import open_recording
    with open_recording(rec) as r:
        shapes = r.shapes
    by_child = {j["child"]: j["name"] for j in tr["joints"]}
    truth = {}
    for k, v in tr["params"].items():
        head, field = k.rsplit(".", 1)
        inferred = next((j.name for j in art.joints if by_child.get(j.child) == head), None)
        truth[f"{inferred}.{field}" if inferred else k] = v
    log.info("pipeline articulation: %s", [(j.name, j.type) for j in art.joints])
    return art, jp, poses, shapes, truth, rec


def run_protocol(art, jp, poses, shapes, truth, cfg: IdentifyConfig, anchor: dict[str, float], methods,
                 rec=None) -> dict:
    fps = poses.fps
    # a weighed part: identify's known masses (limits collapsed to a sliver around the value)
    cfg = dataclasses.replace(cfg, bounds=dataclasses.replace(
        cfg.bounds, masses={n.rsplit(".", 1)[0]: v for n, v in anchor.items()}))
    sim = build_simulator(cfg, art, poses, shapes, fps)
    q = joint_trajectory(jp, sim.dof_names, cfg.frames)
    prob = make_problem(cfg, sim, q, fps)
    if cfg.observation == "video":
        prob = make_video_problem(cfg, sim, prob, rec, poses, shapes)
    free = [i for i, n in enumerate(sim.names) if n not in anchor]
    names = [sim.names[i] for i in free]
    t_true = np.array([truth[n] for n in names])
    lo, hi = sim.lower[free], sim.upper[free]
    out = {"parameters": names, "limits": {n: [float(a), float(b)] for n, a, b in zip(names, lo, hi)},
           "truth": dict(zip(names, t_true.tolist())), "nmae": {}, "seconds": {}, "estimates": {},
           "log_likelihood": {}, "evaluations": {}}
    for m in methods:
        opts = method_options(cfg, m, prob, fps)
        t0 = time.perf_counter()
        res = infer(m, prob, particles=cfg.inference.particles, iterations=cfg.inference.iterations, seed=cfg.seed,
                    **opts)
        sec = time.perf_counter() - t0
        best = res.estimate.numpy()   # one known mass is imposed after the fit, as identify.run does
        est = (to_anchor(best, sim.names, sim.anchor) if sim.rescale else best)[free]
        out["nmae"][m] = nmae(est, t_true, lo, hi)
        out["seconds"][m] = sec
        out["estimates"][m] = dict(zip(names, est.tolist()))
        out["log_likelihood"][m] = float(res.log_likelihood.max())
        out["evaluations"][m] = res.evaluations
        log.info("%s: NMAE %.3f  ll %.1f  %.0f s  %s", m, out["nmae"][m], out["log_likelihood"][m], sec, out["estimates"][m])
    return out


def parse_seeds(text: str) -> list[int]:
    """"0-4" -> [0, 1, 2, 3, 4]; "0,2,5" -> [0, 2, 5]."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return seeds


def one_seed(a, seed: int, methods: list[str]) -> dict:
    """Every protocol's run of every method on the recording of ``seed``."""
    rec = None
    work = a.work / f"seed{seed}"
    if a.input == "video":
        art, jp, poses, shapes, truth, rec_path = video_inputs(a.mechanism, seed, a.frames, a.fps, a.noise, work)
    else:
        art, jp, poses, shapes, truth = truth_inputs(a.mechanism, seed, a.frames, a.fps)
        if a.observation == "video":  # the recording of the same synthetic run, for the pixel likelihood
            from vid2sim.datasets.synthetic import make_recording

            rec_path = make_recording(a.mechanism, work / "recording", seed=seed, frames=a.frames, fps=a.fps,
                                      noise=a.noise, overwrite=True)
    if a.observation == "video":
        from vid2sim.datasets.recording import open_recording

        rec = open_recording(rec_path)
    cfg = IdentifyConfig(seed=seed if a.particle_seed is None else a.particle_seed, plots=False,
                         observation=a.observation,
                         inference=IdentifyInference(particles=a.particles, iterations=a.iterations,
                                                     precondition=a.precondition),
                         shooting=IdentifyShooting(windows=a.windows, polish=a.polish, substeps=a.substeps),
                         noise=IdentifyNoise(sigma=a.sigma),
                         video=IdentifyVideo(pixels=a.pixels, pixel_sigma=a.pixel_sigma))
    protocols = ("anchored", "all_free") if a.both else (a.protocol,)
    first_mass = next(k for k in truth if k.endswith(".mass"))  # the truth's first body (the cart)
    runs = {}
    for p in protocols:
        anchor = {first_mass: truth[first_mass]} if p == "anchored" else {}
        log.info("seed %d: protocol %s (anchor %s)", seed, p, anchor)
        runs[p] = run_protocol(art, jp, poses, shapes, truth, cfg, anchor, methods, rec)
    return {"runs": runs, "config": dataclasses.asdict(cfg)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench_identify.json"))
    ap.add_argument("--mechanism", default="cartpole")
    ap.add_argument("--seeds", default="0", help="recording seeds, e.g. 0-4 or 0,2 (the median over them is reported)")
    ap.add_argument("--particle-seed", type=int, default=None,
                    help="Sobol / sampler seed of every method (default: the recording seed)")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--particles", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=150)
    ap.add_argument("--sigma", type=float, default=0.01, help="observation noise std (rad / m)")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--polish", type=float, default=IdentifyShooting.polish,
                    help="csvgd: fraction of the iterations spent last on single shooting (methods.csvgd)")
    ap.add_argument("--precondition", default=IdentifyInference.precondition, choices=("gauss-newton", "none"),
                    help="csvgd: steps of that last phase, Gauss-Newton (svgd_newton.py) or Adam")
    ap.add_argument("--substeps", type=int, default=0, help="simulator steps per frame (0: identify's default, 480 Hz)")
    ap.add_argument("--protocol", choices=("anchored", "all_free"), default="anchored")
    ap.add_argument("--both", action="store_true", help="run both protocols; 'nmae' is --protocol's")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--input", choices=("truth", "video"), default="video",
                    help="truth: the synthetic joint trajectories; video: depth video -> segment -> track -> articulate")
    ap.add_argument("--noise", default="none", help="sensor noise of the video input (none | realistic)")
    ap.add_argument("--observation", choices=("joints", "video"), default="joints",
                    help="likelihood: tracked joint positions, or rendered vs observed depth (pixel space)")
    ap.add_argument("--pixels", type=int, default=1000, help="pixels per frame of --observation video")
    ap.add_argument("--pixel-sigma", type=float, default=0.02, help="depth noise std (m) of --observation video")
    ap.add_argument("--work", type=Path, default=Path("runs/bench_identify"), help="recordings and runs of --input video")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)
    methods = a.methods.split(",")
    seeds = parse_seeds(a.seeds)
    per_seed = {}
    for seed in seeds:
        per_seed[seed] = one_seed(a, seed, methods)
        main_run = per_seed[seed]["runs"][a.protocol]
        log.info("seed %d: NMAE %s", seed, {m: round(v, 5) for m, v in main_run["nmae"].items()})
    table = {k: {m: [per_seed[s]["runs"][a.protocol][k][m] for s in seeds] for m in methods}
             for k in ("nmae", "seconds", "log_likelihood")}
    result = {"nmae_median": {m: float(np.median(v)) for m, v in table["nmae"].items()}, "nmae": table["nmae"],
              "seconds": table["seconds"], "log_likelihood": table["log_likelihood"], "seeds": seeds,
              "protocol": a.protocol, "default": IdentifyInference.method,
              "input": ("ground-truth joint trajectories (synthetic .q) and truth articulation; no track/articulate"
                        if a.input == "truth" else f"depth video ({a.noise} noise) -> segment -> track -> articulate"),
              "observation": a.observation, "mechanism": a.mechanism, "frames": a.frames, "fps": a.fps,
              "particles": a.particles, "iterations": a.iterations, "windows": a.windows, "substeps": a.substeps,
              "budget_rollouts_per_method": a.particles * a.iterations,
              "per_seed": {str(s): v for s, v in per_seed.items()}}
    a.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({"nmae_median": result["nmae_median"], "nmae": result["nmae"], "default": result["default"],
                      "seconds_median": {m: float(np.median(v)) for m, v in table["seconds"].items()}}))


if __name__ == "__main__":
    main()
