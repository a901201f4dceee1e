"""Track's check of its start poses against the masks they were fitted to, and a second fit where one fails.

A mask that holds pixels of more than its part (a neighbour's or something behind it) can start
its primitive between the two. Such a start shows the body on a small share of its mask's pixels
(its render, the pixels where it is the nearest body, covers few of them).

Here each body whose render covers less than ``START_RECALL`` of its mask's pixels with a depth
reading is fitted again (the least covered first) to parts of the masks of all such bodies (a
mask may hold its neighbour's part): each mask's points split by k-means in 3-D into ``PARTS``
groups (2 and 3 groups). Each part's fit is aligned with the whole frame (the other bodies as
they are) and kept where the frame's cost (``_Tracker.cost_fn``) falls, so a wrong judgement costs
time, not a pose.
"""
from __future__ import annotations

import logging
import math
import warnings

import cv2
import numpy as np
import torch
from scipy.cluster.vq import kmeans2

from vid2sim.pipeline.track_fit import fit_primitive
from vid2sim.pipeline.track_refind import body_mask

log = logging.getLogger(__name__)

START_RECALL = 0.5   # a start whose render covers less than this share of its mask's pixels with a reading is fitted again
PARTS = (2, 3)       # the mask's points are split into this many groups (each a candidate to fit)
MIN_PART_PX = 30     # a group with fewer pixels is not fitted
KMEANS_SEED = 0      # k-means' random state


def mask_observation(cfg, scene, depth: np.ndarray, mask: np.ndarray, fg: np.ndarray):
    """Observation of mask (H, W) bool's rays for a primitive fit: the mask dilated by ``roi_pad_px``,
    only where the pixel is the mask's or known background (the other parts' pixels, which may hide
    it, and the unmasked band around the mask tell nothing about it), at most ``max_rays`` rays;
    foreground ``fg`` (H, W) bool (the pixels to fit). Returns ``scene.observe``'s (obs, flat)."""
    roi = cv2.dilate(mask.astype(np.uint8), np.ones((2 * cfg.gates.roi_pad_px + 1,) * 2, np.uint8)) > 0
    roi &= mask | (scene.background > 0)
    stride = max(cfg.gates.stride, math.ceil(math.sqrt(roi.sum() / max(cfg.gates.max_rays, 1))))
    return scene.observe(depth, roi, foreground=fg, stride=stride)


def mask_recall(scene, T: torch.Tensor, masks: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """(M,) share of each mask's pixels with a depth reading (``masks`` (M, H, W), ``depth`` (H, W) m)
    on which its body is the nearest body at poses T (M, 4, 4)."""
    out = np.ones(len(T))
    for m in range(len(T)):
        mine = (masks[m] > 0) & (depth > 0)
        if mine.any():
            out[m] = float((body_mask(scene, T, m) & mine).sum()) / float(mine.sum())
    return out


def _kmeans(x: np.ndarray, k: int) -> np.ndarray:
    """(N,) labels of points x (N, 3) m in k groups: SciPy's k-means (k-means++ seeds, a fixed
    random state, so the same points give the same groups)."""
    with warnings.catch_warnings():  # an empty group keeps its centre; the warning says only that
        warnings.simplefilter("ignore")
        _, lab = kmeans2(x, k, iter=20, minit="++", rng=KMEANS_SEED)
    return lab


def mask_parts(scene, depth: np.ndarray, mask: np.ndarray) -> list[np.ndarray]:
    """(H, W) bool groups of mask's pixels with a reading: its world points split by k-means into
    each of ``PARTS`` groups, those of at least ``MIN_PART_PX`` pixels."""
    flat = np.flatnonzero(mask.reshape(-1) & (depth.reshape(-1) > 0))
    if len(flat) < 2 * MIN_PART_PX:
        return []
    pts = (scene.origin + torch.as_tensor(depth.reshape(-1)[flat], dtype=scene.dirs.dtype)[:, None]
           * scene.dirs[flat]).numpy()
    out = []
    for k in PARTS:
        lab = _kmeans(pts, k)
        for j in range(k):
            if (lab == j).sum() >= MIN_PART_PX:
                part = np.zeros(mask.size, bool)
                part[flat[lab == j]] = True
                out.append(part.reshape(mask.shape))
    return out


def refit_starts(tracker, depth: np.ndarray, rgb: np.ndarray | None, T: torch.Tensor, masks: np.ndarray,
                 names: list) -> torch.Tensor:
    """Start poses T (M, 4, 4) with each body whose render covers less than ``START_RECALL`` of its
    mask's pixels (``masks`` (M, H, W)) moved to a fit of a part of such a mask (``mask_parts``) where,
    aligned in the whole frame (``depth``, ``rgb`` or None), that lowers the frame's cost."""
    cfg, scene = tracker.cfg, tracker.scene
    recall = mask_recall(scene, T, masks, depth)
    bad = [int(m) for m in np.argsort(recall) if recall[m] < START_RECALL]
    parts = [(masks[k] > 0, part) for k in bad for part in mask_parts(scene, depth, masks[k] > 0)]
    for m in bad:
        tried = []
        for mask, part in parts:
            obs, _ = mask_observation(cfg, scene, depth, mask, part)
            _, Tm = fit_primitive(cfg, scene.prims[m], obs)
            if Tm is None:
                continue
            T0 = T.clone()
            T0[m] = Tm
            tried.append(tracker.frame(depth, T0, T0, use_prior=False, rgb=rgb)[0])
        if not tried:
            continue
        cost = tracker.cost_fn(depth, rgb, [T, *tried], cfg.gates.max_rays)
        costs = [cost(Tc) for Tc in tried]
        c0, j = cost(T), int(np.argmin(costs))
        got = mask_recall(scene, tried[j], masks, depth)[m]
        log.info("track: start: %s seen on %.2f of its mask's pixels; %d fits of parts of the mask, the best "
                 "(seen on %.2f) frame cost %.0f against %.0f: %s", names[m], recall[m], len(tried), got, costs[j], c0,
                 "kept" if costs[j] < c0 else "not kept")
        if costs[j] < c0:
            T = tried[j]
    return T
