"""MPC benchmark (Heiden et al., §4.3.5.3, Table 4.5 bottom): MPPI on the inferred cartpole
twin vs on the true model, both executed on the true system (PyBullet, truth URDF).

Tasks: swing-up (pole hanging down, at rest) and balancing (pole 20 deg off upright,
cart at 0.1 m/s). MPPI: 200 samples, horizon 60 x 0.05 s; episodes of ``--steps``
control steps; ``--runs`` episodes per task and model (MPPI seeds 0..runs-1). Reward:
the DeepMind Control Suite cartpole reward averaged over the episode (definition in
``vid2sim.models.control``), in [0, 1].

The inferred model is ``--model`` (a model.urdf) or, by default, the pipeline's twin of
a synthetic cartpole recording (bench_forecast.build_twin: track -> articulate ->
identify -> export, with any stage that is missing or fails replaced by the truth and
named in ``inputs``). Free motion fixes only mass ratios; ``--known-mass cart=1.0`` gives
identify one weighed part, as a user planning control would (the scale decides what a 10-N
push does). Prints JSON ``{"swingup"|"balance": {"inferred"|"true": {"mean", "std",
"rewards"}}, "inputs", "reward", "seconds"}``.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from vid2sim.datasets.synthetic import simulate  # noqa: E402
from vid2sim.models import control  # noqa: E402

log = logging.getLogger("bench_mpc")

TASKS = {"swingup": (0.0, math.pi, 0.0, 0.0), "balance": (0.0, math.radians(20.0), 0.1, 0.0)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="inferred model.urdf (default: build the pipeline's twin)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100, help="control steps per episode (x 0.05 s)")
    ap.add_argument("--frames", type=int, default=150, help="recording length when building the twin")
    ap.add_argument("--noise", default="realistic", choices=("none", "realistic"))
    ap.add_argument("--source", default="pipeline", choices=("pipeline", "truth"))
    ap.add_argument("--known-mass", action="append", default=[], metavar="BODY=KG",
                    help="a weighed part for identify (fixes the mass scale free motion leaves open), e.g. cart=1.0")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    try:
        masses = {k: float(v) for k, v in (m.split("=", 1) for m in args.known_mass)}
    except ValueError:
        ap.error(f"--known-mass expects BODY=KG, got {args.known_mass}")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    t0 = time.time()
    out = Path(args.out or tempfile.mkdtemp(prefix="bench_mpc_"))
    out.mkdir(parents=True, exist_ok=True)
    true_urdf = out / "true.urdf"
    true_urdf.write_text(simulate("cartpole", seed=0, frames=2).urdf)
    if args.model:
        model, inputs = Path(args.model), {"model": str(args.model)}
    else:
        from bench_forecast import build_twin

        *_, inputs = build_twin("cartpole", out, args.frames, 0.0, args.noise, args.source, masses=masses)  # fit every frame
        inputs["known_masses"] = masses
        model = out / "run" / "model.urdf"
    cfg = control.MPPIConfig(steps=args.steps)
    result: dict = {}
    for task, start in TASKS.items():
        result[task] = {}
        for label, plan in (("inferred", model), ("true", true_urdf)):
            rewards = [control.episode(str(plan), str(true_urdf), start, cfg, seed=s) for s in range(args.runs)]
            result[task][label] = {"mean": float(np.mean(rewards)), "std": float(np.std(rewards)),
                                   "rewards": [round(r, 4) for r in rewards]}
            log.info("%s %s: %.3f +- %.3f", task, label, np.mean(rewards), np.std(rewards))
    p_inf, p_true = control.cartpole_from_urdf(str(model)), control.cartpole_from_urdf(str(true_urdf))
    result.update(inputs=inputs, reward="DeepMind Control Suite cartpole reward, mean over the episode (see models/control.py)",
                  mppi={"samples": cfg.samples, "horizon": cfg.horizon, "dt": cfg.dt, "noise": cfg.noise,
                        "lambda": cfg.lam, "max_force": cfg.max_force, "steps": cfg.steps},
                  planning_params={"inferred": {k: getattr(p_inf, k) for k in ("mc", "mp", "l", "I", "bc", "bp")},
                                   "true": {k: getattr(p_true, k) for k in ("mc", "mp", "l", "I", "bc", "bp")}},
                  seconds=round(time.time() - t0, 1))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
