"""Loading, saving and running the trained segmenter on one normal image."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vid2sim.datasets.synthetic.primitives import CLASSES
from vid2sim.models.segmenter.network import build_model

DEFAULT_CHECKPOINT = Path(__file__).with_name("segmenter.pt")


def to_input(normal_img: np.ndarray) -> torch.Tensor:
    """(H, W, 3) uint8 normal image -> (3, H, W) float tensor in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(normal_img)).permute(2, 0, 1).float().div_(255.0)


def save_checkpoint(model: torch.nn.Module, path: str | Path, meta: dict) -> None:
    """Half-precision weights (the checkpoint stays small) plus plain metadata, atomically."""
    from vid2sim.pipeline.atomic import atomic_path

    state = {k: (v.half() if v.is_floating_point() else v) for k, v in model.state_dict().items()}
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


@dataclass(frozen=True)
class Detection:
    """One instance: mask (H, W) bool, class index into CLASSES, score, and per-class probabilities."""

    mask: np.ndarray
    label: int
    score: float


class Segmenter:
    """The learned instance segmenter; ``predict`` takes a normal image of any size."""

    def __init__(self, checkpoint: str | Path = DEFAULT_CHECKPOINT):
        self.model, self.meta = load_checkpoint(checkpoint)

    @torch.no_grad()
    def predict(self, normal_img: np.ndarray, score_threshold: float = 0.5) -> list[Detection]:
        out = self.model([to_input(normal_img)])[0]
        dets = []
        for m, l, s in zip(out["masks"], out["labels"], out["scores"]):
            if float(s) < score_threshold:
                continue
            dets.append(Detection(m[0].numpy() > 0.5, int(l) - 1, float(s)))
        return dets
