"""Segment's overlay image: each part's mask tinted over the frame, outlined, with its name and score."""
from __future__ import annotations

import cv2
import numpy as np


def overlay(normal_img: np.ndarray, rgb: np.ndarray | None, masks: np.ndarray, names: list[str],
            scores: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8: the colour frame (``rgb``, else the (H, W, 3) normal image) with each of
    the (n, H, W) masks tinted a random colour, outlined in white and labelled "name score"."""
    base = rgb if rgb is not None else normal_img
    img = base.astype(np.float32).copy()
    rng = np.random.default_rng(3)
    for m in masks:
        img[m > 0] = 0.45 * img[m > 0] + 0.55 * rng.uniform(60, 255, 3)
    img = np.clip(img, 0, 255).astype(np.uint8)
    for m, n, s in zip(masks, names, scores):
        cnts, _ = cv2.findContours(m.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        cv2.drawContours(img, cnts, -1, (255, 255, 255), 1)
        v, u = np.nonzero(m)
        if len(u):
            cv2.putText(img, f"{n} {s:.2f}", (int(u.mean()) - 20, int(v.mean())), cv2.FONT_HERSHEY_SIMPLEX, 0.35,
                        (255, 255, 255), 1, cv2.LINE_AA)
    return img
