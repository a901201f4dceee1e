"""Wall time for CSVGD to reach CMA-ES's log-likelihood on the cartpole, interleaved.

The recording of ``scripts/bench_identify.py`` (``--work``, ``--seed``: depth video ->
segment -> track -> articulate, cached there) is identified with the default identify
settings by CMA-ES and CSVGD in turns (``--rounds``; the first round also pays each
method's simulator compilation). Per round: each method's wall time and best single-shooting
log-likelihood, and the time at which CSVGD's Gauss-Newton phase first reached CMA-ES's
log-likelihood of the same round (within ``--tolerance`` nats). Last stdout line: JSON
``{"rounds": [{"cmaes": {"seconds", "log_likelihood"}, "csvgd": {..., "reached_seconds"}, "ratio"}]}``
with ratio = CSVGD's time to reach / CMA-ES's time.

    python scripts/bench_identify_time.py [--seed 0] [--rounds 2] [--frames 60]
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_identify import video_inputs  # noqa: E402

from vid2sim.models.inference import infer  # noqa: E402
from vid2sim.pipeline.identify import (IdentifyConfig, build_simulator, joint_trajectory, make_problem,  # noqa: E402
                                       method_options)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--tolerance", type=float, default=0.05, help="nats below CMA-ES's that count as reached")
    ap.add_argument("--work", type=Path, default=Path("runs/bench_identify"))
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)
    art, jp, poses, shapes, truth, _ = video_inputs("cartpole", a.seed, a.frames, 30.0, "none", a.work / f"seed{a.seed}")
    cfg = IdentifyConfig(plots=False, seed=a.seed)
    sim = build_simulator(cfg, art, poses, shapes, poses.fps)
    prob = make_problem(cfg, sim, joint_trajectory(jp, sim.dof_names), poses.fps)
    rounds = []
    for r in range(a.rounds):
        row = {}
        for m in ("cmaes", "csvgd"):
            t0 = time.perf_counter()
            res = infer(m, prob, particles=cfg.inference.particles, iterations=cfg.inference.iterations, seed=cfg.seed,
                        **method_options(cfg, m, prob, poses.fps))
            row[m] = {"seconds": round(time.perf_counter() - t0, 2), "log_likelihood": float(res.log_likelihood.max())}
            if m == "csvgd":
                target = row["cmaes"]["log_likelihood"] - a.tolerance
                start = res.trace.get("polish_started", 0.0)
                hit = [start + t for t, ll in res.trace.get("newton_best", []) if ll >= target]
                row[m]["reached_seconds"] = round(hit[0], 2) if hit else None
                row[m]["kept"] = res.trace.get("phases", {}).get("kept")
            print(f"round {r}: {m} {row[m]}", file=sys.stderr, flush=True)
        reach = row["csvgd"]["reached_seconds"]
        row["ratio"] = round(reach / row["cmaes"]["seconds"], 3) if reach is not None else None
        row["ratio_total"] = round(row["csvgd"]["seconds"] / row["cmaes"]["seconds"], 3)
        rounds.append(row)
    print(json.dumps({"rounds": rounds, "seed": a.seed, "frames": a.frames, "config": {
        "particles": cfg.inference.particles, "iterations": cfg.inference.iterations, "windows": cfg.shooting.windows,
        "polish": cfg.shooting.polish}}))


if __name__ == "__main__":
    main()
