"""Track stage: the 6-D world pose of every segmented part in every frame.

Analysis by synthesis (paper §4.3.3.1-2, on the CPU): the known primitives are
rendered in the recording's camera (``vid2sim.models.render``, closed-form ray casting,
all bodies together so occlusions are right) and, frame by frame, their poses are
moved by damped Gauss-Newton until the render explains the observation
(``models/render/align.py``): rendered-vs-observed depth along each ray the part
covers, point-to-surface distances of depth points it does not cover yet, and
silhouette residuals where the render and the observation disagree about which part
(if any) a ray sees, by depth (seen through) and, where colour is given, by colour
(chromaticity of each part in the segmentation frame, for the parts whose own pixels there take
it: ``TrackScene.set_background``). Residuals are whitened by the
depth noise (sigma = k z^2, k measured from the recording's static pixels unless set:
``datasets/noise.py``) and Huber-weighted.

- Initial poses (segmentation frame): each mask's point cloud (its pixels within the part's own
  size in depth of the densest depth: a mask bled onto the wall behind is not the part's,
  ``track_fit.depth_cluster``) is fitted by its primitive from several orientation
  hypotheses (principal axes and world axes, every assignment to a box's edges), keeping
  the best; a sphere needs no orientation, a capsule/cylinder only its axis (roll about it
  is unobservable and stays put: neither the pose steps nor the prediction's velocity carry
  a spin about it, ``free_basis``).
  On depth cleaner than RealSense's a second start from a coarse pass (``_start_poses``)
  competes, body by body. Then a mask's other fits (a box with its sides swapped, seen on one
  face) are judged in the whole frame (``track_fit.other_placements``). A body whose start shows it
  on less than half its mask's pixels is fitted again to parts of its mask (``track_start.py``).
- The static background is the segmentation frame's depth away from the parts and, where they hid it, the
  frames' once they have gone (``TrackScene.reveal_background``: the floor a part uncovers does not pull it back).
- Later frames start from a constant-acceleration prediction (``track_motion.py``; constant velocity for a part
  moving under ``prior.stop_check_*`` a frame, where the acceleration would make a barely seen turn swing) that is
  also a weak prior (``prior.prior_m``, ``prior.prior_rad``), forward from the segmentation frame,
  then backward to frame 0. The frames next to it (no velocity yet) start from the parts at rest
  and from each part moved as its image moved (``track_shift.py``), per body whichever aligns to
  the lower cost. A body that finds too few of its points widens its gate.
- A body whose visible pixels vanish (left the view, fully occluded) or whose render is no longer supported
  by the depth (both on the pixels it is seen on, not those a nearer surface hides: ``StepResult.seen``),
  or that lies mostly inside another body (``track_overlap.py``), is flagged ``lost`` and held at its last good pose
  instead of being dragged by its neighbours' points; the per-frame ``residual`` (m)
  counts a lost body at the full gate. With ``lost.reacquire`` a lost body is looked for
  again, each frame, among the depth points no body explains near its last pose, and aligned
  again from where its motion and its image since its last good frame say it went
  (``track_refind.py``). A found body whose fit turns much worse than in its last frames (residual,
  pixels it is seen on) is aligned again from its last good frame's pose, motion and image
  (``track_recheck.py``: a part that landed or bounced, left where the prediction took it).
- After the clip, two rods of one kind and different lengths whose exchanged shapes explain the tracked
  frames' depth clearly better exchange names and are settled for their new shapes (``track_names.py``).
- ``planar`` restricts every body to world x, z translation and rotation about world y.

The settings are in ``track_config.py``, the camera, background and regions of interest in
``track_scene.py``, the mask fits in ``track_fit.py``, the overlay video in ``track_overlay.py``.

RGB-only recordings are tracked in the image plane by ``track_planar.py`` (corners and
silhouette registration, 3 degrees of freedom per body; the same ``poses.npz``).
"""
from __future__ import annotations

import logging
import math
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import torch
from tqdm import tqdm

from vid2sim.datasets.noise import estimate_depth_noise
from vid2sim.datasets.recording import Recording
from vid2sim.datasets.shapes import Shape
from vid2sim.models.render import Primitive
from vid2sim.models.render.primitives import sdf_and_grad
from vid2sim.models.render.align import Observation, gauss_newton_step, relevant_rays
from vid2sim.pipeline.artifacts import PoseTracks, Segmentation
from vid2sim.pipeline.track_config import TrackConfig, TrackGates, TrackLost, TrackNoise, TrackPrior, TrackSteps  # noqa: F401
from vid2sim.pipeline.track_fit import FLOAT, depth_cluster, fit_primitive, other_placements, own_pixels
from vid2sim.pipeline.track_motion import Motion
from vid2sim.pipeline.track_names import check_names
from vid2sim.pipeline.track_overlay import write_overlays
from vid2sim.pipeline.track_scene import TrackScene
from vid2sim.pipeline.track_overlap import NESTED_SHARE, inside_shares, interior_samples
from vid2sim.pipeline.track_recheck import FitHistory, recheck, relative
from vid2sim.pipeline.track_refind import LastSeen, colour_of, refind
from vid2sim.pipeline.track_shift import first_step, mix, part_shifts
from vid2sim.pipeline.track_start import mask_observation, refit_starts
from vid2sim.pipeline.track_support import inlier_tolerances

log = logging.getLogger(__name__)


def body_names(shape_names: list[str]) -> list[str]:
    """Library shape names, suffixed _0, _1 ... where a shape appears more than once."""
    counts = {n: shape_names.count(n) for n in shape_names}
    seen: dict[str, int] = {}
    out = []
    for n in shape_names:
        if counts[n] > 1:
            out.append(f"{n}_{seen.get(n, 0)}")
            seen[n] = seen.get(n, 0) + 1
        else:
            out.append(n)
    return out


def _ray_sample(edge: np.ndarray, budget: int, edge_share: float) -> tuple[np.ndarray, np.ndarray]:
    """A fixed budget of rays out of N: up to ``edge_share * budget`` of the ``edge`` (N,) rays
    and the rest of the budget from the others, each class evenly strided (in raster order,
    fractional stride); returns the kept indices (K,) and their weights (K,), the number of
    rays of its class each kept ray stands for (so the weighted sample sums like all N)."""
    out_i, out_w = [], []
    idx_e, idx_o = np.flatnonzero(edge), np.flatnonzero(~edge)
    n_e = min(len(idx_e), int(round(edge_share * budget)))
    for idx, n in ((idx_e, n_e), (idx_o, budget - n_e)):
        n = min(n, len(idx))
        if n <= 0:
            continue
        step = len(idx) / n
        out_i.append(idx[(np.arange(n) * step).astype(np.int64)])
        out_w.append(np.full(n, step))
    keep = np.concatenate(out_i)
    order = np.argsort(keep)
    return keep[order], np.concatenate(out_w)[order]


def _initial_poses(cfg: TrackConfig, scene: TrackScene, depth: np.ndarray, seg: Segmentation,
                   others: list | None = None) -> torch.Tensor:
    """(M, 4, 4) world poses at the segmentation frame from each mask's point cloud; ``others``, if
    given, receives per body its fits (4, 4) worth trying: the returned one, then up to
    ``start_alternatives`` others, best fit first, fit cost within ``start_ratio`` of the best's."""
    poses = []
    for k, prim in enumerate(scene.prims):
        # the mask's pixels at its part's depth: a mask that bled over the part's edge onto a wall
        # metres behind it would drag the fit there (``depth_cluster``); a mask drawn over nested parts
        # (the carcass's over its door) is fitted without their pixels (``own_pixels``)
        own = own_pixels(seg.masks, k)
        near = depth_cluster(depth, own, 2 * prim.bounding_radius, scene.sigma)
        mask = (cv2.erode(own.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0) & near
        if mask.sum() < 10:
            mask = near
        if mask.sum() < 3:
            raise ValueError(f"segmentation instance {k} ({seg.shape_names[k]}) has no depth readings to start from")
        obs, _ = mask_observation(cfg, scene, depth, seg.masks[k] > 0, mask)
        fits: list = []
        cost, T = fit_primitive(cfg, prim, obs, fits)
        poses.append(T)
        if others is not None:
            alt = sorted((c, i) for i, (c, S) in enumerate(fits) if S is not T and c <= cfg.start_ratio * cost)
            others.append([T] + [fits[i][1] for _, i in alt[:cfg.start_alternatives]])
    return torch.stack(poses)


def _start_poses(tracker: "_Tracker", rec: Recording, seg: Segmentation) -> torch.Tensor:
    """(M, 4, 4) poses at the segmentation frame: the masks' primitive fits, aligned.

    On depth cleaner than ``noise.start_noise_k`` a second start is made as if the noise were
    that (wider gates and tolerances: a coarse pass), then aligned at the measured noise, and
    the start whose aligned poses explain the frame better is kept, body by body (each start
    alone fails on some scenes: docs/decisions.md, track).
    """
    cfg, scene, planar = tracker.cfg, tracker.scene, tracker.planar
    d0 = rec.depth(seg.frame)
    rgb = rec.color(seg.frame) if rec.has_color and cfg.noise.w_color > 0 else None
    others: list = []
    T = _initial_poses(cfg, scene, d0, seg, others)
    if cfg.noise.depth_noise_k >= cfg.noise.start_noise_k:
        T = other_placements(tracker, d0, rgb, T, others)
        return refit_starts(tracker, d0, rgb, T, seg.masks, list(seg.shape_names))
    coarse_cfg = replace(cfg, noise=replace(cfg.noise, depth_noise_k=cfg.noise.start_noise_k))
    coarse = TrackScene(rec, scene.prims, coarse_cfg)
    coarse.set_background(d0, seg.masks, rec.color(seg.frame) if rec.has_color else None)
    coarse_others: list = []
    Tc = _initial_poses(coarse_cfg, coarse, d0, seg, coarse_others)
    others = [mine + theirs for mine, theirs in zip(others, coarse_others)]   # each pass's fits are worth trying
    Tc = _Tracker(coarse_cfg, coarse, planar).frame(d0, Tc, Tc, use_prior=False, rgb=rgb)[0]
    starts = []
    for T0 in (T, Tc):  # two rounds of steps: a start some centimetres off needs more than one
        for _ in range(2):
            T0 = tracker.frame(d0, T0, T0, use_prior=False, rgb=rgb)[0]
        starts.append(T0)
    cost = tracker.cost_fn(d0, rgb, starts, cfg.gates.max_rays)
    M = len(scene.prims)
    # Each start can be right for some bodies only: from the better start, take each body's pose
    # from the other where that lowers the cost of the whole frame, then align once more.
    costs = [cost(Ts) for Ts in starts]
    best = int(costs[1] < costs[0])
    T, swapped, c = mix(cost, starts[best], starts[1 - best], range(M), costs[best])
    log.info("track: start poses: cost %.0f at the measured noise, %.0f after a coarse pass; kept the %s, with %s "
             "from the other (cost %.0f)", costs[0], costs[1], ("first", "second")[best],
             [seg.shape_names[m] for m in np.flatnonzero(swapped)] or "no body", c)
    T = tracker.frame(d0, T, T, use_prior=False, rgb=rgb)[0] if swapped.any() else T
    T = other_placements(tracker, d0, rgb, T, others)
    return refit_starts(tracker, d0, rgb, T, seg.masks, list(seg.shape_names))


class _Tracker:
    def __init__(self, cfg: TrackConfig, scene: TrackScene, planar: bool):
        self.cfg, self.scene, self.planar = cfg, scene, planar
        self.samples = [interior_samples(p) for p in scene.prims]
        self.nested: np.ndarray | None = None   # (M, M) bool pairs that overlap at the start: not judged (``inside``)
        self.inlier_tol = np.full(len(scene.prims), cfg.lost.inlier_m)   # (M,) m: support tolerance (track_support.py)

    def judge_overlaps(self, T_start: torch.Tensor) -> None:
        """From now on, a body mostly inside another (``lost.inside_max``) is lost, except for pairs
        already sharing some volume at the start poses T_start (M, 4, 4): a drawer in its carcass. The
        lost test's support tolerance is set at the start depths too (``track_support.py``)."""
        self.inlier_tol = inlier_tolerances(self.cfg, self.scene, T_start)
        share = inside_shares(self.scene.prims, T_start, self.samples)
        self.nested = (share > NESTED_SHARE) | (share.T > NESTED_SHARE)

    def inside(self, T: torch.Tensor, support: np.ndarray) -> np.ndarray:
        """(M,) bool bodies whose volume lies mostly (over ``lost.inside_max``) inside another body's at
        poses T: rigid parts cannot interpenetrate, so one of the two is wrong (a part slid onto its
        neighbour's face explains that neighbour's points); of two such, the one whose render the depth
        supports less (``support`` (M,), the share of its pixels that support it)."""
        M = len(T)
        out = np.zeros(M, bool)
        if self.nested is None or self.cfg.lost.inside_max <= 0 or M < 2:
            return out
        share = inside_shares(self.scene.prims, T, self.samples)
        for m in range(M):
            for k in range(M):
                if k != m and not self.nested[m, k] and share[m, k] > self.cfg.lost.inside_max:
                    both = share[k, m] > self.cfg.lost.inside_max
                    out[k if both and support[k] < support[m] else m] = True
        return out

    def _observe(self, depth: np.ndarray, roi: np.ndarray, rgb: np.ndarray | None, max_rays: int,
                 reach_of: torch.Tensor | None = None) -> tuple[Observation, np.ndarray]:
        """The rays of ``roi`` (coarser where it holds more than ``max_rays`` pixels: big parts, a
        cabinet filling the view, need no more rays than small ones to be pinned down), only those
        within reach of the poses ``reach_of`` if given, with colour labels where colour is used."""
        cfg, scene = self.cfg, self.scene
        stride = max(cfg.gates.stride, math.ceil(math.sqrt(roi.sum() / max(max_rays, 1))))
        obs, flat = scene.observe(depth, roi, stride=stride)
        if reach_of is not None:
            keep = relevant_rays(scene.prims, reach_of, obs, cfg.gates.reach_m)
            obs, flat = obs.subset(keep), flat[keep.numpy()]
        if 0 < cfg.gates.ray_budget < len(flat):
            keep, weight = _ray_sample(scene.edges(depth, flat), cfg.gates.ray_budget, cfg.gates.edge_share)
            obs, flat = obs.subset(torch.as_tensor(keep)), flat[keep]
            obs.weight = torch.as_tensor(weight, dtype=FLOAT)
        if rgb is not None and scene.body_chroma is not None:
            obs.label = torch.as_tensor(scene.labels(rgb, flat))
            if scene.hidden is not None:   # an actuator's colour says nothing about the parts
                obs.label[torch.as_tensor(scene.hidden.reshape(-1)[flat])] = -2
        return obs, flat

    def cost_fn(self, depth: np.ndarray, rgb: np.ndarray | None, poses: list[torch.Tensor], max_rays: int):
        """cost(T) -> float: the frame's fixed, truncated objective (``gauss_newton_step``'s cost)
        of poses T on the rays around all of ``poses``, so that poses can be compared."""
        obs, _ = self._observe(depth, np.logical_or.reduce([self.scene.roi(T) for T in poses]), rgb, max_rays)
        return lambda T: self.render(obs, T).cost

    def stopped(self, depth: np.ndarray, rgb: np.ndarray | None, T_pred: torch.Tensor, T_prev: torch.Tensor,
                velocity: torch.Tensor) -> np.ndarray:
        """(M,) bool: fast bodies (``stop_check_*``) whose last pose explains this frame better than
        their predicted motion (a part that hit something and stopped). Judged on an
        eighth of the frame's rays: it runs on most frames of a swinging mechanism, and the poses
        it tells apart are tens of millimetres apart."""
        cfg = self.cfg
        fast = (velocity[:, :3].norm(dim=1) > cfg.prior.stop_check_m) | (velocity[:, 3:].norm(dim=1) > cfg.prior.stop_check_rad)
        if not bool(fast.any()):
            return np.zeros(len(fast), bool)
        cost = self.cost_fn(depth, rgb, [T_pred, T_prev], cfg.gates.max_rays // 8)
        return mix(cost, T_pred, T_prev, np.flatnonzero(fast.numpy()), cost(T_pred))[1]

    def _widen_gates(self, gate: torch.Tensor, res, shrink: float) -> bool:
        """Update each body's gate (M,) in place after a step: a body whose render finds few of its
        points within the gate is far from its prediction (fast motion, bad velocity) and doubles
        its gate (up to ``gate_max_m``); the others shrink it by ``shrink`` towards ``gate_final_m``.
        Returns whether some body widened its gate (is searching)."""
        cfg = self.cfg
        searching = False
        for m in range(len(gate)):
            visible = int(res.seen(m).sum())
            assigned = int((res.assigned == m).sum())
            if visible >= cfg.lost.lost_min_pixels and assigned < 0.5 * visible and gate[m] < cfg.gates.gate_max_m:
                gate[m] = min(2 * float(gate[m]), cfg.gates.gate_max_m)
                searching = True
            else:
                gate[m] = max(float(gate[m]) - shrink, cfg.gates.gate_final_m)
        return searching

    def render(self, obs: Observation, T: torch.Tensor, prims: list | None = None):
        """``gauss_newton_step``'s render of poses T (M, 4, 4) of ``prims`` (default the scene's) on ``obs``
        at the final gate with no body stepped: its cost, assignments and visibility (a frame's last look)."""
        cfg, prims = self.cfg, self.scene.prims if prims is None else prims
        return gauss_newton_step(prims, T, obs, gate=cfg.gates.gate_final_m, scale=cfg.noise.huber_m,
                                 freespace_tol=cfg.noise.freespace_tol_m, damping=cfg.steps.damping,
                                 planar=self.planar, active=torch.zeros(len(prims), dtype=torch.bool))

    def _axis_search(self, obs: Observation, T: torch.Tensor, res):
        """Poses T (M, 4, 4) with each elongated body moved along its long axis in ``gate_final_m``
        steps (up to ``steps.axis_search`` each way) while the frame's cost at the final gate falls,
        and the final render there. A part slid along its own long axis has a cost nearly flat
        there: only its end faces pin that direction, and the points past a far end lie outside
        the final gate."""
        cfg, scene = self.cfg, self.scene
        cost = float(res.cost)
        moved = False
        for m, axis in enumerate(scene.long_axes):
            if axis is None:
                continue
            for sign in (1.0, -1.0):
                step = sign * cfg.gates.gate_final_m * (T[m, :3, :3] @ axis)
                went = 0
                while went < cfg.steps.axis_search:
                    Tc = T.clone()
                    Tc[m, :3, 3] += step
                    c = float(self.render(obs, Tc).cost)
                    if not c < cost:
                        break
                    T, cost, went, moved = Tc, c, went + 1, True
                if went:
                    break
        return (T, self.render(obs, T)) if moved else (T, res)

    def frame(self, depth: np.ndarray, T0: torch.Tensor, T_hold: torch.Tensor,
              use_prior: bool = True, rgb: np.ndarray | None = None) -> tuple:
        """Align all bodies to one depth frame from ``T0`` (also the motion prior's mean, unless
        ``use_prior`` is off: no velocity yet); lost bodies fall back to ``T_hold``. Returns the poses
        (M, 4, 4), lost (M,) bool, each body's residual (M,) (rms distance of its depth points to its
        surface, m; ``gate_final_m`` where lost), the pixels it is seen on (M,, from the rays) and the
        rays' render (flat indices, visible body)."""
        cfg, scene = self.cfg, self.scene
        M = len(scene.prims)
        roi = scene.roi(T0)
        obs, flat = self._observe(depth, roi, rgb, cfg.gates.max_rays, reach_of=T0)
        area = max(cfg.gates.stride, math.ceil(math.sqrt(roi.sum() / max(cfg.gates.max_rays, 1)))) ** 2  # px per ray
        T = T0
        n = max(cfg.iterations, 1)
        gate = torch.full((M,), cfg.gates.gate_m, dtype=FLOAT)
        shrink = (cfg.gates.gate_m - cfg.gates.gate_final_m) / max(n - 1, 1)
        best = None
        stall = 0   # steps in a row whose input poses cost no less than the best so far
        active = torch.ones(M, dtype=torch.bool)
        for it in range(n + max(cfg.steps.search_iterations, cfg.steps.travel_iterations)):
            res = gauss_newton_step(scene.prims, T, obs, gate=gate, scale=cfg.noise.huber_m, freespace_tol=cfg.noise.freespace_tol_m,
                                    w_depth=cfg.noise.w_depth, w_silhouette=cfg.noise.w_silhouette, damping=cfg.steps.damping,
                                    planar=self.planar, T_prior=T0 if use_prior and cfg.prior.prior_m > 0 else None,
                                    prior_sigma=(cfg.prior.prior_m, cfg.prior.prior_rad), active=active,
                                    step_scale=cfg.steps.relax if it >= cfg.steps.relax_after else 1.0)
            improved = best is None or res.cost < best[0]
            if improved:
                best = (res.cost, T, res)
            stall = 0 if improved else stall + 1
            T = res.T
            if cfg.steps.freeze_converged:  # converged bodies keep their pose; the others go on
                active &= res.body_step >= cfg.steps.converged_step
                if not bool(active.any()):
                    break
            searching = self._widen_gates(gate, res, shrink)
            # Extra steps while a body searches (above) or still travels (a fast swing started
            # from a stale velocity: the double pendulum segmented mid-fall, tracked back to
            # frame 0 and on from zero velocity, lost 20-60 mm for 6 frames with 8 steps) and the
            # cost still falls; steps that no longer lower it cycle between poses near the optimum.
            extend = (searching and it < n - 1 + cfg.steps.search_iterations) or \
                (res.step_norm > cfg.steps.travel_step and improved and it < n - 1 + cfg.steps.travel_iterations)
            stalled = 0 < cfg.steps.patience <= stall
            if not extend and (res.step_norm < cfg.steps.converged_step or it >= n - 1 or stalled):
                break
        # Final render at the converged poses: support and visibility decide "lost".
        res = self.render(obs, T)
        if cfg.steps.keep_best and best[0] < res.cost:  # a later step cycled away from a better pose
            T, res = best[1], best[2].with_gate(torch.full((M,), cfg.gates.gate_final_m, dtype=FLOAT))
        if cfg.steps.axis_search > 0 and not self.planar:
            T, res = self._axis_search(obs, T, res)
        lost = np.zeros(M, bool)
        per_body = np.zeros(M)
        pixels = np.zeros(M, int)
        supported = np.zeros(M)
        for m in range(M):
            visible = int(res.seen(m).sum())
            pixels[m] = visible * area
            support = int(((res.assigned == m) & (res.point_res < self.inlier_tol[m])).sum())
            lost[m] = visible < cfg.lost.lost_min_pixels or support < cfg.lost.lost_min_support * visible
            supported[m] = support / max(visible, 1)
        inside = self.inside(T, supported)
        lost |= inside
        if lost.any() and log.isEnabledFor(logging.DEBUG):
            log.debug("track: lost %s: visible %s, supported %s, inside another %s", np.flatnonzero(lost).tolist(),
                      [int(res.seen(m).sum()) for m in range(M)], np.round(supported, 2).tolist(),
                      np.flatnonzero(inside).tolist())
        for m in range(M):
            r = res.point_res[res.assigned == m]
            per_body[m] = cfg.gates.gate_final_m if lost[m] or r.numel() == 0 else float(r.square().mean().sqrt())
        if lost.any():
            T = T.clone()
            T[torch.as_tensor(lost)] = T_hold[torch.as_tensor(lost)]
            if cfg.lost.reacquire:
                for m in np.flatnonzero(lost):
                    found = self.reacquire(depth, T, lost, m)
                    if found is not None:
                        T[m], lost[m], per_body[m], pixels[m] = found
        return T, lost, per_body, pixels, (flat, res.visible.numpy())

    def reacquire(self, depth: np.ndarray, T: torch.Tensor, lost: np.ndarray, m: int):
        """Search for lost body m among the depth points no tracked body explains (none within
        ``gate_final_m`` of its surface), near where it was.

        Returns (pose, False, residual, pixels it is seen on) when a fit there is supported by the depth again (by all
        the depth points under its render, and by at least ``lost_min_pixels`` of those it was
        fitted to), else None.
        """
        cfg, scene = self.cfg, self.scene
        prim = scene.prims[m]
        reach = prim.bounding_radius * cfg.lost.reacquire_reach
        roi = _roi_of(scene, T[m, :3, 3].numpy(), reach)
        obs, flat = scene.observe(depth, roi, stride=2)
        seen = obs.foreground & (obs.depth > 0)
        pts = obs.points
        fg = seen & ((pts - T[m, :3, 3]).norm(dim=-1) < reach)
        for k, other in enumerate(scene.prims):  # drop points that a tracked body explains
            if k != m and not lost[k]:
                R, t = T[k, :3, :3], T[k, :3, 3]
                fg &= sdf_and_grad(other, (pts - t) @ R)[0].abs() > cfg.gates.gate_final_m
        if int(fg.sum()) < cfg.lost.lost_min_pixels:
            return None
        obs.foreground = fg
        cost, T_new = fit_primitive(cfg, prim, obs)
        if T_new is None:  # no orientation hypothesis left a finite residual: nothing re-acquired
            return None
        # supported by every depth point it renders over, those it shares with a neighbour too (a ball on an arm's tip)
        obs.foreground = seen
        res = gauss_newton_step([prim], T_new[None], obs, gate=cfg.gates.gate_final_m, active=torch.zeros(1, dtype=torch.bool))
        visible = int(res.seen(0).sum())
        ok = (res.assigned == 0) & (res.point_res < self.inlier_tol[m])
        support, own = int(ok.sum()), int((ok & fg).sum())   # own: among the points it was fitted to
        if visible * 4 < cfg.lost.lost_min_pixels or support < max(cfg.lost.lost_min_support, 0.5) * visible \
                or own < cfg.lost.lost_min_pixels:
            return None
        r = res.point_res[res.assigned == 0]
        return T_new, False, float(r.square().mean().sqrt()), visible * 4   # rays at stride 2


def _roi_of(scene: TrackScene, c: np.ndarray, radius: float) -> np.ndarray:
    """(H, W) bool image box of the ball of ``radius`` about world point ``c``."""
    cam = scene.cam
    corners = c + radius * np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], float)
    uv, z = cam.project(corners)
    out = np.zeros((cam.height, cam.width), bool)
    if np.any(z <= 1e-3):
        return out
    x0, y0 = np.floor(uv.min(0)).astype(int)
    x1, y1 = np.ceil(uv.max(0)).astype(int) + 1
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, cam.width), min(y1, cam.height)
    if x0 < x1 and y0 < y1:
        out[y0:y1, x0:x1] = True
    return out


def _with_depth_noise(cfg: TrackConfig, rec: Recording, seg: Segmentation) -> TrackConfig:
    """``cfg`` with ``noise.depth_noise_k`` (1/m) measured from the recording when it is unset:
    static pixels away from the segmented parts, else the parts' own surfaces."""
    if cfg.noise.depth_noise_k is not None:
        return cfg
    fg = cv2.dilate(seg.masks.any(0).astype(np.uint8), np.ones((31, 31), np.uint8)) > 0
    noise = estimate_depth_noise(rec, exclude=fg, surface=seg.masks, surface_frame=seg.frame)
    log.info("track: depth noise k = %.5f /m (sigma %.1f mm at 1 m, %.1f mm at 2 m, never below %.1f mm; "
             "from %s: %d pixels, %d frame pairs)", noise.k, 1000 * noise.k, 4000 * noise.k,
             1000 * cfg.noise.depth_noise_floor_m, noise.source, noise.pixels, noise.pairs)
    return replace(cfg, noise=replace(cfg.noise, depth_noise_k=noise.k))


def _align_frame(tracker: _Tracker, rec: Recording, seg: Segmentation, seed: tuple, i: int, T_prev: torch.Tensor,
                 seen: LastSeen, motion: Motion, first: bool, history: FitHistory) -> tuple:
    """Frame i aligned from ``motion``'s prediction from ``T_prev`` (M, 4, 4) (fast parts that stopped
    start at rest); the frames next to the segmentation frame (no velocity yet) also from where the
    images moved the parts (``track_shift.first_step``; ``seed``: that frame's depth and colour or None). Lost
    bodies fall back to their last good pose (``seen``) and, with ``lost.reacquire``, are looked for
    again from their motion and image since (``track_refind.py``); bodies whose fit is much worse than
    in their last frames (``history``) from more starts (``track_recheck.py``). Returns
    ``_Tracker.frame``'s (T, lost, residual, pixels, vis) and the colour frame read (or None)."""
    cfg, scene = tracker.cfg, tracker.scene
    scene.hidden = scene.hidden_of(i)
    depth = rec.depth(i)
    rgb = rec.color(i) if rec.has_color and cfg.noise.w_color > 0 else None
    T0 = motion.predict(T_prev)
    if not first and cfg.prior.stop_check_m > 0:
        stop = torch.as_tensor(tracker.stopped(depth, rgb, T0, T_prev, motion.velocity))
        if stop.any():
            T0 = T0.clone()
            T0[stop] = T_prev[stop]
            motion.stop(stop)
    if abs(i - seg.frame) == 1 and cfg.prior.first_reach_m > 0:   # no velocity yet: where did the parts go?
        shift = part_shifts(scene, (seed, (depth, colour_of(rec, i, rgb))), seg.masks, cfg.prior.first_reach_m)
        out = first_step(tracker, depth, rgb, T0, seen.pose, shift)
    else:
        out = tracker.frame(depth, T0, seen.pose, use_prior=not first, rgb=rgb)
    if out[1].any() and cfg.lost.reacquire:
        out = refind(tracker, rec, seen, i, depth, rgb, out)
    if cfg.lost.recheck_ratio > 0:
        out = recheck(tracker, rec, history, i, depth, rgb, out)
    return (*out, rgb)


def run(cfg: TrackConfig, rec: Recording, seg: Segmentation, out_dir: Path) -> PoseTracks:
    """Track every segmented instance through ``rec``; writes the overlay video into ``out_dir``."""
    from vid2sim.pipeline.actuators import explain_actuators, fill_hidden, hidden_pixels

    out_dir = Path(out_dir)
    seg = seg.for_fits()   # the masks as the depth drew them, not their rims refined on colour (docs/decisions.md)
    rec = explain_actuators(rec)   # known actuators' pixels: no reading, colour undecided (scene.hidden)
    if rec.shapes is None:
        raise ValueError(f"{rec.path}: the recording has no shapes.json, so there are no shapes to track")
    missing = [n for n in seg.shape_names if n not in rec.shapes]
    if missing:
        raise ValueError(f"segmentation names shape(s) {missing} that are not in {rec.path}/shapes.json")
    shapes: list[Shape] = [rec.shapes[n] for n in seg.shape_names]
    names = body_names(list(seg.shape_names))
    if not rec.has_depth:
        if cfg.planar == "off":
            raise ValueError(f"{rec.path}: an RGB-only recording is tracked in planar mode only (track.planar=off)")
        from vid2sim.pipeline import track_planar

        return track_planar.run(cfg, rec, seg, shapes, names, out_dir)
    prims = [Primitive.from_shape(s) for s in shapes]
    planar = cfg.planar == "on"  # depth recordings: 6-D unless asked
    cfg = _with_depth_noise(cfg, rec, seg)
    scene = TrackScene(rec, prims, cfg)
    d0 = fill_hidden(rec.depth(seg.frame), hidden_pixels(rec, seg.frame))
    c0 = rec.color(seg.frame) if rec.has_color else None
    scene.set_background(d0, seg.masks, c0)
    scene.hidden_of = lambda i: hidden_pixels(rec, i)
    scene.hidden = scene.hidden_of(seg.frame)
    tracker = _Tracker(cfg, scene, planar)
    T_init = _start_poses(tracker, rec, seg)
    # the background excludes the parts as fitted, not only as masked; the start is aligned again on it
    cover = scene.silhouettes(T_init)
    scene.set_background(d0, seg.masks, c0, cover=cover)
    scene.reveal_background(rec, d0, cover)
    T_init = tracker.frame(rec.depth(seg.frame), T_init, T_init, use_prior=False,
                           rgb=c0 if cfg.noise.w_color > 0 else None)[0]
    tracker.judge_overlaps(T_init)
    Tn, M = rec.num_frames, len(prims)
    poses = np.zeros((Tn, M, 4, 4))
    lost = np.zeros((Tn, M), bool)
    residual = np.zeros(Tn)
    render_cache: dict[int, tuple] = {}
    order = [list(range(seg.frame, Tn)), list(range(seg.frame - 1, -1, -1))]
    with tqdm(total=Tn, desc="track", unit="frame", leave=False) as bar:
        for frames in order:
            if not frames:
                continue
            T_prev = T_init if frames[0] == seg.frame else torch.as_tensor(poses[seg.frame])
            motion = Motion.of(prims, planar, cfg.prior)
            seen = LastSeen(T_prev, seg.frame, seg.masks)
            was_lost = torch.zeros(M, dtype=torch.bool)
            first, history = True, FitHistory(T_prev, seg.frame)
            for i in frames:
                T, lost_i, r, px, vis, rgb = _align_frame(tracker, rec, seg, (d0, c0), i, T_prev, seen, motion, first,
                                                      history)
                poses[i], lost[i], residual[i] = T.numpy(), lost_i, float(np.mean(r))
                if cfg.overlay and len(render_cache) < cfg.max_overlay_frames:
                    render_cache[i] = (*vis, rgb)   # the colour already read: not read again for the video
                keep = torch.as_tensor(~lost_i)
                if i != seg.frame:  # no velocity across the seed frame's own re-alignment (not a motion)
                    motion.update(T, T_prev, keep & ~was_lost)  # a re-acquired body's jump from its held pose is no motion
                seen.update(i, T, ~lost_i & ~was_lost.numpy(), motion.velocity)
                seen.update(i, T, ~lost_i & was_lost.numpy(), seen.velocity)   # re-found: its velocity kept
                history.update(cfg, i, T, relative(cfg, scene, T, r), px, lost_i, motion.velocity)
                was_lost = ~keep
                first = False
                T_prev = T
                bar.update(1)
    shape_names = list(seg.shape_names)
    if cfg.check_names:   # look-alike rods named by one frame's sizes: judged on the whole track
        poses, shape_names = check_names(tracker, rec, poses, lost, shape_names)
        names = body_names(shape_names)
    nlost = lost.sum(0)
    for m in range(M):
        if nlost[m]:
            log.warning("track: %s lost in %d of %d frames (held at its last good pose there)", names[m], nlost[m], Tn)
    if cfg.overlay and render_cache:
        write_overlays(rec, render_cache, lost, names, out_dir)
    return PoseTracks(poses, names, shape_names, residual, rec.fps, lost, float(cfg.noise.depth_noise_k))
