"""segment's merge_occluded (two regions that are one part behind a thinner one) against the
pairwise search it prunes: every pair of regions, whatever their distance."""
import cv2
import numpy as np

from vid2sim.models.segmenter.geometric import merge_occluded, one_part_behind


def reference_merge(lab: np.ndarray, depth: np.ndarray, ids: list[int], max_gap_px: int = 30) -> np.ndarray:
    """merge_occluded without its pruning: every pair of regions is asked ``one_part_behind``."""
    lab = lab.copy()
    ids = list(ids)
    changed = True
    while changed:
        changed = False
        for ia in ids:
            A = lab == ia
            dist, _ = cv2.distanceTransformWithLabels((~A).astype(np.uint8), cv2.DIST_L2, 5,
                                                      labelType=cv2.DIST_LABEL_PIXEL)
            for ib in ids:
                if ib != ia and one_part_behind(lab, depth, ids, A, dist, lab == ib, max_gap_px):
                    lab[lab == ib] = ia
                    ids.remove(ib)
                    changed = True
                    break
            if changed:
                break
    return lab


def _scene(rng: np.random.Generator, h: int = 120, w: int = 160) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Boxes at random depths, some cut in two by a nearer vertical bar; labels of the pieces."""
    depth = np.zeros((h, w), np.float32)
    lab = np.zeros((h, w), np.int32)
    k = 0
    for _ in range(rng.integers(3, 9)):
        v0, u0 = rng.integers(0, h - 20), rng.integers(0, w - 30)
        dv, du = rng.integers(8, 20), rng.integers(15, 40)
        z = rng.uniform(1.0, 2.0)
        k += 1
        depth[v0:v0 + dv, u0:u0 + du] = z
        lab[v0:v0 + dv, u0:u0 + du] = k
        if rng.random() < 0.6:       # a bar in front splits the box in two labels
            c = u0 + du // 2
            lab[v0:v0 + dv, c:u0 + du] = k + 1
            k += 1
            lab[v0:v0 + dv, c - 2:c + 2] = 0
            depth[max(0, v0 - 5):v0 + dv + 5, c - 2:c + 2] = z - 0.2
    return lab, depth, sorted(set(np.unique(lab)) - {0})


def test_pruned_search_merges_as_every_pair_does():
    rng = np.random.default_rng(5)
    merged = 0
    for _ in range(25):
        lab, depth, ids = _scene(rng)
        got, want = merge_occluded(lab, depth, ids), reference_merge(lab, depth, ids)
        np.testing.assert_array_equal(got, want)
        merged += len(np.unique(lab)) - len(np.unique(got))
    assert merged >= 10     # the scenes do exercise merging
