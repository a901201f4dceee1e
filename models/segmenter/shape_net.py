"""An instance's primitive class from a close look at its depth: end crops, a whole crop, rod-fit cues.

The detector's class logits come from 7x7 RoI features, too coarse for what tells a
capsule from a cylinder (a hemispherical end versus a flat cap and a square silhouette
end, a few pixels on a thin rod). This small CNN looks at each instance at full
resolution, from the frame's depth alone:

- two end crops (24x24): a square around each end of the mask's 2-D principal axis,
  rotated so that the end points right, scaled so that the rod's radius (the mask's
  inscribed radius) is ~5 px: mask, normals rotated into the crop frame, depth relative
  to the part's median depth in units of the metric radius, also outside the mask (an
  occluder in front shows as nearer: an end cut by it is no end). A shared branch sees
  both ends and their features are pooled (sum and max: the ends are unordered);
- a whole crop (32x32, same rotation, the mask's extent): faces, outline;
- ``shape_descriptor``: rod-fit cues of the back-projected points (axis from the points'
  spread or from the normals, radius and axis line by least squares on p - r n, then the
  histogram of the normals' angle to the axis by distance from the ends in radii, the
  radial profile near the ends, length over diameter, the side's fit residual) plus
  ``geometric.region_features``.

The crops are mirrored across the part's axis for augmentation and averaged over both at
inference. The weights (``shape_net.pt``, ~150 kB in half precision) are trained on the
synthetic training stream only (``TRAIN_SEED``), never on the benchmark's held-out seed,
in two steps (``python -m vid2sim.models.segmenter.shape_net --help``):

1. on ground-truth masks (samples from ``FIRST_SAMPLE`` on, clean and with the realistic
   sensor noise; half of the masks get the edge band around the part added, as a
   detector's masks have it);
2. fine-tuned (``--source detections --init``) on the instances the refined detector finds
   (``detection_set``: samples from ``DETECTION_SAMPLE`` on, matched to the truth at
   IoU >= 0.5), because the classifier meets those masks, not the truth's.

The exact commands, run times and the accuracies that chose this recipe are in
docs/decisions.md ("Settings and their measured reasons").

Its class probabilities are one input of ``class_head`` (with the detector's own class
scores), which makes the decision. It does not find or reshape instances.
"""
from __future__ import annotations

import argparse
import logging
import math
import time
from pathlib import Path

import cv2
import numpy as np
import torch
from torch import nn

from vid2sim.datasets.shapes import CLASSES
from vid2sim.models.segmenter.geometric import interior_pixels, region_features

WEIGHTS_FILE = Path(__file__).with_name("shape_net.pt")
FIRST_SAMPLE = 200_000  # training-stream indices used here (the detector saw fewer than 50,000)
DETECTION_SAMPLE = 400_000  # the fine-tuning on the refined detector's instances (``detection_set``)
END, WHOLE = 24, 32  # crop sizes (px)
CHANNELS = 5  # mask, n_u, n_v, n_z, relative depth
END_LABELS = ("round", "flat", "hidden")  # what an end crop of a rod shows (``end_labels``)
_D_BINS = np.array([0.0, 0.25, 0.5, 1.0, 2.0])
_A_BINS = np.array([0.0, 0.15, 0.35, 0.6, 0.85, 0.95, 1.01])
N_DESCRIPTOR = 5 + 2 * (24 + 4 + 6 + 6) + 1


def _axis_fit(p: np.ndarray, n: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """Axis line point c (3,) and radius r of a rod with axis direction a: the side points
    (normals across the axis) satisfy p - r n = c + t a, least squares in (c, r)."""
    side = np.abs(n @ a) < 0.3
    if side.sum() < 8:
        side = np.ones(len(p), bool)
    Pp = p[side] - np.outer(p[side] @ a, a)
    Np = n[side] - np.outer(n[side] @ a, a)
    A = np.zeros((3 * len(Pp), 4))
    A[:, :3] = np.tile(np.eye(3), (len(Pp), 1))
    A[:, 3] = Np.ravel()
    x, *_ = np.linalg.lstsq(A, Pp.ravel(), rcond=None)
    return x[:3], float(x[3]), side


def shape_descriptor(p: np.ndarray, n: np.ndarray, npix: int, rng: np.random.Generator) -> np.ndarray:
    """p, n: (N, 3) points and normals of one instance; npix its mask's pixel count -> (N_DESCRIPTOR,)."""
    base = region_features(p, n, rng)
    q = p - p.mean(0)
    evals, evecs = np.linalg.eigh(q.T @ q / len(q))
    feats = [base]
    for a in (evecs[:, 2], np.linalg.eigh(n.T @ n / len(n))[1][:, 0]):  # axis from the spread / the normals
        c, r, side = _axis_fit(p, n, a)
        r_ok = r if r > 1e-4 else max(1e-4, float(np.sqrt(max(evals[1], 0.0))))
        t = (p - c) @ a
        rho = np.linalg.norm((p - c) - np.outer(t, a), axis=1)
        ad = np.abs(n @ a)
        d = np.minimum(t - t.min(), t.max() - t) / r_ok  # distance from the nearer end, in radii
        near = d < 2
        H, _, _ = np.histogram2d(np.clip(d, 0, 1.999), np.clip(ad, 0, 1.0), bins=(_D_BINS, _A_BINS))
        prof = [float(np.mean(rho[sel] / r_ok)) if sel.sum() >= 3 else 1.0
                for sel in ((d >= lo) & (d < hi) for lo, hi in zip(_D_BINS[:-1], _D_BINS[1:]))]
        side_res = float(np.sqrt(np.mean(((rho[side] - r_ok) / r_ok) ** 2)))
        feats += [H.ravel() / max(1, near.sum()), np.clip(prof, 0, 3),
                  [math.log(max(float(np.ptp(t)) / (2 * r_ok), 1e-3)), min(side_res, 3.0), float(side.mean()),
                   float(near.mean()), float(r > 1e-4), math.log(r_ok / max(float(np.median(p[:, 2])), 1e-3))],
                  np.histogram(ad, bins=_A_BINS)[0] / len(ad)]
    feats.append([math.log(max(npix, 1))])
    return np.concatenate(feats).astype(np.float32)


def _warp(img: np.ndarray, M: np.ndarray, size: int, interp: int) -> np.ndarray:
    return cv2.warpAffine(img, M, (size, size), flags=interp, borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def principal_axis(mask: np.ndarray, N: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The mask ``instance_crops`` uses (pixels within one pixel of the mask's normals), its
    centroid mu (u, v), its 2-D principal axis e (end crop 0 looks along +e, end crop 1 along -e)
    and each of its pixels' coordinate along e; None for fewer than 10 pixels."""
    core = mask & np.any(N != 0, axis=-1)
    if core.sum() >= 10:
        mask = mask & (cv2.dilate(core.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0)
    v, u = np.nonzero(mask)
    if len(u) < 10:
        return None
    pts = np.stack([u, v], 1).astype(np.float64)
    mu = pts.mean(0)
    e = np.linalg.eigh(np.cov((pts - mu).T))[1][:, 1]
    return mask, mu, e, (pts - mu) @ e


def instance_crops(mask: np.ndarray, N: np.ndarray, depth: np.ndarray, K: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """mask (H, W) bool; N (H, W, 3) normals; depth (H, W) m -> (ends (2, C, END, END), whole (C, WHOLE, WHOLE)) float32.

    Only mask pixels within one pixel of the mask's normals are used: a detector's mask
    also holds edge-band pixels (no normal) of whatever lies behind the part, which
    would move its outline and ends.
    """
    axis = principal_axis(mask, N)
    if axis is None:
        return None
    mask, mu, e, s = axis
    dt = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 3)
    R = max(1.5, float(dt.max()))  # inscribed radius (px)
    z = depth[mask & (depth > 0)]
    zc = float(np.median(z)) if len(z) else 1.0
    r_m = R * zc / K[0, 0]  # metric radius at the part's depth
    # channels in the image frame; the normals' image-plane part is rotated per crop
    m = mask.astype(np.float32)
    dz = np.where(depth > 0, depth, 0).astype(np.float32)  # unmasked: occluders in front show as negative
    ends = []
    for sign in (1.0, -1.0):
        d = sign * e  # the end's outward direction
        end = mu + d * (s.max() if sign > 0 else -s.min())
        centre = end - d * R  # the end sits right of centre, R px in
        half = 2.5 * R
        ends.append(_crop(m, N, dz, centre, d, half, END, zc, r_m))
    half = 0.5 * max(float(np.ptp(s)), 2 * R) * 1.15
    whole = _crop(m, N, dz, mu, e, half, WHOLE, zc, max(half * zc / K[0, 0], 1e-4))
    return np.stack(ends), whole


def _crop(m: np.ndarray, N: np.ndarray, dz: np.ndarray, centre: np.ndarray, d: np.ndarray, half: float,
          size: int, zc: float, scale_m: float) -> np.ndarray:
    """A size x size crop around ``centre`` (image px) with direction d pointing right, half-width ``half`` px."""
    k = (size / 2) / half
    # output x' = k * (R^T (x - centre)) + size/2, with R = [d, d_perp]
    dp = np.array([-d[1], d[0]])
    A = k * np.stack([d, dp])  # 2x2
    M = np.concatenate([A, (size / 2 - 0.5 - A @ centre)[:, None] + 0.5], 1).astype(np.float64)
    mc = _warp(m, M, size, cv2.INTER_LINEAR)
    nc = _warp(N.astype(np.float32), M, size, cv2.INTER_LINEAR)
    zc_img = _warp(dz, M, size, cv2.INTER_NEAREST)
    nu = nc[..., 0] * d[0] + nc[..., 1] * d[1]
    nv = nc[..., 0] * dp[0] + nc[..., 1] * dp[1]
    rel = np.where(zc_img > 0, np.clip((zc_img - zc) / scale_m, -4, 4), 0)
    return np.stack([mc, nu, nv, nc[..., 2], rel]).astype(np.float32)


class _Branch(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(CHANNELS, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU())
        self.out = 4 * width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.net(x)
        return torch.cat([h.mean((2, 3)), h.amax((2, 3))], 1)


class ShapeNet(nn.Module):
    """(ends (B, 2, C, 24, 24), whole (B, C, 32, 32), descriptor (B, N_DESCRIPTOR)) -> (B, 4) logits."""

    def __init__(self, desc_mean: np.ndarray | None = None, desc_std: np.ndarray | None = None):
        super().__init__()
        self.end, self.whole = _Branch(), _Branch()
        self.register_buffer("desc_mean", torch.zeros(N_DESCRIPTOR) if desc_mean is None else torch.tensor(desc_mean))
        self.register_buffer("desc_std", torch.ones(N_DESCRIPTOR) if desc_std is None else torch.tensor(desc_std))
        self.desc = nn.Sequential(nn.Linear(N_DESCRIPTOR, 64), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(2 * self.end.out + self.whole.out + 64, 128), nn.ReLU(),
                                  nn.Dropout(0.2), nn.Linear(128, len(CLASSES)))
        self.end_head = nn.Linear(self.end.out, len(END_LABELS))  # training only: what each end crop shows

    def forward(self, ends: torch.Tensor, whole: torch.Tensor, desc: torch.Tensor,
                with_ends: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Class logits (B, 4); with_ends: also each end crop's ``END_LABELS`` logits (B, 2, 3)."""
        B = ends.shape[0]
        fe = self.end(ends.flatten(0, 1)).view(B, 2, -1)
        x = torch.cat([fe.sum(1), fe.amax(1), self.whole(whole), self.desc((desc - self.desc_mean) / self.desc_std)], 1)
        return (self.head(x), self.end_head(fe)) if with_ends else self.head(x)


class ShapeClassifier:
    """The trained ``ShapeNet`` (``shape_net.pt`` beside this module)."""

    def __init__(self, path: Path = WEIGHTS_FILE):
        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: shape classifier weights missing (python -m vid2sim.models.segmenter.shape_net)")
        ck = torch.load(path, map_location="cpu", weights_only=True)
        if list(ck["classes"]) != list(CLASSES):
            raise ValueError(f"{path}: classes {ck['classes']} differ from {list(CLASSES)}")
        self.net = ShapeNet()
        missing, unexpected = self.net.load_state_dict({k: v.float() for k, v in ck["state_dict"].items()}, strict=False)
        if unexpected or any(not k.startswith("end_head.") for k in missing):
            raise ValueError(f"{path}: not ShapeNet weights (missing {missing}, unexpected {unexpected})")
        # weights trained before the end labels lack end_head: it is not used at inference
        self.net.eval()
        self.meta = dict(ck.get("meta", {}))

    def probabilities(self, ends: np.ndarray, whole: np.ndarray, desc: np.ndarray) -> np.ndarray:
        """Batched: ends (B, 2, C, 24, 24), whole (B, C, 32, 32), desc (B, N_DESCRIPTOR) -> (B, 4).

        Averaged with the crops mirrored across the part's axis (the training augmentation).
        """
        return self._mirror_averaged(ends, whole, desc, ends_head=False)

    def end_probabilities(self, ends: np.ndarray, whole: np.ndarray, desc: np.ndarray) -> np.ndarray:
        """The end head's (B, 2, 3) probabilities of ``END_LABELS`` per end crop, averaged with the
        mirrored crops; meaningful only for weights trained with an end weight (``meta["end_weight"]``)."""
        if not self.meta.get("end_weight"):
            raise ValueError("these shape_net weights were trained without end labels: their end head is untrained")
        return self._mirror_averaged(ends, whole, desc, ends_head=True)

    @torch.no_grad()
    def _mirror_averaged(self, ends: np.ndarray, whole: np.ndarray, desc: np.ndarray, ends_head: bool,
                         batch: int = 2000) -> np.ndarray:
        """Softmax of the class head (or the end head) averaged over the crops and their mirror,
        ``batch`` instances at a time (any array type; float16 chunks are converted per batch)."""
        out = []
        for i in range(0, len(ends), batch):
            e, w, d = (torch.from_numpy(np.ascontiguousarray(x[i:i + batch], np.float32)) for x in (ends, whole, desc))
            em, wm = _mirror(e, w)
            if ends_head:
                a, b = self.net(e, w, d, with_ends=True)[1], self.net(em, wm, d, with_ends=True)[1]
            else:
                a, b = self.net(e, w, d), self.net(em, wm, d)
            out.append((0.5 * (torch.softmax(a, -1) + torch.softmax(b, -1))).numpy())
        return np.concatenate(out) if out else np.zeros((0, 2, len(END_LABELS)) if ends_head else (0, len(CLASSES)))


def _mirror(ends: torch.Tensor, whole: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Crops mirrored across the part's axis: rows reversed, n_v negated."""
    e, w = ends.flip(-2), whole.flip(-2)
    e[:, :, 2] *= -1
    w[:, 2] *= -1
    return e, w


def stream_frames(start: int, frames: int):
    """Training-stream samples ``start..start+frames-1`` (``TRAIN_SEED``), each clean and with the
    realistic sensor noise, in whole millimetres as a depth PNG holds them: yields (k, sample,
    noisy (0 / 1), depth). ``training_set`` and ``detection_set`` (this net's and ``class_head``'s
    data) read these frames."""
    from vid2sim.datasets.synthetic.primitives import TRAIN_SEED, make_sample
    from vid2sim.datasets.synthetic.sensor import apply_depth_noise, frame_rng

    for k in range(start, start + frames):
        s = make_sample(k, TRAIN_SEED, noise="none")
        for noisy, noise in enumerate(("none", "realistic")):
            depth = s.depth if noise == "none" else apply_depth_noise(s.depth, frame_rng(TRAIN_SEED, k))
            yield k, s, noisy, np.round(depth * 1000) / 1000


def unclassified_detections(seg, depth: np.ndarray, K: np.ndarray) -> list:
    """The segment stage's refined network detections of one frame, before any class decision."""
    from vid2sim.models.segmenter.normals import depth_to_normal_image
    from vid2sim.models.segmenter.refine import LOW_SCORE, refine_detections

    return refine_detections(seg.predict(depth_to_normal_image(depth, K), LOW_SCORE, mirror=True), depth, K,
                             classify=False, depth_only=False)


def match_to_truth(dets: list, masks: np.ndarray) -> list[tuple[int, int]]:
    """One-to-one (Hungarian) pairs (truth index, detection index) of mask IoU >= 0.5."""
    from scipy.optimize import linear_sum_assignment

    if not dets or not len(masks):
        return []
    inter = np.array([[(g & d.mask).sum() for d in dets] for g in masks], float)
    union = np.array([[(g | d.mask).sum() for d in dets] for g in masks], float)
    iou = inter / np.maximum(union, 1)
    return [(i, j) for i, j in zip(*linear_sum_assignment(-iou)) if iou[i, j] >= 0.5]


def end_labels(s, g: int, ends: list[dict], mask: np.ndarray, N: np.ndarray) -> np.ndarray:
    """Per end crop of the instance ``mask`` (matched to rod ``g`` of sample ``s``; ``ends``: its
    ``rod_ends.end_visibility``) what it shows: an index of ``END_LABELS`` (the round end of a
    capsule, the flat end of a cylinder, or no end: hidden by the border, an occluder or the rod
    itself). The crops' ends are paired with the rod's by the image direction between its end centres."""
    from vid2sim.datasets.synthetic.rod_ends import CAPSULE, end_image_points

    axis = principal_axis(mask, N)
    if axis is None:
        return np.full(2, -1, np.int8)
    uv = end_image_points(s, g)
    first = float((uv[0] - uv[1]) @ axis[2]) >= 0  # the rod's first end lies along +e: end crop 0
    seen = [ends[0 if first else 1]["visible"], ends[1 if first else 0]["visible"]]
    kind = 0 if s.labels[g] == CAPSULE else 1
    return np.array([kind if v else 2 for v in seen], np.int8)


def instance_inputs(mask: np.ndarray, P: np.ndarray, N: np.ndarray, depth: np.ndarray, K: np.ndarray,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The classifier's inputs for one instance (points/normals from ``geometric.interior_pixels``,
    as ``class_head.instance_features``), or None with too few normals."""
    use = interior_pixels(mask, N)
    if use is None:
        return None
    crops = instance_crops(mask, N, depth, K)
    if crops is None:
        return None
    idx = np.flatnonzero(use)
    if len(idx) > 1500:  # the descriptor is a statistic of the points: a sample keeps it fast
        idx = np.sort(rng.choice(idx, 1500, replace=False))
    p, n = P.reshape(-1, 3)[idx].astype(np.float64), N.reshape(-1, 3)[idx].astype(np.float64)
    return crops[0], crops[1], shape_descriptor(p, n, int(mask.sum()), rng)


def training_set(start: int, frames: int, log_every: int = 200) -> dict[str, np.ndarray]:
    """Inputs and labels of every ground-truth instance of training-stream samples
    ``start..start+frames-1``, each clean and with realistic sensor noise."""
    from vid2sim.models.segmenter.geometric import frame_geometry

    rng = np.random.default_rng(start)
    E, W, D, Y = [], [], [], []
    t0 = time.time()
    for k, s, noisy, depth in stream_frames(start, frames):
        P, N = frame_geometry(depth, s.K)
        edge = ~np.any(N != 0, axis=-1)
        for m, y in zip(s.masks, s.labels):
            if rng.random() < 0.5:  # as a detector's mask: with the edge band around the part
                m = m | (cv2.dilate(m.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0) & edge
            x = instance_inputs(m, P, N, depth, s.K, rng)
            if x is not None:
                E.append(x[0].astype(np.float16))
                W.append(x[1].astype(np.float16))
                D.append(x[2])
                Y.append(int(y))
        if noisy and (k - start + 1) % log_every == 0:
            logging.info("%d/%d frames, %d instances (%.0f s)", k - start + 1, frames, len(Y), time.time() - t0)
    return {"ends": np.stack(E), "whole": np.stack(W), "desc": np.stack(D), "y": np.array(Y)}


def detection_set(start: int, frames: int, log_every: int = 50) -> dict[str, np.ndarray]:
    """Inputs and labels of the refined detector's instances (as the segment stage finds them,
    unclassified) matched to the truth at IoU >= 0.5, on training-stream samples
    ``start..start+frames-1``, clean and with realistic noise; also ``head``: the class head's
    inputs (``class_head.instance_features``, its ``shape_net`` columns at the value of a zero
    probability until ``class_head.head_inputs`` fills in a net's probabilities: the class head
    is fitted on such chunks, and heads can be compared on the same instances without running
    the detector again), ``noisy`` and ``sample`` per instance, and ``end_label`` (N, 2): what each
    end crop of a rod shows (``end_labels``; -1 for spheres and boxes)."""
    from vid2sim.datasets.synthetic.rod_ends import end_visibility
    from vid2sim.models.segmenter.class_head import instance_features
    from vid2sim.models.segmenter.geometric import frame_geometry
    from vid2sim.models.segmenter.model import Segmenter

    seg = Segmenter()
    rng = np.random.default_rng(start)
    out: dict[str, list] = {k: [] for k in ("ends", "whole", "desc", "y", "head", "noisy", "sample", "end_label")}
    t0 = time.time()
    for k, s, noisy, depth in stream_frames(start, frames):
        if not noisy:
            rods = end_visibility(s)  # from the truth: the same for the clean and the noisy frame
        dets = unclassified_detections(seg, depth, s.K)
        pairs = match_to_truth(dets, s.masks)
        if pairs:
            P, N = frame_geometry(depth, s.K)
            for i, j in pairs:
                x = instance_inputs(dets[j].mask, P, N, depth, s.K, rng)
                h = instance_features(dets[j].mask, dets[j].class_scores, np.zeros(len(CLASSES)), P, N, rng)
                if x is None or h is None:
                    continue
                out["ends"].append(x[0].astype(np.float16))
                out["whole"].append(x[1].astype(np.float16))
                out["desc"].append(x[2])
                out["y"].append(int(s.labels[i]))
                out["head"].append(h)
                out["noisy"].append(noisy)
                out["sample"].append(k)
                out["end_label"].append(end_labels(s, i, rods[i][0], dets[j].mask, N) if i in rods
                                        else np.full(2, -1, np.int8))
        if noisy and (k - start + 1) % log_every == 0:
            logging.info("%d/%d frames, %d instances (%.0f s)", k - start + 1, frames, len(out["y"]), time.time() - t0)
    return {k: np.stack(v) if k in ("ends", "whole", "desc", "head", "end_label") else np.array(v)
            for k, v in out.items()}


def fit(data: dict[str, np.ndarray], epochs: int = 12, batch: int = 128, lr: float = 2e-3, seed: int = 0,
        val: dict[str, np.ndarray] | None = None, init: ShapeNet | None = None, end_weight: float = 0.0) -> ShapeNet:
    """AdamW, one-cycle schedule, cross-entropy; flips of the crops across the axis as augmentation.
    init: a trained net to go on from (its descriptor normalisation kept), else a fresh one.
    end_weight: weight of the end crops' cross-entropy against ``data["end_label"]`` (-1: no label)."""
    torch.manual_seed(seed)
    desc = data["desc"].astype(np.float32)
    net = init if init is not None else ShapeNet(desc.mean(0), desc.std(0) + 1e-4)
    E = torch.from_numpy(data["ends"])
    W = torch.from_numpy(data["whole"])
    D = torch.from_numpy(desc)
    Y = torch.from_numpy(data["y"])
    L = torch.from_numpy(data["end_label"].astype(np.int64)) if end_weight > 0 else None
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-3)
    steps = epochs * math.ceil(len(Y) / batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps, pct_start=0.1)
    g = torch.Generator().manual_seed(seed)
    for ep in range(epochs):
        net.train()
        order = torch.randperm(len(Y), generator=g)
        tot = 0.0
        for b in range(0, len(Y), batch):
            idx = order[b:b + batch]
            e, w = E[idx].float(), W[idx].float()
            if torch.rand(1, generator=g).item() < 0.5:  # mirror across the axis: v -> -v, n_v -> -n_v
                e, w = _mirror(e, w)
            if L is None:
                loss = nn.functional.cross_entropy(net(e, w, D[idx]), Y[idx])
            else:
                logits, end_logits = net(e, w, D[idx], with_ends=True)
                lab = L[idx].flatten()
                end_loss = nn.functional.cross_entropy(end_logits.flatten(0, 1), lab, ignore_index=-1, reduction="sum")
                loss = nn.functional.cross_entropy(logits, Y[idx]) + end_weight * end_loss / max(1, int((lab >= 0).sum()))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.item() * len(idx)
        msg = f"epoch {ep + 1}/{epochs}: loss {tot / len(Y):.4f}"
        if val is not None:
            net.eval()
            with torch.no_grad():
                pred = net(torch.from_numpy(val["ends"]).float(), torch.from_numpy(val["whole"]).float(),
                           torch.from_numpy(val["desc"].astype(np.float32))).argmax(1).numpy()
            msg += f", validation accuracy {np.mean(pred == val['y']):.4f}"
        logging.info(msg)
    net.eval()
    return net


def load_chunks(paths, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Rendered chunks (``--save-data``) concatenated, each checked to hold ``keys``; a file that
    does not is a SystemExit naming it and what it lacks. ``optional`` keys (``end_label``, which
    chunks rendered before it lack) are -1 where a chunk lacks them."""
    parts = []
    for f in paths:
        d = dict(np.load(f))
        missing = set(keys) - set(d)
        if missing:
            raise SystemExit(f"{f}: not a rendered chunk of these instances (no {', '.join(sorted(missing))})")
        parts.append(d)
    out = {k: np.concatenate([p[k] for p in parts]) for k in keys}
    for k in optional:
        have = [p[k] for p in parts if k in p]
        if have:
            out[k] = np.concatenate([p[k] if k in p else np.full((len(p["y"]),) + have[0].shape[1:], -1, have[0].dtype)
                                     for p in parts])
    return out


def save(net: ShapeNet, path: Path, meta: dict) -> None:
    from vid2sim.datasets.atomic import atomic_path

    state = {k: v.half() if k not in ("desc_mean", "desc_std") else v for k, v in net.state_dict().items()}
    with atomic_path(path) as tmp:
        torch.save({"state_dict": state, "classes": list(CLASSES), "meta": meta}, tmp)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=("truth", "detections"), default="truth",
                    help="instances as the ground-truth masks give them (samples from FIRST_SAMPLE) or as the "
                         "refined detector finds them (``detection_set``, samples from DETECTION_SAMPLE)")
    ap.add_argument("--first", type=int, default=None,
                    help="first training-stream sample (default FIRST_SAMPLE for truth, DETECTION_SAMPLE for detections; "
                         "class_head's data: --source detections --first 100000)")
    ap.add_argument("--frames", type=int, default=4400, help="training-stream samples (each clean and noisy)")
    ap.add_argument("--chunks", type=int, default=4,
                    help="rendered as this many consecutive chunks (each its own point-sampling seed)")
    ap.add_argument("--chunk", type=int, default=None,
                    help="render only this chunk and write it to --save-data, no training (chunks in parallel processes)")
    ap.add_argument("--save-data", type=Path, default=None, help="write the rendered instances here (.npz)")
    ap.add_argument("--val-frames", type=int, default=0, help="further training-stream samples to validate on")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--end-weight", type=float, default=0.0,
                    help="weight of the end crops' own cross-entropy against their END_LABELS (chunks with end_label)")
    ap.add_argument("--init", type=Path, default=None, help="go on from these weights instead of a fresh net")
    ap.add_argument("--data", type=Path, nargs="*", default=(),
                    help="rendered chunks (--save-data of earlier runs) to train on instead of rendering; "
                         "--source and --frames name the samples they hold (recorded in the weights)")
    ap.add_argument("--out", type=Path, default=WEIGHTS_FILE)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    make, first = (training_set, FIRST_SAMPLE) if args.source == "truth" else (detection_set, DETECTION_SAMPLE)
    first = first if args.first is None else args.first
    size = math.ceil(args.frames / args.chunks)
    if args.chunk is not None:
        if args.save_data is None or not 0 <= args.chunk < args.chunks:
            ap.error("--chunk needs --save-data and 0 <= chunk < chunks")
    elif args.save_data is not None and args.data:
        ap.error("--save-data writes rendered instances; with --data nothing is rendered")
    chunks = [args.chunk] if args.chunk is not None else range(args.chunks)
    if args.data:
        data = load_chunks(args.data, ("ends", "whole", "desc", "y"), optional=("end_label",))
    else:
        parts = [make(first + c * size, min(size, args.frames - c * size)) for c in chunks]
        data = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    if args.save_data is not None:
        from vid2sim.datasets.atomic import write_npz

        args.save_data.parent.mkdir(parents=True, exist_ok=True)
        write_npz(args.save_data, **data)
        logging.info("wrote %s (%d instances)", args.save_data, len(data["y"]))
        if args.chunk is not None:
            return
    val = make(first + args.frames, args.val_frames) if args.val_frames else None
    start = ShapeClassifier(args.init) if args.init is not None else None
    if args.end_weight > 0 and "end_label" not in data:
        ap.error("--end-weight needs end labels: chunks rendered with --source detections and end labels")
    net = fit(data, args.epochs, lr=args.lr, val=val, init=start.net if start is not None else None,
              end_weight=args.end_weight)
    meta = {"seed": 0, "source": args.source, "samples": [first, first + args.frames], "noise": ["none", "realistic"],
            "instances": int(len(data["y"])), "epochs": args.epochs, "lr": args.lr}
    if args.end_weight > 0:
        meta["end_weight"] = args.end_weight
        meta["end_labelled_instances"] = int((data["end_label"] >= 0).any(1).sum())
    if args.data:
        meta["data"] = [str(f) for f in args.data]
    if start is not None:
        meta["init"] = {"path": str(args.init), "meta": start.meta}
    save(net, args.out, meta)
    logging.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
