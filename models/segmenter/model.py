"""Loading, saving and running the trained segmenter on one normal image."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np
import torch

from vid2sim.datasets.shapes import CLASSES
from vid2sim.models.segmenter.network import build_model

DEFAULT_CHECKPOINT = Path(__file__).with_name("segmenter.pt")


def to_input(normal_img: np.ndarray) -> torch.Tensor:
    """(H, W, 3) uint8 normal image -> (3, H, W) float tensor in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(normal_img)).permute(2, 0, 1).float().div_(255.0)


def save_checkpoint(model: torch.nn.Module, path: str | Path, meta: dict) -> None:
    """Half-precision weights (the checkpoint stays small) plus plain metadata, atomically."""
    from vid2sim.datasets.atomic import atomic_path

    state = {k: (v.detach().cpu().half() if v.is_floating_point() else v.detach().cpu())
             for k, v in model.state_dict().items()}
    with atomic_path(path) as tmp:
        torch.save({"state_dict": state, "classes": list(CLASSES), "meta": meta}, tmp)


def load_checkpoint(path: str | Path) -> tuple[torch.nn.Module, dict]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: segmenter checkpoint missing (train it with scripts/train_segmenter.py)")
    ck = torch.load(path, map_location="cpu", weights_only=True)
    if list(ck.get("classes", [])) != list(CLASSES):
        raise ValueError(f"{path}: checkpoint classes {ck.get('classes')} differ from {list(CLASSES)}")
    model = build_model()
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in ck["state_dict"].items()})
    model.eval()
    return model, dict(ck.get("meta", {}))


def mirror_normal_image(normal_img: np.ndarray) -> np.ndarray:
    """The normal image of the left-right mirrored scene: columns reversed, n_x negated
    (pixels without a normal stay black)."""
    img = normal_img[:, ::-1].copy()
    has = img.any(-1)
    img[..., 0][has] = 255 - img[..., 0][has]
    return img


@dataclass(frozen=True)
class Detection:
    """One instance: mask (H, W) bool, class index into CLASSES, score in [0, 1].

    class_scores: (len(CLASSES),) the best score the detector gave this instance under
    each class (0 where it did not propose that class), so a caller can weigh a close
    second class (capsule vs cylinder) against other evidence such as size.
    """

    mask: np.ndarray
    label: int
    score: float
    class_scores: np.ndarray | None = None


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    inter = np.logical_and(a, b).sum()
    return float(inter / max(1, np.logical_or(a, b).sum()))


class BoxedMask(NamedTuple):
    """A mask (H, W) bool with its bounding box (x0, y0, x1, y1) px, end exclusive, and its pixel count."""

    mask: np.ndarray
    box: tuple[int, int, int, int]
    area: int


def boxed(mask: np.ndarray) -> BoxedMask:
    """``mask`` (H, W) bool with its bounding box and pixel count (an empty mask: box (0, 0, 0, 0))."""
    x, y, w, h = cv2.boundingRect(np.ascontiguousarray(mask, bool).view(np.uint8))
    return BoxedMask(mask, (x, y, x + w, y + h), int(np.count_nonzero(mask[y:y + h, x:x + w])))


def box_overlap(a: BoxedMask, mask: np.ndarray, box: tuple[int, int, int, int]) -> int:
    """Pixels of ``a.mask & mask`` ((H, W) bool, every pixel of it inside ``box`` (x0, y0, x1, y1)),
    counted on the common box of ``a.box`` and ``box`` only; 0 where the boxes are apart."""
    x0, y0 = max(a.box[0], box[0]), max(a.box[1], box[1])
    x1, y1 = min(a.box[2], box[2]), min(a.box[3], box[3])
    if x0 >= x1 or y0 >= y1:
        return 0
    return int(np.count_nonzero(a.mask[y0:y1, x0:x1] & mask[y0:y1, x0:x1]))


def iou_above(a: BoxedMask, b: BoxedMask, iou: float) -> bool:
    """``mask_iou(a.mask, b.mask) > iou`` (iou >= 0), computed on the two masks' common box only
    (``box_overlap``), and not at all where the smaller mask is at most ``iou`` of the larger
    (the IoU is at most that share)."""
    small, large = min(a.area, b.area), max(a.area, b.area)
    if small == 0 or small / large <= iou:
        return False
    inter = box_overlap(a, b.mask, b.box)
    return float(inter / max(1, a.area + b.area - inter)) > iou


def group_detections(masks: list[np.ndarray], labels: list[int], scores: list[float],
                     iou: float = 0.5) -> list[Detection]:
    """Merge per-class detections of the same object (mask IoU > ``iou``), best score first.

    torchvision's Mask R-CNN suppresses duplicates per class only, so one part often
    comes back once per plausible class.
    """
    order = np.argsort(-np.asarray(scores, float))
    objs: list[tuple[np.ndarray, int, float, np.ndarray]] = []
    for i in order:
        for m, _, _, cs in objs:
            if mask_iou(masks[i], m) > iou:
                cs[labels[i]] = max(cs[labels[i]], scores[i])
                break
        else:
            cs = np.zeros(len(CLASSES))
            cs[labels[i]] = scores[i]
            objs.append((masks[i], labels[i], float(scores[i]), cs))
    return [Detection(m, l, s, cs) for m, l, s, cs in objs]


class Segmenter:
    """The learned instance segmenter; ``predict`` takes a normal image of any size."""

    def __init__(self, checkpoint: str | Path = DEFAULT_CHECKPOINT):
        self.model, self.meta = load_checkpoint(checkpoint)
        self.model.roi_heads.score_thresh = 0.05  # keep second-choice classes for grouping

    def predict(self, normal_img: np.ndarray, score_threshold: float = 0.5, mirror: bool = False) -> list[Detection]:
        """normal_img: (H, W, 3) uint8 from ``normals.depth_to_normal_image`` -> detections, best first.

        mirror: also run the left-right mirrored frame and average each detection's class
        scores with those of its mirrored twin (mask IoU > 0.5); masks and scores stay the
        first pass's (adding the parts only the mirrored pass finds changed the benchmark's
        mean IoU by under 0.001). Test-time augmentation: the class head is the network's
        weak point (capsule vs cylinder), and the two passes' errors are partly independent.
        """
        dets = self._predict(normal_img, score_threshold)
        return self.mirror_average(normal_img, dets) if mirror else dets

    def mirror_average(self, normal_img: np.ndarray, dets: list[Detection]) -> list[Detection]:
        """``dets`` (this frame's ``predict``) with class scores averaged with the mirrored pass's."""
        if not dets:
            return dets
        twins = [Detection(d.mask[:, ::-1], d.label, d.score, d.class_scores)
                 for d in self._predict(mirror_normal_image(normal_img), 0.05)]
        out = []
        for d in dets:
            best = max(twins, key=lambda t: mask_iou(t.mask, d.mask), default=None)
            if best is None or mask_iou(best.mask, d.mask) <= 0.5 or d.class_scores is None:
                out.append(d)
                continue
            cs = 0.5 * (d.class_scores + best.class_scores)
            out.append(Detection(d.mask, int(np.argmax(cs)), d.score, cs))
        return out

    @torch.no_grad()
    def _predict(self, normal_img: np.ndarray, score_threshold: float) -> list[Detection]:
        out = self.model([to_input(normal_img)])[0]
        masks = [m[0].numpy() > 0.5 for m in out["masks"]]
        keep = [i for i, m in enumerate(masks) if m.any()]
        dets = group_detections([masks[i] for i in keep], [int(out["labels"][i]) - 1 for i in keep],
                                [float(out["scores"][i]) for i in keep])
        return [d for d in dets if d.score >= score_threshold]
