"""How well identify's push simulator pins the floor and tip friction on the true tracks.

For each case (``--cases``), the generator's true poses over the first ``--frames`` frames
(no tracking) and the recorded tip build identify's push problem (``identify_roots.build_root_problem``
+ ``identify_push.attach_pusher``, as ``vid2sim identify`` does); its simulator is rolled out
from the tracked start state over the whole window (single shooting, as the push fit does)
at the true coefficients with one of them swept over ``--grid`` x its truth:

- ``floor``: floor mu swept, tip mu true; ``tip``: tip mu swept, floor mu true;
- ``profile``: floor mu swept with the tip mu profiled out (for each floor mu, the best of
  ``TIP_GRID``): the floor mu's profile likelihood, what a fit that also searches the tip mu can
  tell; ``dll_scaled`` divides the log-likelihood difference by the mean square whitened residual
  at the profile's best (the simulator's own error against PyBullet counted as noise, as
  ``identify_push.release_profile`` does), so that a change of 2 is again about one standard deviation;

masses at the truth's ratios to the anchored root mass, joint damping true. With ``--self`` the
tracks compared against are identify's own simulator at the true coefficients from the true start (no
PyBullet, no tracking error): what a perfect simulator could tell from the tracks alone. Reported per
sweep point: rms centre error (mm) and rms yaw error (deg) of the root against the true
track, and the Gaussian log-likelihood difference to the truth point for a tracking noise of
``--sigma-mm`` on positions and ``--sigma-deg`` on angles (a change of 2 is about one standard deviation of a
one-parameter profile). ``--slip`` sets the regularised Coulomb slip velocity (m/s) of the
contact law and ``--hz`` the simulator rate.

The last stdout line is one JSON object ``{case: {"floor": [[x, rms_mm, rms_deg, dll], ...],
"tip": [...], "profile": [[floor mu, tip mu, rms_mm, rms_deg, dll, dll_scaled], ...], "truth": {...},
"seconds"}}``; progress on stderr.

    python scripts/bench_push_friction.py [--cases pushed_box,pushed_box_strokes] [--frames 90]
        [--grid 0.5,0.8,1,1.2,1.5,2] [--slip 0.01] [--hz 480]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from vid2sim.datasets.synthetic import actuation_of, recording_shapes, simulate  # noqa: E402
from vid2sim.pipeline import identify_push, identify_roots  # noqa: E402
from vid2sim.pipeline.identify import IdentifyConfig  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_forecast import truth_inputs  # noqa: E402

FPS = 30.0
TIP_GRID = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.2, 1.5]   # tip mu profiled out


def push_problem(name: str, frames: int, seed: int = 0, slip: float | None = None, hz: float | None = None,
                 tip_damping: float | None = None):
    """(SyntheticTruth, RootProblem with the pusher) of case ``name`` on its true tracks."""
    st = simulate(name, seed=seed, frames=frames, fps=FPS)
    art, poses, jp, _ = truth_inputs(st, FPS)
    rec = types.SimpleNamespace(actuation=actuation_of(st), shapes=recording_shapes(st))
    rp = identify_roots.build_root_problem(IdentifyConfig(), art, jp, poses, rec.shapes, FPS)
    assert identify_push.attach_pusher(IdentifyConfig(), rp, rec, rec.shapes, poses, art)
    sim = rp.sim
    if slip is not None:
        sim.model = sim.model.replace(slip_velocity=float(slip))
    if tip_damping is not None:
        sim.model = sim.model.replace(contact_damping=torch.full((1,), float(tip_damping), dtype=sim.model.dtype))
    if hz is not None:
        sub = max(1, math.ceil(hz / FPS - 1e-9))
        track, fps, fixed = sim.track, sim.fps, sim.fixed
        sim = replace(sim, substeps=sub, dt=1.0 / (FPS * sub))
        sim.track, sim.fps, sim.fixed = track, fps, fixed
        rp.sim = sim
    return st, rp


def true_theta(st, rp) -> dict:
    """The true value of each fitted name: floor and tip mu, masses at the truth's ratios to the
    anchored root's, joint damping."""
    p = st.truth["params"]
    (root, kg), = rp.anchored.items()
    scale = kg / p[root]
    out = {}
    for n in rp.sim.names:
        if n == "tip.friction":
            out[n] = st.truth["tip"]["friction"]
        elif n.endswith(".mass"):
            out[n] = p[n] * scale
        elif n.endswith(".damping"):
            out[n] = p[n] * scale
        else:
            out[n] = p[n]
    return out


def sweep(st, rp, which: str, factors: list[float], sigma_mm: float, sigma_deg: float) -> list[list[float]]:
    """[[value, rms_mm, rms_deg, dll], ...] over ``which`` (floor.friction or tip.friction) x factors."""
    truth = true_theta(st, rp)
    rows = []
    for f in [1.0] + list(factors):
        v = dict(truth, **{which: truth[which] * f})
        rows.append([v[n] for n in rp.sim.names])
    theta = torch.tensor(rows, dtype=torch.float64)
    start = torch.as_tensor(rp.guess[:1]).expand(len(rows), -1)
    with torch.no_grad():
        x = rp.sim.simulate(theta, start, len(rp.q)).numpy()
    out = []
    for i, f in enumerate([1.0] + list(factors)):
        d = x[i, :, :3] - rp.q[:, :3]            # planar root: x, y (m), yaw (rad)
        pos2 = (d[:, :2] ** 2).sum(1)
        yaw2 = d[:, 2] ** 2
        ll = -0.5 * (pos2.sum() / (sigma_mm * 1e-3) ** 2 + yaw2.sum() / math.radians(sigma_deg) ** 2)
        out.append([truth[which] * f, 1e3 * math.sqrt(pos2.mean()), math.degrees(math.sqrt(yaw2.mean())), ll])
    ll0 = out[0][3]
    rows = sorted(([round(float(a), 4), round(float(b), 3), round(float(c), 3), round(float(dl - ll0), 1)]
                   for a, b, c, dl in out[1:]))
    return rows


def _rollout_ll(st, rp, values: list[dict], sigma_mm: float, sigma_deg: float) -> np.ndarray:
    """(len(values), 3): rms centre error (mm), rms yaw error (deg) and log-likelihood (noise
    sigma_mm / sigma_deg) of the root over the whole window, each ``values`` a dict over rp.sim.names;
    a yaw identify leaves out (an upright puck's, ``identify_push.unseen_yaw``) adds nothing to it."""
    theta = torch.tensor([[v[n] for n in rp.sim.names] for v in values], dtype=torch.float64)
    start = torch.as_tensor(rp.guess[:1]).expand(len(values), -1)
    with torch.no_grad():
        x = rp.sim.simulate(theta, start, len(rp.q)).numpy()
    d = x[:, :, :3] - rp.q[None, :, :3]
    pos2, yaw2 = (d[..., :2] ** 2).sum(-1), d[..., 2] ** 2
    seen = 0.0 if "unseen_yaw" in rp.extra["pusher"] else 1.0
    ll = -0.5 * (pos2.sum(1) / (sigma_mm * 1e-3) ** 2 + seen * yaw2.sum(1) / math.radians(sigma_deg) ** 2)
    return np.column_stack([1e3 * np.sqrt(pos2.mean(1)), np.degrees(np.sqrt(yaw2.mean(1))), ll])


def self_tracks(st, rp) -> np.ndarray:
    """(T, nq): identify's simulator at the true coefficients (``true_theta``) from the tracked start."""
    truth = true_theta(st, rp)
    theta = torch.tensor([[truth[n] for n in rp.sim.names]], dtype=torch.float64)
    with torch.no_grad():
        x = rp.sim.simulate(theta, torch.as_tensor(rp.guess[:1]), len(rp.q))[0].numpy()
    return x[:, :rp.q.shape[1]].copy()


def profile(st, rp, factors: list[float], sigma_mm: float, sigma_deg: float) -> list[list[float]]:
    """[[floor mu, best tip mu, rms_mm, rms_deg, dll, dll_scaled], ...]: the floor mu's profile
    likelihood over ``factors`` x its truth, the tip mu profiled out over ``TIP_GRID`` (module docstring);
    dll against the profile's best point."""
    truth = true_theta(st, rp)
    floors = sorted({round(truth["floor.friction"] * f, 4) for f in [1.0] + list(factors)})
    values = [dict(truth, **{"floor.friction": m, "tip.friction": t}) for m in floors for t in TIP_GRID]
    r = _rollout_ll(st, rp, values, sigma_mm, sigma_deg).reshape(len(floors), len(TIP_GRID), 3)
    best = r[..., 2].argmax(1)
    rows = r[np.arange(len(floors)), best]                       # (F, 3) at each floor mu's best tip mu
    n = len(rp.q) * (2 if "unseen_yaw" in rp.extra["pusher"] else 3)
    scale = max(1.0, -2 * rows[:, 2].max() / n)                 # mean square whitened residual at the best
    top = rows[:, 2].max()
    return [[m, TIP_GRID[b], round(float(a), 3), round(float(c), 3), round(float(ll - top), 1),
             round(float((ll - top) / scale), 2)] for m, b, (a, c, ll) in zip(floors, best, rows)]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="pushed_box,pushed_box_strokes,pushed_cylinder")
    ap.add_argument("--frames", type=int, default=90, help="frames of the true tracks (identify's window)")
    ap.add_argument("--grid", default="0.5,0.7,0.8,0.9,1,1.1,1.2,1.5,2", help="factors x the true coefficient")
    ap.add_argument("--sweep", default="floor,tip", help="which coefficients to sweep (floor, tip, profile)")
    ap.add_argument("--slip", type=float, default=None, help="contact slip velocity (m/s); default the model's")
    ap.add_argument("--hz", type=float, default=None, help="simulator rate (Hz); default identify_push.PUSH_HZ")
    ap.add_argument("--tip-damping", type=float, default=None,
                    help="Hunt-Crossley damping of the tip contact (s/m); default identify_push.TIP_DAMPING")
    ap.add_argument("--sigma-mm", type=float, default=0.5, help="tracking noise on positions (mm)")
    ap.add_argument("--sigma-deg", type=float, default=0.5, help="tracking noise on yaw (deg)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--self", action="store_true",
                    help="compare against identify's own simulator at the truth instead of PyBullet's track")
    args = ap.parse_args(argv)
    factors = [float(v) for v in args.grid.split(",")]
    res = {}
    for name in args.cases.split(","):
        t0 = time.time()
        st, rp = push_problem(name, args.frames, args.seed, args.slip, args.hz, args.tip_damping)
        if args.self:
            rp.q = self_tracks(st, rp)
        r = {"names": list(rp.sim.names), "truth": true_theta(st, rp), "slip": float(rp.sim.model.slip_velocity),
             "hz": FPS * rp.sim.substeps}
        for w in args.sweep.split(","):
            r[w] = (profile(st, rp, factors, args.sigma_mm, args.sigma_deg) if w == "profile" else
                    sweep(st, rp, f"{w}.friction", factors, args.sigma_mm, args.sigma_deg))
            print(f"bench_push_friction: {name} {w}: {r[w]}", file=sys.stderr)
        r["seconds"] = round(time.time() - t0, 1)
        res[name] = r
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
