"""Segment: parts of one mechanism that lie apart in the image, named together.

``segment_assembly`` keeps the cluster of touching masks that explains the most library
shapes and drops a cluster that names no shape the kept ones do not. Each cluster is named
on its own, so where the library lists identical parts (three links of one size) a second
link alone takes the first link's name and looks like a repeat. Parts hinged a few cm apart
(flat links lying on a floor 3 cm from each other) are separate clusters wherever that gap
is wider than ``segment_assembly.GAP`` of the frame (a near camera).

``rejoin_apart`` takes such a cluster back where it lies near the kept parts, measured by
their own size in the image (at most ``NEAR`` times the kept masks' median length), and
naming it together with the kept parts explains more library shapes than they explain
alone. A look-alike farther than that stays out.
"""
from __future__ import annotations

from typing import Callable

import cv2
import numpy as np

from vid2sim.models.segmenter.model import Detection

NEAR = 0.25  # a dropped cluster within this many times the kept masks' median length (px) of them may rejoin


def mask_length(mask: np.ndarray) -> float:
    """Length (px) of a (H, W) bool mask along its principal axis: sqrt(12 * the largest
    variance of its pixel coordinates), the side of a filled rectangle."""
    v, u = np.nonzero(mask)
    if len(u) < 2:
        return float(len(u))
    cov = np.cov(np.stack([u, v]).astype(np.float64))
    return float(np.sqrt(12.0 * max(np.linalg.eigvalsh(cov)[-1], 0.0)))


def rejoin_apart(dets: list[Detection], groups: list[list[int]], keep: list[int],
                 name: Callable[[list[int]], list[str | None]]) -> list[int]:
    """Indices (ascending) of the detections to keep: ``keep`` plus each other cluster of
    ``groups`` (indices into ``dets``) whose mask comes within ``NEAR`` times the kept masks'
    median ``mask_length`` of a kept mask, where ``name`` (library names of a subset of the
    detections, ``match_shapes``) of the kept detections with it explains more library
    shapes than without it. Nearest clusters first, each gap measured again after a cluster
    rejoins (a chain of links); masks (H, W) bool of one frame."""
    kept = sorted(keep)
    if not kept or len(kept) == len(dets):
        return kept
    explained = len({n for n in name(kept) if n is not None})
    near = NEAR * float(np.median([mask_length(dets[k].mask) for k in kept]))
    rest = [g for g in groups if not set(g) & set(kept) and any(dets[k].mask.any() for k in g)]
    while rest:
        union = np.any([dets[k].mask for k in kept], axis=0)
        dist = cv2.distanceTransform((~union).astype(np.uint8), cv2.DIST_L2, 3)
        gaps = [min(float(dist[dets[k].mask].min()) for k in g if dets[k].mask.any()) for g in rest]
        for j in np.argsort(gaps, kind="stable"):
            if gaps[j] > near:
                return kept
            trial = sorted(kept + rest[j])
            more = len({n for n in name(trial) if n is not None})
            if more > explained:  # taken: measure the others' gaps to it too
                kept, explained = trial, more
                rest.pop(int(j))
                break
        else:
            return kept
    return kept
