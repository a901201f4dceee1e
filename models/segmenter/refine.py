"""The learned segmenter's detections, checked and completed with the frame's depth geometry.

The segment stage runs the learned segmenter this way (``SegmentConfig.method="learned"``);
``scripts/bench_segment.py`` measures it as ``learned`` beside the network alone
(``learned_raw``), so what the geometry adds is visible. On one frame:

1. snap: the network's coarse (28x28 mask-head) masks are snapped to depth-edge regions
   (``geometric.snap_to_regions``);
1b. split: a mask over two or three parts the geometric segmenter separates (rods of a
   chain, a row of links, a door and the carcass behind it) becomes those parts
   (``reconcile.split_merged``; the network merges such parts, and snapping cannot undo it);
   on depth with sensor-like noise (``reconcile.depth_noise``), where the cuts often follow the
   noise, only where another detection of the network saw one of those parts on its own;
2. recall: a detection the network scores below the threshold (down to ``low_score``) is
   kept when most of its snapped mask is depth no more confident detection explains:
   the network's misses are mostly parts it did find, only with a low score (thin rods,
   parts cut by an occluder), and unmatched ground truth costs the most IoU;
3. class: a small fitted head (``class_head``, softmax regression on the training
   stream) combines the network's per-class scores with ``shape_net``'s class
   probabilities (a small CNN on full-resolution end crops and a whole crop of the
   instance's depth and normals, plus rod-fit cues of its back-projected points) and
   geometric cues (``geometric.region_features``: planar faces, sphere fit, elongation,
   the normals at the rod's ends). The detector's 7x7 RoI features barely see a rod's
   end; the crops do, so capsule vs cylinder is decided mostly by the depth.

4. depth-only parts: a depth region no detection explains, off the room's planes, becomes
   a part of its own (classified by ``geometric.classify_region``, scored
   ``DEPTH_ONLY_SCORE``, below the threshold: the segment stage keeps it only where it
   explains a library shape nothing else does).

``LOW_SCORE`` and ``overlap`` were compared on training-stream frames (seed 0, frames
0-99: 0.05 / 0.1 / 0.2 changed the mean IoU by under 0.01); depth-only parts add 0.005
mean IoU there on clean depth, nothing on noisy depth (its regions are fragmented). It
does not merge masks, and splits them only as ``reconcile`` says (cutting every rod chain
with ``geometric.split_bent`` lowered the benchmark's mean IoU; cutting only the masks
classified as rods changed it by under 0.002 and did not separate rott's links).
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from vid2sim.datasets.shapes import CLASSES
from vid2sim.models.segmenter.class_head import ClassHead, instance_features
from vid2sim.models.segmenter.geometric import (class_scores, classify_region, depth_regions, find_background_planes,
                                                frame_geometry, segment_geometric, snap_to_regions)
from vid2sim.models.segmenter.model import Detection
from vid2sim.models.segmenter.reconcile import MAX_NOISE, depth_noise, split_merged
from vid2sim.models.segmenter.shape_net import ShapeClassifier, instance_inputs

LOW_SCORE = 0.1  # the network's lowest score a depth-confirmed detection may have
DEPTH_ONLY_SCORE = 0.3  # score of a part only the depth shows (no network proposal)


def refine_detections(dets: list[Detection], depth: np.ndarray, K: np.ndarray, score_threshold: float = 0.5,
                      low_score: float = LOW_SCORE, overlap: float = 0.5, classify: bool = True,
                      depth_only: bool = True, min_pixels: int = 40, seed: int = 0,
                      split: bool = True, block: int = 1) -> list[Detection]:
    """dets: network detections (best first, scores down to ``low_score``); depth (H, W) m; K (3, 3).

    Returns the kept detections, best first; with ``classify`` their class and class scores
    are the head's (the score stays the network's confidence that there is a part).
    split: cut merged masks into the geometric segmenter's parts (``reconcile.split_merged``).
    block: each depth pixel is the mean of block x block sensor pixels (``normals.downsample_depth``):
    whether the depth is noisy is judged by the sensor's pixels, ``depth_noise`` times block.
    """
    cand = [d for d in dets if d.score >= min(low_score, score_threshold)]
    P, N = frame_geometry(depth, K)
    regions = depth_regions(depth, K, P, N)
    snapped = snap_to_regions(cand, regions)
    if split:
        snapped = split_merged(snapped, segment_geometric(depth, K, P=P, N=N, seed=seed), regions, P, N,
                               np.random.default_rng(seed), noisy=block * depth_noise(depth, P, N) > MAX_NOISE)
    kept: list[Detection] = []
    explained = np.zeros(depth.shape, bool)
    for d in snapped:
        if d.score >= score_threshold or (d.mask & explained).sum() < overlap * d.mask.sum():
            kept.append(d)
            explained |= d.mask
    rng = np.random.default_rng(seed)
    extra = _depth_only_parts(regions, explained, P, N, rng, min_pixels) if depth_only else []
    if not classify:
        return kept + extra
    out = _classify(kept, P, N, depth, K, rng)
    return out + extra


def _classify(dets: list[Detection], P: np.ndarray, N: np.ndarray, depth: np.ndarray, K: np.ndarray,
              rng: np.random.Generator) -> list[Detection]:
    """``dets`` with the head's class and class scores (the score stays the network's)."""
    head = _default_head()
    shape = shape_probabilities([d.mask for d in dets], P, N, depth, K, rng)
    out = []
    for d, sp in zip(dets, shape):
        cs = d.class_scores if d.class_scores is not None else np.eye(len(CLASSES))[d.label] * d.score
        f = instance_features(d.mask, cs, sp, P, N, rng)
        if f is None:
            out.append(d)
            continue
        prob = head.probabilities(f)
        # scaled so that the chosen class carries the detection's score (pipeline.segment.match_shapes)
        out.append(Detection(d.mask, int(np.argmax(prob)), d.score, prob * (d.score / float(prob.max()))))
    return out


def _depth_only_parts(regions: np.ndarray, explained: np.ndarray, P: np.ndarray, N: np.ndarray,
                      rng: np.random.Generator, min_pixels: int) -> list[Detection]:
    """Depth regions no detection explains, off the room's planes and not spanning the
    image: parts the network did not propose at all, classified by ``geometric.classify_region``
    and scored ``DEPTH_ONLY_SCORE`` (below any threshold: never a confident part alone)."""
    valid = np.any(N != 0, axis=-1)
    bg = find_background_planes(P, N, valid, rng)
    n = int(regions.max()) + 1
    area = np.bincount(regions.ravel(), minlength=n)
    on_bg = np.bincount(regions[bg], minlength=n)
    covered = np.bincount(regions[explained], minlength=n)
    h, w = regions.shape
    boxes = ndimage.find_objects(regions)  # region k's (rows, columns) box: its pixels are worked on there
    out = []
    for k in np.flatnonzero((area >= max(min_pixels, 100)) & (on_bg < 0.3 * area) & (covered < 0.5 * area)):
        if k == 0:
            continue
        box = v, u = boxes[k - 1]
        if (u.start <= 3 and u.stop - 1 >= w - 4) or (v.start <= 3 and v.stop - 1 >= h - 4):
            continue  # a strip of floor or wall from border to border
        m = (regions[box] == k) & ~explained[box]
        use = m & valid[box]
        if use.sum() < 10:
            continue
        cls, conf = classify_region(P[box][use], N[box][use], rng)
        cs = class_scores(cls, conf)
        full = np.zeros((h, w), bool)
        full[box] = m
        out.append(Detection(full, cls, DEPTH_ONLY_SCORE, cs * (DEPTH_ONLY_SCORE / float(cs.max()))))
    return out


def shape_probabilities(masks: list[np.ndarray], P: np.ndarray, N: np.ndarray, depth: np.ndarray, K: np.ndarray,
                        rng: np.random.Generator) -> np.ndarray:
    """(len(masks), 4) ``shape_net`` class probabilities of each mask (uniform where too few normals)."""
    out = np.full((len(masks), len(CLASSES)), 1.0 / len(CLASSES))
    inputs = [instance_inputs(m, P, N, depth, K, rng) for m in masks]
    have = [k for k, x in enumerate(inputs) if x is not None]
    if have:
        out[have] = _default_shape_net().probabilities(np.stack([inputs[k][0] for k in have]),
                                                       np.stack([inputs[k][1] for k in have]),
                                                       np.stack([inputs[k][2] for k in have]))
    return out


_HEAD: list[ClassHead] = []
_SHAPE_NET: list[ShapeClassifier] = []


def _default_head() -> ClassHead:
    if not _HEAD:
        _HEAD.append(ClassHead())
    return _HEAD[0]


def _default_shape_net() -> ShapeClassifier:
    if not _SHAPE_NET:
        _SHAPE_NET.append(ShapeClassifier())
    return _SHAPE_NET[0]
