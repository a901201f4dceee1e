"""Track's check of the names of look-alike rods, over the whole track.

Segment names two parts of one rod kind (capsule or cylinder) but different lengths by their sizes
in one frame; where the longer one is half hidden there, it gets the shorter one's name and the
other the longer one's. Tracked, each is then followed with the other's shape: the kinematic tree
comes out right, but with the two names exchanged, and the twin with the wrong lengths.

Here, after the clip is tracked, each such pair (``rod_pairs``) whose bodies are found in all but
``MAX_LOST`` of the frames is judged on up to ``FRAMES`` frames where neither is lost, spread over the
clip: on the same rays (``_Tracker._observe`` around all bodies), the frame's truncated cost
(``gauss_newton_step``'s) with the shapes as named and with the two shapes exchanged, each settled
from the tracked poses (``_settle``: each rod moved along its axis within half the length difference,
then a few Gauss-Newton steps of the pair alone). Where the exchanged shapes cost less in at least
``MIN_WON`` of the judged frames and by ``MIN_GAIN`` of the named cost over them, the names are
exchanged and every frame's poses of the pair settled again with the exchanged shapes (``exchange``).
It reads ``FRAMES`` frames per rod pair and, where names are exchanged, the clip once more; it does
not track again, and leaves boxes alone (exchanging two boxes' names turns their frames, which a few
steps from the tracked poses do not find).
"""
from __future__ import annotations

import logging

import numpy as np
import torch

from vid2sim.models.render import Primitive
from vid2sim.models.render.align import gauss_newton_step

log = logging.getLogger(__name__)

RODS = ("capsule", "cylinder")
FRAMES = 8          # frames judged per pair, spread over those where neither body is lost
MIN_FRAMES = 4      # fewer judged frames than this: no verdict
MIN_WON = 0.75      # share of the judged frames the exchanged shapes must explain better
MIN_GAIN = 0.02     # their summed cost must be this share below the named one's
MIN_LENGTH_DIFF = 0.01   # m: rods whose lengths differ less are alike, their names untestable
MAX_LOST = 0.1      # a pair with a body lost in more than this share of the frames is not judged
STEPS = 4           # Gauss-Newton steps of the pair alone, from the tracked or shifted poses
SHIFTS = 7          # offsets along a rod's axis tried for its exchanged shape (0 among them)


def _length(p: Primitive) -> float:
    return 2.0 * p.half_length


def rod_pairs(prims: list[Primitive]) -> list[tuple[int, int]]:
    """Index pairs (m, k), m < k, of rods of one kind (``RODS``) whose lengths differ by at least
    ``MIN_LENGTH_DIFF``: the pairs whose names a wrong size can exchange."""
    rods = [m for m, p in enumerate(prims) if p.kind in RODS]
    return [(m, k) for i, m in enumerate(rods) for k in rods[i + 1:]
            if prims[m].kind == prims[k].kind and abs(_length(prims[m]) - _length(prims[k])) >= MIN_LENGTH_DIFF]


def judged_frames(lost: np.ndarray, pair: tuple[int, int], n: int = FRAMES) -> np.ndarray:
    """Up to n frame indices, evenly spread, where neither body of ``pair`` is lost (``lost`` (T, M))."""
    ok = np.flatnonzero(~lost[:, list(pair)].any(1))
    if len(ok) <= n:
        return ok
    return ok[np.unique(np.round(np.linspace(0, len(ok) - 1, n)).astype(int))]


def swapped(prims: list[Primitive], pair: tuple[int, int]) -> list[Primitive]:
    """``prims`` with the primitives of the two bodies of ``pair`` exchanged."""
    out = list(prims)
    m, k = pair
    out[m], out[k] = prims[k], prims[m]
    return out


def _cost(tracker, prims, T: torch.Tensor, obs) -> float:
    """The truncated cost of poses T (M, 4, 4) with ``prims`` on ``obs``, no body stepped."""
    return float(tracker.render(obs, T, prims).cost)


def _settle(tracker, prims: list[Primitive], was: list[Primitive], T: torch.Tensor, obs,
            pair: tuple[int, int]) -> tuple[torch.Tensor, float]:
    """Poses T (M, 4, 4) with the two bodies of ``pair`` settled for ``prims`` (a body whose rod
    was ``was`` long before): each moved along its axis by whichever of ``SHIFTS`` evenly spaced
    offsets within +-half the length change costs least (a rod tracked with a shorter shape may lie
    anywhere along the true one), then ``STEPS`` Gauss-Newton steps of the pair alone;
    -> (poses, cost), the lowest seen."""
    cfg = tracker.cfg
    best = _cost(tracker, prims, T, obs)
    for m in pair:
        d = 0.5 * abs(_length(prims[m]) - _length(was[m]))
        axis = T[m, :3, 2]
        T0 = T
        for shift in np.linspace(-d, d, SHIFTS) if d > 0 else ():
            if abs(shift) < 1e-9:
                continue
            Tc = T0.clone()
            Tc[m, :3, 3] = T0[m, :3, 3] + float(shift) * axis
            c = _cost(tracker, prims, Tc, obs)
            if c < best:
                best, T = c, Tc
    active = torch.zeros(len(prims), dtype=torch.bool)
    active[list(pair)] = True
    Tc = T
    for _ in range(STEPS):
        res = gauss_newton_step(prims, Tc, obs, gate=cfg.gates.gate_final_m, scale=cfg.noise.huber_m,
                                freespace_tol=cfg.noise.freespace_tol_m, w_depth=cfg.noise.w_depth,
                                w_silhouette=cfg.noise.w_silhouette, damping=cfg.steps.damping,
                                planar=tracker.planar, active=active)
        if float(res.cost) < best:
            best, T = float(res.cost), Tc
        Tc = res.T
    c = _cost(tracker, prims, Tc, obs)
    if c < best:
        best, T = c, Tc
    return T, best


def _frame_obs(tracker, rec, i: int, T: torch.Tensor):
    """The rays of frame i around the poses T (M, 4, 4), with colour labels where colour is used."""
    cfg, scene = tracker.cfg, tracker.scene
    scene.hidden = scene.hidden_of(i)
    rgb = rec.color(i) if rec.has_color and cfg.noise.w_color > 0 else None
    return tracker._observe(rec.depth(i), scene.roi(T), rgb, cfg.gates.max_rays)[0]


def evidence(tracker, rec, poses: np.ndarray, lost: np.ndarray, pair: tuple[int, int]) -> dict:
    """The pair's names judged on ``judged_frames``: per frame, the cost with the shapes as named and
    exchanged, each settled from the tracked poses (``poses`` (T, M, 4, 4), ``lost`` (T, M)).
    -> {"frames", "named", "exchanged" (per-frame costs), "won" (frames the exchange explains
    better), "gain" (1 - summed exchanged / summed named cost), "exchange" (bool: the verdict)}."""
    prims = tracker.scene.prims
    other = swapped(prims, pair)
    frames = judged_frames(lost, pair)
    named, exch = [], []
    for i in frames:
        T = torch.as_tensor(poses[i])
        obs = _frame_obs(tracker, rec, int(i), T)
        named.append(_settle(tracker, prims, prims, T, obs, pair)[1])
        exch.append(_settle(tracker, other, prims, T, obs, pair)[1])
    named, exch = np.array(named), np.array(exch)
    won = int((exch < named).sum())
    gain = 1.0 - float(exch.sum()) / max(float(named.sum()), 1e-9)
    verdict = len(frames) >= MIN_FRAMES and won >= MIN_WON * len(frames) and gain >= MIN_GAIN
    return {"frames": frames, "named": named, "exchanged": exch, "won": won, "gain": gain, "exchange": verdict}


def exchange(tracker, rec, poses: np.ndarray, lost: np.ndarray, pair: tuple[int, int]) -> np.ndarray:
    """Poses (T, M, 4, 4) with the pair's bodies settled, frame by frame, for their exchanged shapes
    (``_settle`` from the tracked poses; a frame where either is lost keeps them as tracked)."""
    prims = tracker.scene.prims
    other = swapped(prims, pair)
    out = poses.copy()
    for i in range(len(poses)):
        if lost[i, list(pair)].any():
            continue
        T = torch.as_tensor(poses[i])
        obs = _frame_obs(tracker, rec, i, T)
        T_new = _settle(tracker, other, prims, T, obs, pair)[0]
        out[i, list(pair)] = T_new[list(pair)].numpy()
    return out


def check_names(tracker, rec, poses: np.ndarray, lost: np.ndarray,
                shape_names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Every rod pair's names judged over the track (``evidence``), unless a body of it is lost in over
    ``MAX_LOST`` of the frames (its fit says little about its shape); the pairs whose exchange is clear,
    most evident first and each body in one exchange at most, get their shape names exchanged and their
    poses settled again (``exchange``).
    -> (poses (T, M, 4, 4), shape names (M,))."""
    scene = tracker.scene
    pairs = [p for p in rod_pairs(scene.prims) if lost[:, list(p)].mean(0).max() <= MAX_LOST]
    verdicts = [(pair, evidence(tracker, rec, poses, lost, pair)) for pair in pairs]
    names = list(shape_names)
    done: set[int] = set()
    for pair, ev in sorted(verdicts, key=lambda v: -v[1]["gain"]):
        m, k = pair
        log.debug("track: names %s/%s: exchanged shapes explain %d of %d frames better, cost %.1f -> %.1f",
                  names[m], names[k], ev["won"], len(ev["frames"]), ev["named"].sum(), ev["exchanged"].sum())
        if not ev["exchange"] or m in done or k in done:
            continue
        poses = exchange(tracker, rec, poses, lost, pair)
        log.info("track: %s and %s exchanged: the other's shape explains the depth better in %d of %d frames "
                 "(cost %.1f -> %.1f, %.0f %% lower)", names[m], names[k], ev["won"], len(ev["frames"]),
                 ev["named"].sum(), ev["exchanged"].sum(), 100 * ev["gain"])
        names[m], names[k] = names[k], names[m]
        done |= {m, k}
    return poses, names
