"""segment_refine: a mask snapped to the depth, which misses a part's rim where a RealSense-like sensor
reads nothing, grown back to the part's colour edge, never onto another part or another surface."""
import cv2
import numpy as np
import pytest

from image_masks import rod
from vid2sim.pipeline.segment_refine import refine_boundaries


def _iou(a, b):
    return (a & b).sum() / (a | b).sum()


def _scene():
    """A red rod 11 px wide at 1.5 m on a grey wall at 2.0 m; its rim two pixels deep and a pixel
    beyond have no depth; a second red rod (another part, with its own mask) joins its right end at the same depth,
    and a red block (a distractor, no mask) touches its lower side 0.3 m nearer."""
    rng = np.random.default_rng(0)
    color = np.clip(rng.normal(128, 6, (240, 320, 3)), 0, 255).astype(np.uint8)
    part = rod((60, 120), (200, 120), 5.0)
    other = rod((200, 120), (280, 60), 5.0) & ~part
    block = np.zeros_like(part)
    block[126:150, 100:140] = True
    block &= ~part
    for m in (part, other, block):
        color[m] = np.clip(rng.normal((200, 40, 40), 6, (int(m.sum()), 3)), 0, 255).astype(np.uint8)
    depth = np.full(part.shape, 2.0, np.float32)
    depth[part | other] = 1.5
    depth[block] = 1.2
    cross = cv2.getStructuringElement(cv2.MORPH_CROSS, (3, 3))
    core = cv2.erode(part.astype(np.uint8), cross, iterations=2) > 0
    rim = cv2.dilate(part.astype(np.uint8), cross) > 0
    depth[rim & ~core & ~block & ~other] = 0.0   # the sensor's holes along the rod's edge
    return color, depth, part, other, block, core


def _cores(part, other):
    cross = cv2.getStructuringElement(cv2.MORPH_CROSS, (3, 3))
    return [cv2.erode(m.astype(np.uint8), cross, iterations=2) > 0 for m in (part, other)]


def test_a_mask_missing_the_rim_without_depth_is_grown_to_the_part_and_no_further():
    """Both parts' depth-snapped masks, each rod two pixels in on every side (the rod's 1009 of 1621 px,
    IoU 0.622; the other's IoU 0.657). Refined on colour where the depth has no reading (the default),
    the rod's mask covers the rod at IoU >= 0.99; the other part, whose rim has depth readings, keeps
    its mask as it was; none of the other part's or the red distractor's pixels is taken."""
    color, depth, part, other, block, _ = _scene()
    core, other_core = _cores(part, other)
    assert (int(core.sum()), int(part.sum())) == (1009, 1621)
    assert (_iou(core, part), _iou(other_core, other)) == (pytest.approx(0.622, abs=0.001),
                                                           pytest.approx(0.657, abs=0.001))
    out = refine_boundaries(np.stack([core, other_core]).astype(np.uint8), ["rod", "other"], color, depth) > 0
    assert _iou(out[0], part) >= 0.99
    assert np.array_equal(out[1], other_core)
    assert (out[0] & other).sum() == 0 and (out[0] & block).sum() == 0


def test_with_depth_a_rim_of_the_parts_own_depth_is_taken_and_a_shared_rim_split():
    """``with_depth``: pixels at the part's own depth join as well, so the other rod's mask (its rim
    read at its depth) reaches IoU >= 0.98 too; the rim where the two red rods meet at one depth is
    split between them (at most 3 px on the wrong side) and the distractor 0.3 m nearer is not taken."""
    color, depth, part, other, block, _ = _scene()
    core, other_core = _cores(part, other)
    out = refine_boundaries(np.stack([core, other_core]).astype(np.uint8), ["rod", "other"], color, depth,
                            with_depth=True) > 0
    assert _iou(out[0], part) >= 0.98 and _iou(out[1], other) >= 0.98
    assert (out[0] & other).sum() + (out[1] & part).sum() <= 3
    assert (out[0] & block).sum() == 0 and (out[1] & block).sum() == 0


def test_without_colour_the_masks_are_kept_as_they_are():
    """A depth-only recording: nothing to refine against, the masks come back unchanged."""
    color, depth, part, other, block, core = _scene()
    masks = np.stack([core, other]).astype(np.uint8)
    assert np.array_equal(refine_boundaries(masks, ["rod", "other"], None, depth), masks)


def test_a_void_without_depth_beyond_the_part_is_not_taken():
    """A red void (no depth, beyond the sensor's range) from the image's left edge up to the rod's left
    end: a hole reaching the window's edge is no part's rim, so none of its pixels join the rod. The
    rod's own rim holes join that void here (one 4-connected hole), so its mask stays as it was
    (IoU 0.622): a rim is taken only where its holes are its own."""
    color, depth, part, other, block, _ = _scene()
    core, other_core = _cores(part, other)
    void = np.zeros_like(part)
    void[100:140, :60] = True
    void &= ~part
    depth[void] = 0.0
    color[void] = (200, 40, 40)
    out = refine_boundaries(np.stack([core, other_core]).astype(np.uint8), ["rod", "other"], color, depth) > 0
    assert (out[0] & void).sum() == 0
    assert _iou(out[0], part) == pytest.approx(0.622, abs=0.001)


def _spilled(part, depth, rows=slice(126, 132), cols=slice(150, 200), shadow=slice(150, 175)):
    """(H, W) bool: the rod's mask spilled 6 px below it over its right end (columns 150-199), onto the grey
    wall at 2.0 m (columns 175-199, with readings) and a sensor shadow (columns 150-174: ``depth`` set to 0
    there); row 126 is the rod's rim, without readings in ``_scene``."""
    spill = np.zeros_like(part)
    spill[rows, cols] = True
    spill &= ~part
    depth[rows, shadow][spill[rows, shadow]] = 0.0
    return spill


def test_with_the_parts_size_a_mask_spilled_onto_the_wall_and_a_shadow_behind_it_is_cut_back():
    """The rod's whole mask plus a 6 x 50 px spill (300 px: 125 of the wall at 2.0 m, 175 without depth,
    a shadow and the rod's rim holes beside it; IoU 0.844). With depth but no part size, much of the spill
    stays (measured 69 of the wall's and 115 of the shadow's pixels, IoU 0.894: each wall pixel is its own
    nearest depth); with the rod's size (0.15 m) the wall's pixels leave the mask and the shadow's take
    the background's colour: IoU >= 0.99 (measured 0.995), none of the spill's pixels."""
    color, depth, part, other, block, _ = _scene()
    _, other_core = _cores(part, other)
    spill = _spilled(part, depth)
    shadow = spill & (depth == 0)
    assert (int(spill.sum()), int(shadow.sum())) == (300, 175)
    mask = part | spill
    assert _iou(mask, part) == pytest.approx(0.844, abs=0.001)
    masks = np.stack([mask, other_core]).astype(np.uint8)
    plain = refine_boundaries(masks, ["rod", "other"], color, depth, with_depth=True) > 0
    assert (plain[0] & spill & ~shadow).sum() >= 50 and (plain[0] & shadow).sum() >= 100
    out = refine_boundaries(masks, ["rod", "other"], color, depth, with_depth=True, sizes_m=[0.15, 0.15]) > 0
    assert _iou(out[0], part) >= 0.99
    assert (out[0] & spill).sum() == 0


def _before_a_void():
    """A green rod 11 px wide at 1.5 m across a dark void (no depth: beyond the sensor's range, the top
    160 rows, reaching the image's edges) and a grey wall at 2.0 m below; every rod pixel has its depth
    (a clean sensor). Its mask spilled 3 px onto the void on every side, as the segmenter draws a thin
    part before a void; returns color, depth, the rod and that mask."""
    rng = np.random.default_rng(1)
    color = np.clip(rng.normal(128, 6, (240, 320, 3)), 0, 255).astype(np.uint8)
    depth = np.full((240, 320), 2.0, np.float32)
    void = np.zeros((240, 320), bool)
    void[:160] = True
    color[void] = np.clip(rng.normal(34, 3, (int(void.sum()), 3)), 0, 255).astype(np.uint8)
    depth[void] = 0.0
    part = rod((80, 20), (200, 130), 5.0)
    color[part] = np.clip(rng.normal((40, 200, 120), 6, (int(part.sum()), 3)), 0, 255).astype(np.uint8)
    depth[part] = 1.5
    mask = cv2.dilate(part.astype(np.uint8), cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (7, 7))) > 0
    return color, depth, part, mask


def test_a_mask_spilled_onto_a_void_beyond_the_sensors_range_is_cut_back_to_the_part():
    """The rod's mask spilled 3 px onto the void (measured IoU 0.621, the spill's pixels all without
    depth, joined to the void at the window's edge). Refined with depth and the rod's size, the void's
    pixels are probable background and take the void's colour: IoU >= 0.97 (measured 1.0), at most 20 of the
    void's pixels kept. Before, the void's pixels within 3 px of the rod's depth pixels were probable
    foreground, and those in the mask's core sure foreground, so the dark colour was the part's too:
    594 of the 1044 spilled pixels stayed (IoU 0.742)."""
    color, depth, part, mask = _before_a_void()
    spill = mask & ~part
    assert _iou(mask, part) == pytest.approx(0.621, abs=0.001)
    assert (depth[spill] == 0).all() and (depth[part] > 0).all()
    out = refine_boundaries(mask[None].astype(np.uint8), ["rod"], color, depth, with_depth=True, sizes_m=[0.3]) > 0
    assert _iou(out[0], part) >= 0.97
    assert (out[0] & spill).sum() <= 20
    assert (out[0] & part).sum() >= 0.98 * part.sum()


def _half_a_wide_rod():
    """A capsule 31 px wide (radius 15 px) at 1.0 m on a grey wall at 2.0 m, green, shaded across its axis
    from bright on one side to 60 % on the other; as the depth segmenter splits a near cylinder along its
    axis, the mask is the lit half only. Returns color, depth, the rod and that mask."""
    rng = np.random.default_rng(2)
    color = np.clip(rng.normal(128, 6, (240, 320, 3)), 0, 255).astype(np.uint8)
    depth = np.full((240, 320), 2.0, np.float32)
    a, b = np.array([60.0, 60.0]), np.array([250.0, 150.0])
    part = rod(a, b, 15.0)
    v, u = np.mgrid[:240, :320]
    d = b - a
    side = ((u - a[0]) * d[1] - (v - a[1]) * d[0]) / np.linalg.norm(d)   # px from the axis, signed
    lit = part & (side <= 0)
    bright = (1.0 - 0.4 * (np.clip(side, -15, 15) + 15) / 30)[part][:, None]
    color[part] = np.clip(rng.normal(0, 4, (int(part.sum()), 3)) + bright * (40, 200, 120), 0, 255).astype(np.uint8)
    depth[part] = 1.0
    return color, depth, part, lit


def test_a_mask_half_as_wide_as_its_part_grows_across_it_given_the_parts_width():
    """The lit half of a 31 px wide capsule (IoU 0.5 with it, mean width 15 px). Refined with depth and its
    part's least extent (31 px) and largest projected area (1.3 times its pixels), the band widens to the
    shortfall and the mask covers the rod at IoU >= 0.95 (measured 1.0) without taking the wall; with the
    3 px band alone (no part size in pixels, as before) it grows 6 px in two rounds: IoU 0.632."""
    color, depth, part, lit = _half_a_wide_rod()
    assert _iou(lit, part) == pytest.approx(0.5, abs=0.01)
    mask = lit[None].astype(np.uint8)
    plain = refine_boundaries(mask, ["rod"], color, depth, with_depth=True, sizes_m=[0.7]) > 0
    assert _iou(plain[0], part) <= 0.65
    out = refine_boundaries(mask, ["rod"], color, depth, with_depth=True, sizes_m=[0.7],
                            parts_px=[(31.0, 1.3 * float(part.sum()))]) > 0
    assert _iou(out[0], part) >= 0.95
    assert (out[0] & ~part).sum() <= 0.01 * part.sum()
