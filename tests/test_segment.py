"""Segment stage on the synthetic mechanisms: every body once, with the right library shape."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.recording import open_recording
from vid2sim.datasets.synthetic import MECHANISMS, make_recording
from vid2sim.models.segmenter.model import DEFAULT_CHECKPOINT
from vid2sim.pipeline.artifacts import Segmentation
from vid2sim.pipeline.run import StageError
from vid2sim.pipeline.segment import OVERLAY_FILE, SegmentConfig, run

MIN_VISIBLE = 40  # a body with fewer visible pixels cannot be asked for


@pytest.fixture(scope="module", params=MECHANISMS)
def mechanism(request, tmp_path_factory):
    name = request.param
    return name, make_recording(name, tmp_path_factory.mktemp(name) / "rec", seed=0, frames=1)


def _check_bodies(rec_path: Path, seg: Segmentation) -> None:
    rec = open_recording(rec_path)
    truth = json.loads((rec_path / "truth.json").read_text())
    ids = cv2.imread(str(rec_path / "truth_masks" / f"{seg.frame:06d}.png"), cv2.IMREAD_UNCHANGED)
    masks = seg.masks.astype(bool)
    used = set()
    for i, body in enumerate(truth["bodies"]):
        gt = ids == i + 1
        if gt.sum() < MIN_VISIBLE:
            continue
        iou = [(m & gt).sum() / (m | gt).sum() for m in masks]
        hits = [k for k, v in enumerate(iou) if v > 0.5]
        assert len(hits) == 1, f"{body['name']}: {len(hits)} masks with IoU > 0.5 (IoUs {np.round(iou, 2)})"
        k = hits[0]
        used.add(k)
        # Identical library shapes (two equal links) are interchangeable: compare geometry.
        assert rec.shapes[seg.shape_names[k]].to_json() == rec.shapes[body["shape"]].to_json(), \
            f"{body['name']}: matched {seg.shape_names[k]}, truth {body['shape']}"
    # The pusher tip of ``pushed`` (id 255) is scene, not a body: it may or may not be segmented.
    tip = ids == 255
    extra = [seg.shape_names[k] for k in range(len(masks))
             if k not in used and not (tip.any() and (masks[k] & tip).sum() / (masks[k] | tip).sum() > 0.5)]
    assert not extra, f"parts that are no body: {extra}"


# The shipped checkpoint (5717 CPU iterations, scripts/train_segmenter.py) merges two parts
# into one mask (rott's and tree5's rods, pushed's links) or covers the carcass with the
# door's and the drawer's masks; models/segmenter/reconcile.py splits such masks into the
# geometric segmenter's parts. On rott the arm (a capsule whose ends the joints hide) is then
# classified a cylinder; segment.match_shapes lets a rod take the other rod class's library
# shape at a class penalty, so it matches the capsule of its size. Mechanisms listed here are
# strict xfails (a fixed one shows up as a failure); none is left.
LEARNED_MISSES: set[str] = set()


@pytest.mark.parametrize("method", ["learned", "geometric"])
def test_segment_finds_each_body_once(mechanism, method, tmp_path, request):
    name, rec_path = mechanism
    if method == "learned" and name in LEARNED_MISSES:
        request.node.add_marker(pytest.mark.xfail(strict=True, reason="learned checkpoint below target here"))
    # ``pushed``'s library has no shape for the pusher tip, so that one part is let go.
    cfg = SegmentConfig(method=method, frames=(0,), unmatched="ignore" if name == "pushed" else "error")
    seg = run(cfg, open_recording(rec_path), tmp_path)
    _check_bodies(rec_path, seg)
    seg.save(tmp_path / Segmentation.FILE)
    back = Segmentation.load(tmp_path / Segmentation.FILE)
    assert back.shape_names == seg.shape_names and np.array_equal(back.masks, seg.masks)
    overlay = cv2.imread(str(tmp_path / OVERLAY_FILE))
    assert overlay is not None and overlay.shape[:2] == seg.masks.shape[1:]


@pytest.mark.slow  # over 10 s on the shared 2-core machine
def test_learned_finds_cart_and_pole_in_realistic_depth(tmp_path):
    """The realistic sensor model (sigma = 4 mm z^2: 25 mm at the cartpole's 2.5 m). The
    learned pole mask also covers some of the cart and its points spread along the line
    of sight: the pole's second 3-D axis measured 0.13-0.15 m, more than the library's
    0.05 m pole can look, so no frame explained both parts and segment kept one. Read
    across the image, the width is 0.072-0.079 m and both parts are found (300 frames: the
    camera frames the whole motion, so a shorter recording is a different first frame)."""
    rec_path = make_recording("cartpole", tmp_path / "rec", seed=0, frames=300, noise="realistic")
    seg = run(SegmentConfig(method="learned"), open_recording(rec_path), tmp_path)
    _check_bodies(rec_path, seg)


@pytest.mark.slow  # about 40 s on the shared 2-core machine (rendering 60 frames at 1280x720)
def test_learned_finds_cart_and_pole_in_realistic_depth_at_1280x720(tmp_path):
    """At 1280x720 the realistic sensor's per-pixel noise makes full-resolution normals twice
    as noisy as at 640x480: the depth broke into about 1700 regions and the cart's mask
    missed faces. Segmented at 640x360 (``work_width``), each body is one mask of the
    recording's full size, over its true mask."""
    from vid2sim.pipeline.segment import work_scale

    rec_path = make_recording("cartpole", tmp_path / "rec", seed=0, frames=60, size=(1280, 720), noise="realistic")
    rec = open_recording(rec_path)
    assert work_scale(SegmentConfig(), rec, 0) == 2 and work_scale(SegmentConfig(work_width=0), rec, 0) == 1
    assert work_scale(SegmentConfig(work_width=700), rec, 0) == 1
    seg = run(SegmentConfig(method="learned", frames=(0,)), rec, tmp_path)
    assert seg.masks.shape[1:] == (720, 1280)
    _check_bodies(rec_path, seg)
    overlay = cv2.imread(str(tmp_path / OVERLAY_FILE))
    assert overlay is not None and overlay.shape[:2] == (720, 1280)


@pytest.mark.slow  # about 30 s on the shared 2-core machine
def test_learned_finds_each_cabinet_part_once_in_realistic_depth(tmp_path):
    """The realistic-noise cabinet (sigma 4 mm z^2): the network's most confident mask covers
    the whole cabinet, and its own door, drawer-and-top and side masks overlap it. Each truth
    body must come out as one mask (IoU > 0.5 with the true mask) with its own library shape:
    three parts, no second carcass."""
    rec_path = make_recording("cabinet", tmp_path / "rec", seed=0, frames=13, noise="realistic")
    seg = run(SegmentConfig(method="learned"), open_recording(rec_path), tmp_path)
    assert sorted(seg.shape_names) == ["carcass", "door", "drawer"]
    _check_bodies(rec_path, seg)


def test_shape_missing_from_library_is_an_error_naming_what_was_seen(tmp_path):
    rec_path = make_recording("cartpole", tmp_path / "rec", seed=0, frames=1)
    shapes = json.loads((rec_path / "shapes.json").read_text())
    shapes["pole"] = {"type": "sphere", "radius": 0.3}  # the library no longer has a capsule
    (rec_path / "shapes.json").write_text(json.dumps(shapes))
    with pytest.raises(RecordingError) as e:
        run(SegmentConfig(method="geometric", frames=(0,), unmatched="error"), open_recording(rec_path), tmp_path)
    msg = str(e.value)
    assert "shapes.json" in msg and "matches no library shape" in msg
    assert "capsule" in msg or "cylinder" in msg  # what was seen, by class ...
    assert " m " in msg or " m(" in msg or "m (" in msg  # ... and by size
    # By default what fits no library shape is background; the library's pole, not found, is the error.
    with pytest.raises(StageError) as e:
        run(SegmentConfig(method="geometric", frames=(0,)), open_recording(rec_path), tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"segment: {rec_path / 'shapes.json'}: shapes.json lists 2 part(s), segment found 1: "
                          "pole is missing"), msg
    seg = run(SegmentConfig(method="geometric", frames=(0,), missing="allow"), open_recording(rec_path), tmp_path)
    assert seg.shape_names == ["cart"]


def test_learned_is_never_replaced_by_geometric(tmp_path):
    rec_path = make_recording("cartpole", tmp_path / "rec", seed=0, frames=1)
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        run(SegmentConfig(method="learned", checkpoint=str(tmp_path / "none.pt"), frames=(0,)),
            open_recording(rec_path), tmp_path)
    with pytest.raises(ValueError, match="unknown method"):
        run(SegmentConfig(method="magic"), open_recording(rec_path), tmp_path)


def test_rgb_only_recording_uses_pseudo_depth(tmp_path):
    rec_path = make_recording("cartpole", tmp_path / "rec", seed=0, frames=1)
    shutil.rmtree(rec_path / "depth")
    # The paper's RGB-only set-up films parts against a plain backdrop: paint one in.
    ids = cv2.imread(str(rec_path / "truth_masks" / "000000.png"), cv2.IMREAD_UNCHANGED)
    bgr = cv2.imread(str(rec_path / "color" / "000000.png"))
    bgr[ids == 0] = (200, 200, 200)
    cv2.imwrite(str(rec_path / "color" / "000000.png"), bgr)
    from vid2sim.pipeline.segment_motion import SegmentMotion

    seg = run(SegmentConfig(method="geometric", frames=(0,), motion=SegmentMotion(by_motion="off")),
              open_recording(rec_path), tmp_path)
    fg = ids > 0
    found = seg.masks.astype(bool).any(0)
    # the parts' silhouettes are found (pseudo-depth has no scale: shapes by class/proportion)
    assert (found & fg).sum() / fg.sum() > 0.6
    assert set(seg.shape_names) <= set(open_recording(rec_path).shapes)


def test_default_config_is_documented():
    cfg = SegmentConfig()
    assert cfg.method == "learned" and cfg.checkpoint == "" and DEFAULT_CHECKPOINT.name == "segmenter.pt"


def test_low_score_part_repeating_a_library_shape_is_dropped():
    from vid2sim.datasets.shapes import Shape
    from vid2sim.models.segmenter.model import Detection
    from vid2sim.pipeline.segment import _confirmed

    m = np.zeros((4, 4), bool)
    shapes = {"cart": Shape("cart", "box", size=(0.3, 0.16, 0.1)), "pole": Shape("pole", "capsule", radius=0.025,
                                                                                 length=0.6)}
    dets = [Detection(m, 0, 0.9), Detection(m, 0, 0.3), Detection(m, 1, 0.2), Detection(m, 1, 0.6)]
    seen = [(0.3, 0.16), (0.3, 0.16), (0.65, 0.05), (0.65, 0.05)]
    # the 0.3 piece repeats the cart a confident part explains; the 0.2 one explains the pole
    assert _confirmed(dets, ["cart", "cart", "pole", None], seen, shapes, True, 1.6, 0.5) == [0, 2, 3]
    assert _confirmed(dets, ["cart", "cart", None, "pole"], seen, shapes, True, 1.6, 0.5) == [0, 3]
    # two parts below the threshold name the cart: the one of the cart's size keeps it, not
    # the higher score (a 0.22 x 0.11 m box only the depth shows, scored 0.3, against the
    # network's 0.16 detection seen 0.29 x 0.12 m: size_cost 0.56 against 0.34)
    low = [Detection(m, 0, 0.3), Detection(m, 0, 0.16), Detection(m, 1, 0.6)]
    assert _confirmed(low, ["cart", "cart", "pole"], [(0.22, 0.11), (0.29, 0.12), (0.65, 0.05)], shapes, True, 1.6,
                      0.5) == [1, 2]
    assert _confirmed(low, ["cart", "cart", "pole"], [(0.29, 0.12), (0.22, 0.11), (0.65, 0.05)], shapes, True, 1.6,
                      0.5) == [0, 2]


def test_a_rod_takes_the_other_rod_class_only_where_its_own_class_has_no_fit():
    from vid2sim.datasets.shapes import Shape
    from vid2sim.models.segmenter.model import Detection
    from vid2sim.pipeline.segment import match_shapes

    mask = np.zeros((4, 4), bool)
    rod = Detection(mask, label=3, score=0.9, class_scores=np.array([0.0, 0.01, 0.0, 0.9]))  # "cylinder"
    seen = [(0.23, 0.033)]
    arm = Shape("arm", "capsule", radius=0.0165, length=0.2)
    both = {"arm": arm, "rod": Shape("rod", "cylinder", radius=0.0165, length=0.23)}
    assert match_shapes([rod], seen, {"arm": arm}, True, 1.6, Path("shapes.json"), 0) == ["arm"]
    assert match_shapes([rod], seen, both, True, 1.6, Path("shapes.json"), 0) == ["rod"]
    ball = {"ball": Shape("ball", "sphere", radius=0.1)}  # no rod at all: still an error naming it
    with pytest.raises(RecordingError, match="matches no library shape"):
        match_shapes([rod], seen, ball, True, 1.6, Path("shapes.json"), 0)


def test_a_box_is_matched_by_the_face_it_shows():
    """The cabinet seen from its 120-frame recording's camera: the door's face (0.45 x 0.30 m
    seen) and the drawer's front (0.45 x 0.16 m seen). By their two largest extents the door
    (0.46 x 0.36 x 0.02) and the drawer (0.40 x 0.36 x 0.12) look alike and the two swapped;
    the drawer's front is its 0.40 x 0.12 face. (Old costs: 2.505 right, 2.504 swapped.)"""
    from vid2sim.datasets.shapes import Shape
    from vid2sim.models.segmenter.model import Detection
    from vid2sim.pipeline.segment import match_shapes

    mask = np.zeros((4, 4), bool)
    shapes = {"carcass": Shape("carcass", "box", size=(0.5, 0.4, 0.6)),
              "drawer": Shape("drawer", "box", size=(0.4, 0.36, 0.12)),
              "door": Shape("door", "box", size=(0.46, 0.02, 0.36))}
    dets = [Detection(mask, 0, 0.99), Detection(mask, 0, 0.99), Detection(mask, 0, 0.98)]
    seen = [(0.44798734, 0.29810427), (0.72366855, 0.38514106), (0.44831957, 0.15879372)]  # measured
    assert match_shapes(dets, seen, shapes, True, 1.6, Path("rec"), 0) == ["door", "carcass", "drawer"]


def test_an_elongated_region_is_magnified_in_overlapping_views_and_a_wall_is_left_out():
    """A hanging chain 98 px tall and 35 px wide in a 320 x 240 frame: one view of the frame's
    aspect would magnify it 240 / 163 = 1.47 times (below ZOOM_MIN); three views along it,
    each overlapping the next by half, magnify it 2.9 times and together cover it. A wall
    detection across the frame does not widen the region."""
    from vid2sim.models.segmenter.model import Detection
    from vid2sim.pipeline.segment import ZOOM_MIN, zoom_tiles

    chain = np.zeros((240, 320), bool)
    chain[92:190, 153:188] = True
    views, s = zoom_tiles([Detection(chain, 1, 0.9)], np.zeros((240, 320)), 4.0)
    assert 240 / (1.5 * 98 + 16) < ZOOM_MIN and len(views) == 3 and 2.5 < s < 3.0
    for x0, y0, x1, y1 in views:
        assert abs((x1 - x0) / (y1 - y0) - 320 / 240) < 0.03 and x0 <= 153 and x1 >= 188
    cover = np.zeros((240, 320), bool)
    for x0, y0, x1, y1 in views:
        cover[y0:y1, x0:x1] = True
    assert cover[chain].all()
    wall = np.zeros((240, 320), bool)
    wall[:120] = True
    assert zoom_tiles([Detection(wall, 0, 0.99), Detection(chain, 1, 0.9)], np.ones((240, 320)), 4.0) == (views, s)
    assert zoom_tiles([Detection(wall, 0, 0.99)], np.ones((240, 320)), 4.0) == ([], 1.0)


@pytest.mark.parametrize("side_a,side_b", [(0.12, 0.12), (0.14, 0.06)])
def test_a_flat_face_measures_its_sides_not_its_diagonal(side_a, side_b):
    """A rectangular plate facing the camera at 1 m, turned 30 deg in the image plane. A
    square's points have no main axis: its spread (1st-99th percentile)
    measured 0.137 m for the 0.12 m square along the axes its points' covariance happened to
    give; the smallest-area rectangle gives the sides (the 0.14 x 0.06 m plate measures the
    same either way)."""
    from vid2sim.pipeline.segment_size import measure_extents

    f, c = 600.0, 150.0
    K = np.array([[f, 0, c], [0, f, c], [0, 0, 1.0]])
    v, u = np.mgrid[0:300, 0:300]
    x, y = (u - c) / f, (v - c) / f  # plane z = 1 m
    t = np.deg2rad(30.0)
    a, b = np.cos(t) * x + np.sin(t) * y, -np.sin(t) * x + np.cos(t) * y
    mask = (np.abs(a) <= side_a / 2) & (np.abs(b) <= side_b / 2)
    depth = np.where(mask, 1.0, 3.0).astype(np.float32)  # a wall 2 m behind the plate
    length, width = measure_extents(mask, depth, K)
    # the 1st-99th percentile spread of a uniform side of length L is 0.98 L; the eroded
    # mask loses one pixel (1.7 mm at 1 m) on each edge
    assert length == pytest.approx(0.98 * max(side_a, side_b), abs=0.006)
    assert width == pytest.approx(0.98 * min(side_a, side_b), abs=0.006)


def _cut_cart(gap_depth: float | None, width_m: float = 0.3):
    """A 320 x 240 depth image (fx 300) of a box face ``width_m`` x 0.1 m at 2 m, cut by a
    vertical strip 0.05 m wide at its middle whose depth is ``gap_depth`` m (None: the face's
    own), and the two halves' masks as two box detections named "cart"."""
    from vid2sim.models.segmenter.model import Detection

    K = np.array([[300.0, 0, 160], [0, 300.0, 120], [0, 0, 1]])
    depth = np.zeros((240, 320), np.float32)
    half_w, half_h, gap = (round(x * 300 / 2.0 / 2) for x in (width_m, 0.1, 0.05))
    depth[120 - half_h:120 + half_h, 160 - half_w:160 + half_w] = 2.0
    left = depth > 0
    left[:, 160 - gap:] = False
    right = depth > 0
    right[:, :160 + gap] = False
    if gap_depth is not None:
        depth[120 - half_h:120 + half_h, 160 - gap:160 + gap] = gap_depth
    scores = np.eye(5)[0] * 0.5
    return depth, K, [Detection(left, 0, 0.5, scores), Detection(right, 0, 0.45, scores)]


@pytest.mark.parametrize("gap_depth, width_m, joined", [(1.9, 0.3, True), (None, 0.3, True), (3.0, 0.3, False),
                                                        (1.9, 0.6, False)])
def test_a_part_cut_in_two_by_a_nearer_rod_is_joined(gap_depth, width_m, joined):
    """The realistic cartpole's cart seen in two boxes either side of the pole (0.13 x 0.09 m
    and 0.11 x 0.08 m, both named cart: a half cart looks like its 0.16 x 0.10 m end face),
    drawn here: the halves are joined into one detection where the strip between them is
    nearer (a rod in front) or the face itself, and the union (0.30 x 0.10 m) fits the cart
    better than either half. Seen through to a wall 1 m behind, or with a union twice the
    cart's length (two carts), they stay two."""
    from vid2sim.datasets.shapes import Shape
    from vid2sim.models.segmenter.normals import smooth_depth
    from vid2sim.pipeline.segment_pieces import join_pieces
    from vid2sim.pipeline.segment_size import measure_extents

    shapes = {"cart": Shape("cart", "box", size=(0.3, 0.16, 0.1)),
              "pole": Shape("pole", "capsule", radius=0.025, length=0.6)}
    depth, K, dets = _cut_cart(gap_depth, width_m)
    sm = smooth_depth(depth)
    seen = [measure_extents(d.mask, depth, K, sm) for d in dets]
    out, names, seen_out = join_pieces(dets, ["cart", "cart"], seen, depth, K, sm, shapes, True, 1.6)
    assert len(out) == (1 if joined else 2) and names == ["cart"] * len(out), (seen, seen_out)
    if joined:
        assert (out[0].mask == (dets[0].mask | dets[1].mask)).all() and out[0].score == 0.5
        whole = measure_extents(depth > 0, np.full_like(depth, 2.0), K)  # the uncut face, as measured
        assert np.allclose(seen_out[0], whole, atol=0.01) and seen_out[0][0] > 1.5 * max(e[0] for e in seen), (
            seen_out, whole, seen)


@pytest.mark.parametrize("across_px", [3, 4])
def test_a_rod_a_few_pixels_across_keeps_its_width(across_px):
    """A rod 0.5 m long and ``across_px`` pixels across at 5 m (fx 200: 25 mm per pixel), flat
    in depth. The 3x3 erosion leaves a line 1-2 px wide, which measured 0-25 mm across
    (the far double pendulum's 0.05 m link: 0.018 m, a size cost above a fit); the mask is
    measured whole: its pixel centres span across_px - 1 pixels."""
    from vid2sim.pipeline.segment_size import measure_extents

    K = np.array([[200.0, 0, 80], [0, 200.0, 60], [0, 0, 1]])
    depth = np.zeros((120, 160), np.float32)
    depth[50:50 + across_px, 70:90] = 5.0
    length, width = measure_extents(depth > 0, depth, K)
    assert abs(width - (across_px - 1) * 0.025) < 0.008 and abs(length - 19 * 0.025) < 0.02, (length, width)


@pytest.mark.parametrize("gap_depth, width_m, grown", [(1.9, 0.3, True), (3.0, 0.3, False), (1.9, 0.6, False)])
def test_a_part_found_only_on_one_side_of_a_nearer_rod_is_completed(gap_depth, width_m, grown):
    """As above, but the network finds only the left piece (named cart) and the rod in front
    (named pole): the right piece, unclaimed, on the far side of the rod and continuous in depth,
    is added to the cart, whose union then measures the whole face. Seen through to a wall 1 m
    behind (no rod), or where the union would be twice the cart's length, nothing is added."""
    from vid2sim.datasets.shapes import Shape
    from vid2sim.models.segmenter.model import Detection
    from vid2sim.models.segmenter.normals import smooth_depth
    from vid2sim.pipeline.segment_pieces import complete_pieces
    from vid2sim.pipeline.segment_size import measure_extents

    shapes = {"cart": Shape("cart", "box", size=(0.3, 0.16, 0.1)),
              "pole": Shape("pole", "capsule", radius=0.025, length=0.6)}
    depth, K, (left, right) = _cut_cart(gap_depth, width_m)
    strip = (depth > 0) & ~left.mask & ~right.mask
    rod = gap_depth is not None and gap_depth < 2.0
    dets = [left, Detection(strip, 1, 0.6, None)] if rod else [left]   # a wall behind is no detection
    sm = smooth_depth(depth)
    seen = [measure_extents(d.mask, depth, K, sm) for d in dets]
    out, seen_out = complete_pieces(dets, ["cart", "pole"][:len(dets)], seen, depth, K, sm, shapes, True, 1.6)
    if rod:
        assert (out[1].mask == strip).all() and seen_out[1] == seen[1]   # the rod gains nothing
    if grown:
        whole = left.mask | right.mask
        assert not (out[0].mask & ~whole).any() and (out[0].mask & whole).sum() >= 0.98 * whole.sum()
        both = measure_extents(whole, depth, K, sm)
        assert seen_out[0][0] > 1.5 * seen[0][0] and np.allclose(seen_out[0], both, atol=0.005), (seen, seen_out, both)
    else:
        assert (out[0].mask == left.mask).all() and seen_out[0] == seen[0]


@pytest.mark.parametrize("right_name, grown", [(None, True), ("cart", False)])
def test_a_piece_held_by_a_detection_matching_no_shape_completes_the_part(right_name, grown):
    """As above, with the right piece held by a detection of its own: one that matches no library
    shape (name None, background to be) does not keep the cart from growing over it; one named
    after a library shape (a part of its own) does."""
    from vid2sim.datasets.shapes import Shape
    from vid2sim.models.segmenter.model import Detection
    from vid2sim.models.segmenter.normals import smooth_depth
    from vid2sim.pipeline.segment_pieces import complete_pieces
    from vid2sim.pipeline.segment_size import measure_extents

    shapes = {"cart": Shape("cart", "box", size=(0.3, 0.16, 0.1)),
              "pole": Shape("pole", "capsule", radius=0.025, length=0.6)}
    depth, K, (left, right) = _cut_cart(1.9, 0.3)
    strip = (depth > 0) & ~left.mask & ~right.mask
    dets = [left, Detection(strip, 1, 0.6, None), right]
    sm = smooth_depth(depth)
    seen = [measure_extents(d.mask, depth, K, sm) for d in dets]
    out, seen_out = complete_pieces(dets, ["cart", "pole", right_name], seen, depth, K, sm, shapes, True, 1.6)
    assert (out[1].mask == strip).all() and (out[2].mask == right.mask).all()   # the others keep their masks
    if grown:
        whole = left.mask | right.mask
        assert not (out[0].mask & ~whole).any() and (out[0].mask & whole).sum() >= 0.98 * whole.sum()
        assert seen_out[0][0] > 1.5 * seen[0][0], (seen, seen_out)
    else:
        assert (out[0].mask == left.mask).all() and seen_out[0] == seen[0]
