"""Training loop of the segmenter, and fine-tuning on a user's own labelled frames.

``fit`` is shared by ``scripts/train_segmenter.py`` (from scratch, on the synthetic
primitive stream of ``vid2sim.datasets.synthetic.primitives``) and ``train_segmenter``
(fine-tuning, behind ``vid2sim train-segmenter --images DIR --masks DIR``).
"""
from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Iterator

import cv2
import numpy as np
import torch

from vid2sim.datasets.shapes import CLASSES
from vid2sim.models.segmenter.model import load_checkpoint, save_checkpoint, to_input
from vid2sim.models.segmenter.normals import depth_to_normal_image, pseudo_depth_from_rgb

log = logging.getLogger(__name__)


def make_target(masks: np.ndarray, labels: np.ndarray) -> dict[str, torch.Tensor]:
    """masks: (N, H, W) bool, labels: (N,) class index into CLASSES -> torchvision target."""
    boxes = []
    keep = []
    for i, m in enumerate(masks):
        ys, xs = np.nonzero(m)
        if len(xs) == 0:
            continue
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
        keep.append(i)
    h, w = masks.shape[1:] if masks.ndim == 3 else (0, 0)
    return {"boxes": torch.tensor(np.asarray(boxes, np.float32).reshape(-1, 4)),
            "labels": torch.tensor(np.asarray(labels, np.int64)[keep] + 1),
            "masks": torch.from_numpy(masks[keep].astype(np.uint8)).reshape(len(keep), h, w)}


def fit(model: torch.nn.Module, batches: Iterator[tuple[list[torch.Tensor], list[dict]]], iters: int,
        lr: float = 1e-3, warmup: int = 200, log_path: Path | None = None, checkpoint: Path | None = None,
        save_every: int = 200, start_iter: int = 0, meta: dict | None = None,
        optimizer_state: dict | None = None, state_path: Path | None = None,
        time_budget_s: float | None = None, device: str | torch.device = "cpu",
        save_every_s: float | None = None) -> list[dict]:
    """AdamW with linear warm-up and cosine decay; one JSON line per iteration in ``log_path``.

    The schedule's progress is ``it / iters`` or, when ``time_budget_s`` is given, the larger
    of that and elapsed / budget, and training stops at progress 1: on a shared CPU whose
    speed is unknown in advance the run still ends on time with a fully decayed rate.

    Saves the model to ``checkpoint`` every ``save_every`` iterations, every ``save_every_s``
    seconds if given, and at the end (optimizer state beside it in ``state_path`` so a
    killed run can resume). ``device``: where the model and each batch are put (the model
    is moved there; the batches come on the CPU).
    """
    device = torch.device(device)
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=1e-4)
    if optimizer_state is not None:
        opt.load_state_dict(optimizer_state)

    def progress(it: int) -> float:
        p = it / max(1, iters)
        if time_budget_s:
            p = max(p, (time.time() - t0) / time_budget_s)
        return min(1.0, p)

    def lr_at(it: int) -> float:
        if it < warmup:
            return lr * (0.05 + 0.95 * it / warmup)
        return lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress(it))))

    history = []
    t0 = time.time()
    t_saved = t0
    model.train()
    logf = open(log_path, "a") if log_path else None
    try:
        for it in range(start_iter, iters):
            last = progress(it) >= 1.0 or it + 1 == iters
            images, targets = next(batches)
            if device.type != "cpu":
                images = [x.to(device, non_blocking=True) for x in images]
                targets = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]
            for g in opt.param_groups:
                g["lr"] = lr_at(it)
            losses = model(images, targets)
            loss = sum(losses.values())
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 10.0)
            opt.step()
            rec = {"iter": it + 1, "time_s": round(time.time() - t0, 2), "lr": round(lr_at(it), 8), "loss": round(loss.item(), 5),
                   **{k: round(v.item(), 5) for k, v in losses.items()}}
            history.append(rec)
            if logf:
                logf.write(json.dumps(rec) + "\n")
                logf.flush()
            if (it + 1) % 20 == 0:
                log.info("iter %d/%d loss %.3f (%.1f s)", it + 1, iters, loss.item(), time.time() - t0)
            due = save_every_s is not None and time.time() - t_saved >= save_every_s
            if checkpoint and ((it + 1) % save_every == 0 or last or due):
                t_saved = time.time()
                save_checkpoint(model, checkpoint, {**(meta or {}), "iters": it + 1})
                if state_path:
                    torch.save({"optimizer": opt.state_dict(), "iter": it + 1}, state_path)
            if last:
                break
    finally:
        if logf:
            logf.close()
    return history


def _read_input(path: Path, K: np.ndarray | None) -> np.ndarray:
    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if img is None:
        raise ValueError(f"{path}: cannot be decoded as an image")
    if img.dtype == np.uint16 and img.ndim == 2:
        if K is None:
            raise ValueError(f"{path}: a 16-bit depth image needs a camera.json (intrinsics) beside it or in its parent")
        return depth_to_normal_image(img.astype(np.float32) * 0.001, K)
    rgb = cv2.cvtColor(img, cv2.COLOR_BGR2RGB) if img.ndim == 3 else cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    h, w = rgb.shape[:2]
    Kp = np.array([[w, 0, w / 2], [0, w, h / 2], [0, 0, 1.0]])
    return depth_to_normal_image(pseudo_depth_from_rgb(rgb), Kp)


def load_labelled_frames(images: Path, masks: Path) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Read a user's labelled frames: (normal image, masks (N, H, W) bool, labels (N,)) each.

    images/: 16-bit depth PNGs in millimetres (intrinsics from ``camera.json`` in images/ or
    its parent) or 8-bit RGB images (turned into pseudo-depth as for RGB-only recordings).
    masks/: for each image a PNG of the same name whose pixel value is the instance id
    (0 = background), plus ``labels.json``: ``{"000000.png": {"1": "box", "2": "capsule"}}``.
    """
    from vid2sim.datasets.recording import Camera

    images, masks = Path(images), Path(masks)
    K = None
    for c in (images / "camera.json", images.parent / "camera.json"):
        if c.exists():
            K = Camera.load(c).K
            break
    labels_path = masks / "labels.json"
    if not labels_path.exists():
        raise ValueError(f"{labels_path}: missing (maps each mask file to {{instance id: class}}, classes {CLASSES})")
    labels = json.loads(labels_path.read_text())
    out = []
    for img_path in sorted(p for p in images.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg")):
        mpath = masks / (img_path.stem + ".png")
        if not mpath.exists():
            raise ValueError(f"{mpath}: no mask for {img_path.name}")
        ids = cv2.imread(str(mpath), cv2.IMREAD_UNCHANGED)
        if ids is None or ids.ndim != 2:
            raise ValueError(f"{mpath}: must be a single-channel PNG of instance ids")
        lab = labels.get(mpath.name, {})
        inst = [int(k) for k in lab]
        for k, c in lab.items():
            if c not in CLASSES:
                raise ValueError(f"{labels_path}: {mpath.name} instance {k} has class {c!r}; known: {', '.join(CLASSES)}")
        m = np.stack([ids == k for k in inst]) if inst else np.zeros((0,) + ids.shape, bool)
        cls = np.array([CLASSES.index(lab[str(k)]) for k in inst], np.int64)
        out.append((_read_input(img_path, K), m, cls))
    if not out:
        raise ValueError(f"{images}: no images found")
    return out


def _cycle_batches(frames: list, batch: int, seed: int = 0) -> Iterator:
    rng = np.random.default_rng(seed)
    while True:
        idx = rng.choice(len(frames), size=batch)
        ims, tgts = [], []
        for i in idx:
            img, m, c = frames[i]
            if rng.random() < 0.5:  # mirror: flip u and the normal's x component
                img = img[:, ::-1].copy()
                valid = img.any(-1)
                img[..., 0] = np.where(valid, 255 - img[..., 0], 0)
                m = m[:, :, ::-1].copy()
            ims.append(to_input(img))
            tgts.append(make_target(m, c))
        yield ims, tgts


def train_segmenter(images: str | Path, masks: str | Path, out: str | Path,
                    checkpoint: str | Path | None = None, iters: int = 300, lr: float = 2e-4,
                    batch: int = 2, log_path: str | Path | None = None) -> Path:
    """Fine-tune the segmenter on a user's labelled frames (``vid2sim train-segmenter``).

    images, masks: folders as described in ``load_labelled_frames``.
    out: where the fine-tuned checkpoint is written (give it to ``segment`` as
    ``SegmentConfig.checkpoint``). checkpoint: the starting weights (default: the
    shipped ``models/segmenter/segmenter.pt``). iters, lr, batch: optimisation settings;
    a few hundred iterations on ~30 frames take minutes on a CPU. Returns ``out``.
    """
    from vid2sim.models.segmenter.model import DEFAULT_CHECKPOINT

    frames = load_labelled_frames(Path(images), Path(masks))
    model, meta = load_checkpoint(Path(checkpoint) if checkpoint else DEFAULT_CHECKPOINT)
    out = Path(out)
    log.info("fine-tuning on %d frames for %d iterations", len(frames), iters)
    fit(model, _cycle_batches(frames, batch), iters, lr=lr, warmup=min(50, iters // 5),
        log_path=Path(log_path) if log_path else None, checkpoint=out, save_every=max(iters, 1),
        meta={**meta, "finetuned_on": str(images)})
    return out
