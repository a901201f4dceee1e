"""The instance's class from the network's class scores, a close look at the depth, and geometric cues.

A multinomial logistic regression (14 inputs, 4 classes) on: the log of the network's
best score under each class (averaged with the mirrored pass,
``Segmenter.predict(mirror=True)``), the log of ``shape_net``'s class probabilities
(a small CNN on full-resolution end crops of the instance's depth plus rod-fit cues),
``geometric.region_features`` of the instance's back-projected points (planar faces,
sphere inliers, elongation, rounded and flat ends) and the log of its pixel count. The
network and the depth err differently on capsule vs cylinder; a fitted combination
weighs them per class instead of by one hand weight.

Fitted on the synthetic training stream only (``TRAIN_SEED``), never on the benchmark's
held-out seed: on ``shape_net.detection_set`` chunks of samples 100000-102399 (which
neither the detector's nor ``shape_net``'s training reached; the refined detector's
instances matched to the truth at IoU >= 0.5, clean and with realistic noise; the
depth-only parts are classified by the geometric rules, not by this head) with the
shipped ``shape_net``'s probabilities filled in. Its L2 weight is the most regularised of
``L2_GRID`` whose 5-fold cross-validated share of right classes (folds over samples) is
within one standard error of the best (the one-standard-error rule): a weaker one follows
the network's class scores more, and a piece of a split mask carries its parent's scores
(``reconcile.split_merged``). The weights are ``class_head.json`` beside this module:

    for c in 0 1; do OMP_NUM_THREADS=1 python -m vid2sim.models.segmenter.shape_net --source detections \
        --first 100000 --frames 2400 --chunks 2 --chunk $c --save-data runs/head_$c.npz & done; wait
    OMP_NUM_THREADS=1 python -m vid2sim.models.segmenter.class_head --data runs/head_0.npz runs/head_1.npz

The accuracies behind this choice are in docs/decisions.md ("Settings and their measured
reasons").

It does not find or reshape instances (``refine``), and it knows only the four classes.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

import numpy as np

from vid2sim.datasets.shapes import CLASSES
from vid2sim.models.segmenter.geometric import FEATURES, interior_pixels, region_features

HEAD_FILE = Path(__file__).with_name("class_head.json")
INPUTS = tuple(f"log_net_{c}" for c in CLASSES) + tuple(f"log_shape_{c}" for c in CLASSES) + FEATURES + ("log_pixels",)
L2_GRID = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5)  # chosen by cross-validation; > 0 keeps separable data posed


def instance_features(mask: np.ndarray, class_scores: np.ndarray, shape_probs: np.ndarray, P: np.ndarray,
                      N: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """mask (H, W) bool; class_scores (4,) the network's; shape_probs (4,) ``shape_net``'s; P, N (H, W, 3)
    points and normals -> (14,) or None (too few normals)."""
    use = interior_pixels(mask, N)
    if use is None:
        return None
    return np.concatenate([np.log(np.asarray(class_scores, float) + 0.02), np.log(np.asarray(shape_probs, float) + 1e-3),
                           region_features(P[use], N[use], rng),
                           [np.log(mask.sum())]])


class ClassHead:
    """Softmax regression on standardised ``INPUTS``."""

    def __init__(self, path: Path = HEAD_FILE):
        d = json.loads(Path(path).read_text())
        if tuple(d["inputs"]) != INPUTS or tuple(d["classes"]) != CLASSES:
            raise ValueError(f"{path}: class head for inputs {d['inputs']} / classes {d['classes']}")
        self.mean, self.std = np.asarray(d["mean"]), np.asarray(d["std"])
        self.W, self.b = np.asarray(d["W"]), np.asarray(d["b"])

    @classmethod
    def from_dict(cls, d: dict) -> "ClassHead":
        """A head from ``fit_softmax``'s result."""
        head = cls.__new__(cls)
        head.mean, head.std, head.W, head.b = (np.asarray(d[k]) for k in ("mean", "std", "W", "b"))
        return head

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """x: (..., 14) -> (..., 4) class probabilities."""
        z = ((x - self.mean) / self.std) @ self.W + self.b
        z = np.exp(z - z.max(-1, keepdims=True))
        return z / z.sum(-1, keepdims=True)


def fit_softmax(X: np.ndarray, y: np.ndarray, l2: float = 1e-2) -> dict:
    """Multinomial logistic regression by L-BFGS on standardised inputs."""
    from scipy.optimize import minimize

    mean, std = X.mean(0), X.std(0) + 1e-9
    Z = (X - mean) / std
    k, d = len(CLASSES), X.shape[1]
    Y = np.eye(k)[y]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        W, b = w[:d * k].reshape(d, k), w[d * k:]
        s = Z @ W + b
        s -= s.max(1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(1, keepdims=True)
        nll = -np.mean(np.log(p[np.arange(len(y)), y] + 1e-12)) + l2 * (W**2).sum()
        g = (p - Y) / len(y)
        return nll, np.concatenate([(Z.T @ g + 2 * l2 * W).ravel(), g.sum(0)])

    sol = minimize(loss, np.zeros(d * k + k), jac=True, method="L-BFGS-B")
    W, b = sol.x[:d * k].reshape(d, k), sol.x[d * k:]
    return {"inputs": list(INPUTS), "classes": list(CLASSES), "mean": mean.tolist(), "std": std.tolist(),
            "W": W.tolist(), "b": b.tolist()}


def head_inputs(data: dict[str, np.ndarray], shape_probs: np.ndarray) -> np.ndarray:
    """The head's inputs of ``shape_net.detection_set`` instances: their stored ``head`` columns
    with ``shape_net``'s class probabilities filled in (as ``instance_features`` takes them)."""
    X = np.array(data["head"], float)
    X[:, len(CLASSES):2 * len(CLASSES)] = np.log(np.asarray(shape_probs, float) + 1e-3)
    return X


def cross_validate(X: np.ndarray, y: np.ndarray, groups: np.ndarray, l2s: tuple[float, ...] = L2_GRID,
                   folds: int = 5) -> dict[float, float]:
    """Share of right classes per L2 weight, by ``folds``-fold cross-validation over ``groups``
    (training-stream samples: a frame's clean and noisy instances stay in one fold)."""
    fold = np.unique(groups, return_inverse=True)[1] % folds
    out = {}
    for l2 in l2s:
        right = 0
        for f in range(folds):
            tr, te = fold != f, fold == f
            if not te.any():  # fewer groups than folds
                continue
            head = ClassHead.from_dict(fit_softmax(X[tr], y[tr], l2))
            right += int(np.sum(head.probabilities(X[te]).argmax(1) == y[te]))
        out[l2] = right / len(y)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, nargs="+", required=True,
                    help="shape_net.detection_set chunks of training-stream samples no net was trained on (python -m "
                         "vid2sim.models.segmenter.shape_net --source detections --first ... --save-data ...)")
    ap.add_argument("--out", type=Path, default=HEAD_FILE)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from vid2sim.models.segmenter.shape_net import ShapeClassifier, load_chunks
    from vid2sim.datasets.atomic import write_text

    data = load_chunks(args.data, ("ends", "whole", "desc", "y", "head", "sample"))
    clf = ShapeClassifier()
    X, y = head_inputs(data, clf.probabilities(data["ends"], data["whole"], data["desc"])), data["y"]
    cv = cross_validate(X, y, data["sample"])
    best = max(cv.values())
    # one-standard-error rule: the most regularised weight within one standard error of the best
    l2 = max(k for k, v in cv.items() if v >= best - math.sqrt(best * (1 - best) / len(y)))
    logging.info("5-fold cross-validated share of right classes by L2 weight: %s; chosen %g",
                 ", ".join(f"{k:g}: {v:.4f}" for k, v in cv.items()), l2)
    head = fit_softmax(X, y, l2)
    samples = [int(data["sample"].min()), int(data["sample"].max()) + 1]
    head["trained_on"] = {"seed": 0, "samples": samples, "noise": ["none", "realistic"], "instances": int(len(y)),
                          "data": [str(f) for f in args.data], "shape_net": clf.meta,
                          "l2": l2, "l2_rule": "most regularised within one standard error of the best",
                          "cross_validation": {f"{k:g}": round(v, 4) for k, v in cv.items()}}
    write_text(args.out, json.dumps(head, indent=1) + "\n")
    logging.info("wrote %s (%d instances)", args.out, len(y))


if __name__ == "__main__":
    main()
