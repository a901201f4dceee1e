"""Benchmark the learned and the geometric segmenter on held-out synthetic primitives.

    OMP_NUM_THREADS=1 python scripts/bench_segment.py --frames 200

Frames are samples ``0..N-1`` of ``HELD_OUT_SEED`` (training uses ``TRAIN_SEED`` only),
rendered clean and again with the foundation's realistic sensor noise
(``vid2sim.datasets.synthetic.sensor.apply_depth_noise``, a noise model the segmenter
was not trained with). Per segmenter and noise setting:

- ``mean_iou``: mean over ground-truth instances of the mask IoU of its one-to-one
  (Hungarian) matched prediction, 0 when unmatched;
- ``ap50``: mask average precision at IoU 0.5, per class (COCO-style, 101-point
  interpolation), averaged over the four classes;
- ``class_accuracy``: share of ground-truth instances matched at IoU >= 0.5 whose
  predicted class is right;
- ``detected``: share of ground-truth instances matched at IoU >= 0.5.

``learned`` is the learned segmenter as the segment stage runs it (``SegmentConfig.snap_to_depth``):
the network's class scores averaged with a left-right mirrored pass (``Segmenter.predict(mirror=True)``),
then ``models/segmenter/refine.py`` (masks snapped to depth-edge regions, depth-confirmed
detections down to score ``LOW_SCORE`` kept, class from the network's scores, ``shape_net``'s
crops of the depth and geometric cues by ``class_head``); ``learned_raw`` the network alone, one pass, at the score
threshold. Also the time of one 320x240 frame (normal map + both network passes +
refinement with the shape classifier) for the learned one. ``confusion`` gives, per
segmenter, the class confusion matrix of the matched instances (rows: truth, columns:
decision, in ``classes`` order).
The last line printed is the JSON summary.

``--stream clutter`` scores the learned segmenter on samples ``0..N-1`` of
``HELD_OUT_SEED`` of the randomised stream (``vid2sim.datasets.synthetic.clutter``:
non-primitive clutter as background, tables, far framing, touching parts) under the
sensors ``none``, ``realsense`` and ``kinect`` (``--noise``) instead:

    OMP_NUM_THREADS=1 python scripts/bench_segment.py --stream clutter --methods learned --frames 100
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from vid2sim.datasets.synthetic.primitives import CLASSES, HELD_OUT_SEED, make_sample
from vid2sim.models.segmenter.geometric import segment_geometric
from vid2sim.models.segmenter.model import DEFAULT_CHECKPOINT, Segmenter
from vid2sim.models.segmenter.normals import depth_to_normal_image
from vid2sim.models.segmenter.refine import LOW_SCORE, refine_detections


def iou_matrix(gt: np.ndarray, pred: list[np.ndarray]) -> np.ndarray:
    if len(gt) == 0 or len(pred) == 0:
        return np.zeros((len(gt), len(pred)))
    g = gt.reshape(len(gt), -1).astype(np.float32)
    p = np.stack(pred).reshape(len(pred), -1).astype(np.float32)
    inter = g @ p.T
    union = g.sum(1)[:, None] + p.sum(1)[None] - inter
    return inter / np.maximum(union, 1)


def average_precision(tp: list[tuple[float, bool]], n_gt: int) -> float:
    """COCO-style 101-point interpolated AP from (score, is_true_positive) pairs."""
    if n_gt == 0:
        return float("nan")
    if not tp:
        return 0.0
    tp = sorted(tp, key=lambda x: -x[0])
    hits = np.cumsum([t for _, t in tp])
    prec = hits / np.arange(1, len(tp) + 1)
    rec = hits / n_gt
    prec = np.maximum.accumulate(prec[::-1])[::-1]
    return float(np.mean([prec[rec >= r].max() if (rec >= r).any() else 0.0 for r in np.linspace(0, 1, 101)]))


def frame_depth(s, k: int, noise: str) -> np.ndarray:
    """The depth the benchmark gives the segmenters for held-out sample ``k`` (``s = make_sample(k,
    HELD_OUT_SEED)``): clean or with the realistic sensor noise, in whole millimetres."""
    from vid2sim.datasets.synthetic.sensor import apply_depth_noise, frame_rng

    depth = s.depth if noise == "none" else apply_depth_noise(s.depth, frame_rng(HELD_OUT_SEED, k))
    return np.round(depth * 1000) / 1000  # what a millimetre depth PNG holds


def match_instances(gt_masks: np.ndarray, dets: list) -> tuple[np.ndarray, np.ndarray]:
    """gt_masks (G, H, W), dets -> (IoU matrix (G, D), match (G,) int): each ground-truth instance's
    one-to-one (Hungarian) matched detection, -1 where none."""
    M = iou_matrix(gt_masks, [d.mask for d in dets])
    match = np.full(len(gt_masks), -1)
    if M.size:
        r, c = linear_sum_assignment(-M)
        match[r] = c
    return M, match


def learned_detections(seg: Segmenter, depth: np.ndarray, K: np.ndarray, score_threshold: float = 0.5,
                       split: bool = True) -> tuple[list, list]:
    """The learned segmenter as the segment stage runs it -> (refined detections, the network's own
    first-pass detections down to ``LOW_SCORE``)."""
    img = depth_to_normal_image(depth, K)
    low = seg.predict(img, min(LOW_SCORE, score_threshold))
    dets = refine_detections(seg.mirror_average(img, low), depth, K, score_threshold, split=split)
    return dets, low


class Scorer:
    def __init__(self):
        self.ious: list[float] = []
        self.correct = self.matched = 0
        self.confusion = np.zeros((len(CLASSES), len(CLASSES)), int)
        self.tp = {c: [] for c in range(len(CLASSES))}
        self.n_gt = {c: 0 for c in range(len(CLASSES))}

    def add(self, gt_masks, gt_labels, dets) -> None:
        M, match = match_instances(gt_masks, dets)
        best = np.zeros(len(gt_masks))
        for i, j in enumerate(match):
            if j >= 0:
                best[i] = M[i, j]
                if M[i, j] >= 0.5:
                    self.matched += 1
                    self.correct += int(dets[j].label == gt_labels[i])
                    self.confusion[gt_labels[i], dets[j].label] += 1
        self.ious.extend(best.tolist())
        # AP: greedy by score within each class, as COCO does.
        for c in range(len(CLASSES)):
            gi = np.flatnonzero(gt_labels == c)
            self.n_gt[c] += len(gi)
            taken = set()
            for j in sorted((j for j, d in enumerate(dets) if d.label == c), key=lambda j: -dets[j].score):
                ok = False
                if len(gi):
                    cand = [(M[i, j], i) for i in gi if i not in taken]
                    if cand:
                        v, i = max(cand)
                        if v >= 0.5:
                            taken.add(i)
                            ok = True
                self.tp[c].append((dets[j].score, ok))

    def summary(self) -> dict:
        aps = [average_precision(self.tp[c], self.n_gt[c]) for c in range(len(CLASSES))]
        return {"mean_iou": round(float(np.mean(self.ious)), 4),
                "ap50": round(float(np.nanmean(aps)), 4),
                "class_accuracy": round(self.correct / max(1, self.matched), 4),
                "detected": round(self.matched / max(1, len(self.ious)), 4),
                "ap50_per_class": {CLASSES[c]: round(a, 4) for c, a in enumerate(aps)},
                "confusion": self.confusion.tolist(),
                "instances": len(self.ious)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--first", type=int, default=0,
                    help="first held-out sample (default 0; e.g. 600 for frames no earlier run scored)")
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    ap.add_argument("--score-threshold", type=float, default=0.5)
    ap.add_argument("--methods", default="learned,geometric")
    ap.add_argument("--noise", default=None,
                    help="comma-separated sensors (default: none,realistic; with --stream clutter none,realsense,kinect)")
    ap.add_argument("--stream", choices=("primitives", "clutter"), default="primitives",
                    help="held-out frames: primitives (make_sample) or clutter (make_clutter_sample)")
    ap.add_argument("--no-split", action="store_true",
                    help="learned: do not split merged masks into the geometric parts (reconcile.split_merged)")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    ap.add_argument("--reuse", type=Path, default=None,
                    help="take the results of methods not run now from this earlier JSON (same frames)")
    args = ap.parse_args(argv)
    if args.noise is None:
        args.noise = "none,realistic" if args.stream == "primitives" else "none,realsense,kinect"
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    methods = args.methods.split(",")
    seg = Segmenter(args.checkpoint) if "learned" in methods else None
    scores = {(m, n): Scorer() for m in methods for n in args.noise.split(",")}
    times = []
    t0 = time.time()
    for k in range(args.first, args.first + args.frames):
        s0 = make_sample(k, HELD_OUT_SEED, noise="none") if args.stream == "primitives" else None
        for noise in args.noise.split(","):
            if s0 is not None:
                s, depth = s0, frame_depth(s0, k, noise)
            else:
                from vid2sim.datasets.synthetic.clutter import make_clutter_sample

                s = make_clutter_sample(k, HELD_OUT_SEED, noise=noise)
                depth = s.depth
            for m in methods:
                if m == "learned":
                    t = time.perf_counter()
                    dets, low = learned_detections(seg, depth, s.K, args.score_threshold, split=not args.no_split)
                    times.append(time.perf_counter() - t)
                    raw = [d for d in low if d.score >= args.score_threshold]
                    scores.setdefault(("learned_raw", noise), Scorer()).add(s.masks, s.labels, raw)
                else:
                    dets = [d for d in segment_geometric(depth, s.K) if d.score >= args.score_threshold]
                scores[(m, noise)].add(s.masks, s.labels, dets)
        if (k + 1) % 20 == 0:
            logging.info("%d/%d frames (%.0f s)", k + 1 - args.first, args.frames, time.time() - t0)
    out: dict = {"frames": args.frames, **({"first": args.first} if args.first else {}), "seed": HELD_OUT_SEED,
                 **({"stream": args.stream} if args.stream != "primitives" else {}),
                 "size": [320, 240], "classes": list(CLASSES)}
    for (m, noise), sc in scores.items():
        if noise == "none":
            out[m] = sc.summary()
        else:
            out.setdefault(f"noise_{noise}", {})[m] = sc.summary()
    if times:
        out["learned_inference_s"] = {"median": round(float(np.median(times)), 3), "max": round(float(np.max(times)), 3),
                                      "threads": 1}
        out["checkpoint"] = {"path": str(args.checkpoint), "iters": seg.meta.get("iters"),
                             "mbytes": round(args.checkpoint.stat().st_size / 1e6, 2)}
    if args.reuse:
        old = json.loads(args.reuse.read_text())
        if (old.get("frames"), old.get("first", 0)) != (args.frames, args.first):
            raise SystemExit(f"{args.reuse}: has {old.get('frames')} frames from {old.get('first', 0)}, "
                             f"this run {args.frames} from {args.first}")
        for k, v in old.items():
            if k.startswith("noise_"):
                for m, r in v.items():
                    out.setdefault(k, {}).setdefault(m, r)
            else:
                out.setdefault(k, v)
    line = json.dumps(out)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
