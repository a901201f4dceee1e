"""The tracker's first steps away from the segmentation frame (track_shift.py), parts inside one
another (track_overlap.py) and the colour check of the segmentation frame (track_scene.py)."""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from scipy.spatial.transform import Rotation
import torch

from vid2sim.datasets.recording import Camera, RecordingWriter, open_recording
from vid2sim.datasets.shapes import Shape
from vid2sim.models.render import Primitive, make_renderer
from vid2sim.pipeline import track, track_fit, track_start
from vid2sim.pipeline.artifacts import Segmentation
from vid2sim.pipeline.track_overlap import inside_shares, interior_samples
from vid2sim.pipeline.track_scene import TrackScene, alike_colours, chroma, surroundings

BOX = Shape("box", "box", size=(0.28, 0.14, 0.08))
ROD = Shape("rod", "capsule", radius=0.03, length=0.25)
ROD_DOWN = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])   # the rod's axis along world x


def _flying_pair(path: Path, seed: int, frames: int = 8, speed: float = 0.1) -> tuple[np.ndarray, Segmentation]:
    """A box and a rod beside its end, 1.2 m in front of a wall 2 m away (160x120), flying together
    across the view at ``speed`` m a frame (a third of the box's length), perpendicular to the box's
    long axis; returns the true poses (T, 2, 4, 4) and the true masks of frame ``seed``."""
    cam = Camera(160, 120, 120.0, 120.0, 79.5, 59.5)
    r = make_renderer(cam, [BOX, ROD])
    truth = np.tile(np.eye(4), (frames, 2, 1, 1))
    for i in range(frames):
        c = np.array([0.0, speed * (i - seed), 1.2])
        truth[i, 0, :3, 3] = c
        truth[i, 1, :3, :3] = ROD_DOWN
        truth[i, 1, :3, 3] = c + [0.14, -0.1, 0.0]
    with RecordingWriter(path, cam, {"box": BOX, "rod": ROD}) as w:
        for i in range(frames):
            out = r.render(torch.as_tensor(truth[i]))
            body = out.body.numpy().reshape(120, 160)
            w.add(np.where(body >= 0, out.depth.numpy().reshape(120, 160), 2.0).astype(np.float32))
            if i == seed:
                masks = np.stack([body == 0, body == 1]).astype(np.uint8)
    return truth, Segmentation(masks, seed, ["box", "rod"], np.ones(2))


@pytest.mark.slow  # over 10 s on the shared 2-core machine
def test_a_pair_segmented_mid_flight_is_followed_from_where_its_image_went(tmp_path):
    """Segmented at frame 3 of a pair flying 100 mm a frame: started at rest in the frames next to
    it (``first_reach_m=0``, the tracker before), the rod ends 87-205 mm off and the box 19-146 mm
    (measured); started also where each part's image went, both stay within 5 mm (measured 4)."""
    truth, seg = _flying_pair(tmp_path / "pair", seed=3)
    rec = open_recording(tmp_path / "pair")
    rest = track.run(track.TrackConfig(overlay=False, prior=track.TrackPrior(first_reach_m=0.0)), rec, seg, tmp_path)
    err = np.linalg.norm(rest.world_from_body[:, :, :3, 3] - truth[:, :, :3, 3], axis=-1)
    assert np.median(err[:, 1]) > 0.05
    poses = track.run(track.TrackConfig(overlay=False), rec, seg, tmp_path)
    err = np.linalg.norm(poses.world_from_body[:, :, :3, 3] - truth[:, :, :3, 3], axis=-1)
    assert err.max() < 0.005 and not poses.lost.any(), err.max()


def test_a_part_mostly_inside_another_is_lost_unless_they_were_nested_at_the_start(tmp_path):
    """The share of the rod's volume inside the box: 0 beside it, about 1 with its centre 40 mm
    inside the box's face, along the box's length; the tracker flags the part inside as lost, but not
    for a pair that already overlapped at its start poses (a drawer in its carcass)."""
    prims = [Primitive.from_shape(BOX), Primitive.from_shape(ROD)]
    samples = [interior_samples(p) for p in prims]
    assert len(samples[0]) == 9 ** 3   # a box fills its own grid
    beside, inside = np.tile(np.eye(4), (2, 1, 1)), np.tile(np.eye(4), (2, 1, 1))
    beside[1, :3, :3] = inside[1, :3, :3] = ROD_DOWN
    beside[1, :3, 3] = [0.14 + 0.155 + 0.005, 0.0, 0.0]
    inside[1, :3, 3] = [0.0, 0.03, 0.0]
    s_beside = inside_shares(prims, torch.as_tensor(beside), samples)
    s_inside = inside_shares(prims, torch.as_tensor(inside), samples)
    assert s_beside.max() == 0.0
    assert s_inside[1, 0] > 0.9 and s_inside[0, 1] < 0.3, s_inside   # the rod's volume in the box (1.0), the box's in it 0.21
    truth, seg = _flying_pair(tmp_path / "pair", seed=0, frames=1)
    rec = open_recording(tmp_path / "pair")
    tracker = track._Tracker(track.TrackConfig(), TrackScene(rec, prims, track.TrackConfig()), planar=False)
    support = np.ones(2)
    assert not tracker.inside(torch.as_tensor(inside), support).any()   # not judged before the start is known
    tracker.judge_overlaps(torch.as_tensor(beside))
    assert tracker.inside(torch.as_tensor(inside), support).tolist() == [False, True]
    tracker.judge_overlaps(torch.as_tensor(inside))   # nested at the start
    assert not tracker.inside(torch.as_tensor(inside), support).any()


def _grey_pair(path: Path) -> tuple[Segmentation, TrackScene, np.ndarray, np.ndarray]:
    """One frame of the flying box and rod (``_flying_pair``, seed 0): its true masks, a TrackScene over
    it (depth noise k 0.001), its (120, 160) depth in metres, and a (120, 160, 3) uint8 colour image of
    mid grey to paint the parts on."""
    _, seg = _flying_pair(path / "pair", seed=0, frames=1)
    rec = open_recording(path / "pair")
    prims = [Primitive.from_shape(BOX), Primitive.from_shape(ROD)]
    cfg = track.TrackConfig(noise=track.TrackNoise(depth_noise_k=0.001))
    return seg, TrackScene(rec, prims, cfg), rec.depth(0), np.full((120, 160, 3), 128, np.uint8)


def test_colour_labels_that_miss_the_parts_own_pixels_switch_colour_off(tmp_path):
    """A part whose mask pixels mostly fall outside its mean colour's tolerance (two faces of
    different colour: half red, half green) would be pushed off its own pixels by colour
    silhouettes: its colour is dropped (its pixels undecided, not "no part"), the other part's
    kept; with no part's colour left, none is used."""
    seg, scene, depth, rgb = _grey_pair(tmp_path)
    rgb[seg.masks[0] > 0] = (200, 40, 40)
    rgb[seg.masks[1] > 0] = (40, 40, 200)
    scene.set_background(depth, seg.masks, rgb)
    assert scene.body_chroma is not None and scene.color_recall(rgb, seg.masks).min() > 0.99
    two = rgb.copy()
    v, u = np.nonzero(seg.masks[0])
    left = u < np.median(u)
    two[v[left], u[left]] = (40, 200, 40)
    scene.set_background(depth, seg.masks, two)
    assert np.isnan(scene.body_chroma[0]).all() and np.isfinite(scene.body_chroma[1]).all()
    flat = np.flatnonzero(seg.masks.reshape(2, -1)[0])
    assert set(scene.labels(two, flat).tolist()) == {-2}   # the box's pixels: undecided, not "no part"
    v, u = np.nonzero(seg.masks[1])
    left = u < np.median(u)
    two[v[left], u[left]] = (200, 40, 40)   # the rod half red, half blue as well: no part keeps a colour
    scene.set_background(depth, seg.masks, two)
    assert scene.body_chroma is None


def test_parts_of_alike_colours_get_no_colour_labels_that_drag_one_onto_the_other(tmp_path):
    """A yellow box and an olive rod, 60 % of its pixels in a greener shade and 40 % in the box's own
    yellow: their mean chromaticities lie 0.071 apart, within twice ``noise.color_tol`` (0.12), so a
    pixel's label cannot tell them apart: 40 % of the rod's pixels took the box's label (its colour
    silhouette would drag the box onto the rod). Both parts' colours are dropped and those pixels are
    undecided. With the box blue, both keep their colours."""
    seg, scene, depth, rgb = _grey_pair(tmp_path)
    rgb[seg.masks[0] > 0] = (200, 170, 60)
    v, u = np.nonzero(seg.masks[1])
    shade = u < np.quantile(u, 0.6)
    rgb[v[shade], u[shade]] = (175, 170, 100)
    rgb[v[~shade], u[~shade]] = (200, 172, 64)
    C = np.stack([chroma(rgb)[m > 0].mean(0) for m in seg.masks])
    assert np.linalg.norm(C[0] - C[1]) == pytest.approx(0.071, abs=0.004)
    np.testing.assert_array_equal(alike_colours(C, 0.12), [True, True])
    np.testing.assert_array_equal(alike_colours(C, 0.06), [False, False])
    scene.set_background(depth, seg.masks, rgb)
    assert scene.body_chroma is None   # no part keeps a colour: no pixel takes the box's label
    rod = np.flatnonzero(seg.masks.reshape(2, -1)[1])
    blue = rgb.copy()
    blue[seg.masks[0] > 0] = (40, 40, 200)
    scene.set_background(depth, seg.masks, blue)
    assert np.isfinite(scene.body_chroma).all()   # apart: both keep their colours
    assert (scene.labels(blue, rod) == 0).sum() == 0   # and none of the rod's pixels is the box's


def test_a_part_of_its_backgrounds_colour_gets_no_colour_label_that_holds_it_on_its_start(tmp_path):
    """A blue box on a grey wall with a rod whose greyish pink lies 0.038 from the wall's colour: where
    the rod lay at the start the wall's colour is not known, so wall pixels there (0.038 from the
    rod's colour, within ``noise.color_tol`` 0.06) would take the rod's label and hold it there. The
    rod's colour is dropped (the wall around it, ``surroundings``, is measured 0.038 away); the
    box's, 0.46 from the wall's, is kept."""
    seg, scene, depth, rgb = _grey_pair(tmp_path)
    rgb[seg.masks[0] > 0] = (40, 40, 200)
    rgb[seg.masks[1] > 0] = (140, 125, 120)
    ch = chroma(rgb)
    C = np.stack([ch[m > 0].mean(0) for m in seg.masks])
    fg = cv2.dilate(seg.masks.any(0).astype(np.uint8), np.ones((9, 9), np.uint8)) > 0
    around = surroundings(ch, seg.masks, fg)
    np.testing.assert_allclose(around, np.full((2, 3), 129 / 387), atol=1e-6)   # the wall's grey
    np.testing.assert_allclose(np.linalg.norm(C - around, axis=1), [0.462, 0.038], atol=0.002)
    np.testing.assert_array_equal(alike_colours(C, 0.06, around), [False, True])
    scene.set_background(depth, seg.masks, rgb)
    assert np.isfinite(scene.body_chroma[0]).all() and np.isnan(scene.body_chroma[1]).all()
    wall = np.full_like(rgb, 128)   # the rod gone: its place shows the wall, whose colour there is unknown
    assert (scene.labels(wall, np.flatnonzero(seg.masks.reshape(2, -1)[1])) == 1).sum() == 0


HUB = Shape("hub", "box", size=(0.12, 0.12, 0.08))
ARM = Shape("arm", "capsule", radius=0.02, length=0.3)
UPRIGHT = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])   # body z along -camera y (up)


def _hub_behind_arm(path: Path) -> tuple[np.ndarray, Segmentation]:
    """tree5's hub (a 0.12 x 0.12 x 0.08 box, 0.08 upright) 0.8 m in front of the camera, 1.2 m before a
    wall, an upright arm across its middle 85 mm nearer (424x240, clean depth); returns the true poses
    (2, 4, 4) and the true masks."""
    cam = Camera(424, 240, 205.0, 205.0, 211.5, 119.5)
    truth = np.tile(np.eye(4), (2, 1, 1))
    truth[0, :3, :3], truth[0, :3, 3] = UPRIGHT, [0.0, 0.0, 0.8]
    truth[1, :3, 3] = [0.0, 0.0, 0.8 - 0.085]
    truth[1, :3, :3] = UPRIGHT @ np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])   # its axis upright
    out = make_renderer(cam, [HUB, ARM]).render(torch.as_tensor(truth))
    body = out.body.numpy().reshape(240, 424)
    with RecordingWriter(path, cam, {"hub": HUB, "arm": ARM}) as w:
        for _ in range(2):
            w.add(np.where(body >= 0, out.depth.numpy().reshape(240, 424), 2.0).astype(np.float32))
    return truth, Segmentation(np.stack([body == 0, body == 1]).astype(np.uint8), 0, ["hub", "arm"], np.ones(2))


@pytest.mark.slow  # about 10 s on the shared 2-core machine
def test_a_box_started_with_its_sides_swapped_takes_the_other_fit_of_its_mask(tmp_path):
    """tree5 s36 (RealSense-like, ray cast): the hub's mask lost its half behind the arm to the arm's
    mask, its points fitted best with the hub's 0.08 and 0.12 sides swapped, 20 mm off; the frame's
    alignment kept it there (22 mm off in all 40 frames). Here the hub starts so (turned 90 deg about
    the camera's x, 20 mm up): aligned in the frame it stays over 15 mm off; given also a fit 10 mm off
    with the right sides, the start takes it (the whole frame's cost) and ends within 2 mm (the
    arm within 6 mm, along its axis)."""
    truth, seg = _hub_behind_arm(tmp_path / "hub")
    rec = open_recording(tmp_path / "hub")
    cfg = track.TrackConfig(overlay=False, noise=track.TrackNoise(depth_noise_k=0.002))
    scene = TrackScene(rec, [Primitive.from_shape(HUB), Primitive.from_shape(ARM)], cfg)
    scene.set_background(rec.depth(0), seg.masks, None)
    tracker = track._Tracker(cfg, scene, False)
    wrong = torch.as_tensor(truth).clone()
    wrong[0, :3, :3] = torch.as_tensor(np.eye(3))   # its 0.12 side upright, its 0.08 along the view
    wrong[0, 1, 3] -= 0.02
    right = torch.as_tensor(truth[0]).clone()
    right[:3, 3] += torch.tensor([0.01, 0.0, 0.0], dtype=right.dtype)
    T = tracker.frame(rec.depth(0), wrong, wrong, use_prior=False)[0]
    assert float((T[0, :3, 3] - torch.as_tensor(truth[0, :3, 3])).norm()) > 0.015
    T = track_fit.other_placements(tracker, rec.depth(0), None, T, [[wrong[0], right], [wrong[1]]])
    assert float((T[0, :3, 3] - torch.as_tensor(truth[0, :3, 3])).norm()) < 0.002
    assert float((T[1, :3, 3] - torch.as_tensor(truth[1, :3, 3])).norm()) < 0.006   # along its axis (measured 4.7 mm)


def test_a_mask_that_bled_onto_the_wall_behind_starts_its_part_where_it_is(tmp_path):
    """The rod's mask grown by 2 px onto the wall 0.8 m behind it (about half the mask's pixels, as the
    learned masks of thin links far away: double_pendulum s57, thrown s56): fitted to all of the mask's
    points, the rod started 116 mm off (measured); fitted to the mask's pixels at its own depth
    (``track_fit.depth_cluster``), within 10 mm of where it is (measured under 1 mm)."""
    truth, seg = _flying_pair(tmp_path / "pair", seed=0, frames=1)
    rec = open_recording(tmp_path / "pair")
    grown = cv2.dilate(seg.masks[1], np.ones((5, 5), np.uint8))
    d0 = rec.depth(0)
    assert 0.35 < ((grown > 0) & (d0 > 1.9)).sum() / grown.sum() < 0.65
    seg = Segmentation(np.stack([seg.masks[0], grown]), 0, seg.shape_names, seg.scores)
    cfg = track.TrackConfig(noise=track.TrackNoise(depth_noise_k=0.0))
    prims = [Primitive.from_shape(BOX), Primitive.from_shape(ROD)]
    scene = TrackScene(rec, prims, cfg)
    scene.set_background(d0, seg.masks)
    T = track._initial_poses(cfg, scene, d0, seg).numpy()
    err = np.linalg.norm(T[:, :3, 3] - truth[0, :, :3, 3], axis=1)
    assert err.max() < 0.01, err


def test_depth_cluster_keeps_the_densest_depth_interval():
    """Of a mask's readings at 1.00-1.04 m (60 px), 3.0 m (30 px) and none (10 px), a 0.05 m interval keeps the
    60; with 6 sigmas of 0.01 m added (0.11 m) the same; an empty mask keeps nothing."""
    depth = np.zeros((10, 10))
    depth[:6] = np.linspace(1.0, 1.04, 60).reshape(6, 10)
    depth[6:9] = 3.0
    mask = np.ones((10, 10), bool)
    assert track_fit.depth_cluster(depth, mask, 0.05).sum() == 60
    assert track_fit.depth_cluster(depth, mask, 0.05, lambda z: 0 * z + 0.01).sum() == 60
    assert not track_fit.depth_cluster(depth, np.zeros_like(mask), 0.05).any()


DRAWER = Shape("drawer", "box", size=(0.4, 0.36, 0.12))
FACING = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])   # body y along the view, body z up


def _drawer_square_on(path: Path, frames: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The drawer square on, 1.2 m before the camera, a wall at 2.5 m (424x240, clean depth): its true
    pose (4, 4) and mask (1, H, W) uint8."""
    cam = Camera(424, 240, 205.0, 205.0, 211.5, 119.5)
    truth = np.eye(4)
    truth[:3, :3], truth[:3, 3] = FACING, [0.0, 0.0, 1.2]
    out = make_renderer(cam, [DRAWER]).render(torch.as_tensor(truth[None]))
    body = out.body.numpy().reshape(240, 424)
    with RecordingWriter(path, cam, {"drawer": DRAWER}) as w:
        for _ in range(frames):
            w.add(np.where(body >= 0, out.depth.numpy().reshape(240, 424), 2.5).astype(np.float32))
    return truth, (body == 0)[None].astype(np.uint8)


def test_a_box_is_started_behind_its_seen_points_also_by_its_half_extent_along_the_view():
    """The cabinet's drawer (0.4 x 0.36 x 0.12 m) seen square on its front: started 0.06 m (its smallest half
    side) and 0.18 m (its centre's depth behind the face) behind its seen points; turned so its 0.12 side lies
    along the view, 0.06 m only; at 45 deg between its 0.36 and 0.12 sides, also (0.18 + 0.06) / sqrt(2) =
    0.170 m. tree5's hub (0.12 x 0.12 x 0.08) square on its 0.12 side: 0.06 m lies within the 0.03 m gate of
    its smallest half side, so 0.04 m only. A capsule: its radius."""
    prim = Primitive.from_shape(DRAWER)
    view = np.array([0.0, 0.0, 1.0])
    assert track_fit.start_depths(prim, FACING, view, 0.03) == pytest.approx([0.06, 0.18])
    assert track_fit.start_depths(prim, np.eye(3), view, 0.03) == pytest.approx([0.06])
    c = np.sqrt(0.5)
    assert track_fit.start_depths(prim, FACING, np.array([0.0, -c, c]), 0.03) == pytest.approx([0.06, 0.24 * c])
    assert track_fit.start_depths(Primitive.from_shape(HUB), FACING, view, 0.03) == pytest.approx([0.04])
    assert track_fit.start_depths(Primitive.from_shape(ROD), np.eye(3), view, 0.03) == pytest.approx([0.03])


def test_a_box_seen_square_on_its_front_is_fitted_at_its_depth(tmp_path):
    """cabinet s137 (RealSense-like): the drawer, seen on its 0.4 x 0.12 front only (its top inside the carcass),
    was started 0.06 m (its smallest half side) behind the face instead of 0.18 m; no orientation's fit found
    the drawer where it is, and the track kept it turned 90 deg, 165 mm off, in all 40 frames (each orientation
    is now also started 0.18 m behind, and the better of its two fits kept). Here the drawer
    alone, square on 1.2 m from the camera (clean depth): before, the best fit of its mask lay 20 mm off with
    its 0.4 and 0.36 sides swapped, and no fit had all three sides right (measured); now the best
    fit is within 1 mm and 1 deg."""
    truth, mask = _drawer_square_on(tmp_path / "drawer")
    rec = open_recording(tmp_path / "drawer")
    cfg = track.TrackConfig(overlay=False, noise=track.TrackNoise(depth_noise_k=0.002))
    prim = Primitive.from_shape(DRAWER)
    scene = TrackScene(rec, [prim], cfg)
    scene.set_background(rec.depth(0), mask, None)
    obs, _ = track_start.mask_observation(cfg, scene, rec.depth(0), mask[0] > 0, mask[0] > 0)
    _, T = track_fit.fit_primitive(cfg, prim, obs)
    T = T.numpy()
    assert np.linalg.norm(T[:3, 3] - truth[:3, 3]) < 0.001
    turn = np.degrees(np.arccos(np.clip(np.abs(np.diag(truth[:3, :3].T @ T[:3, :3])), -1, 1)))
    assert turn.max() < 1.0, turn   # each axis along the truth's (a box's half turns are the same box)

def _rod_pair(path: Path) -> tuple[np.ndarray, Segmentation]:
    """Two alike rods along world x, 120 mm apart one above the other, 1.2 m in front of a wall 2 m
    away (160x120, three frames alike), segmented with the first rod's mask running over the second
    rod too and the second's over a patch of the wall below it larger than the rod (masks holding
    their neighbour's and the background's pixels); returns the true poses (2, 4, 4)."""
    cam = Camera(160, 120, 120.0, 120.0, 79.5, 59.5)
    r = make_renderer(cam, [ROD, ROD])
    truth = np.tile(np.eye(4), (2, 1, 1))
    for m, y in enumerate((-0.06, 0.06)):
        truth[m, :3, :3] = ROD_DOWN
        truth[m, :3, 3] = [0.0, y, 1.2]
    with RecordingWriter(path, cam, {"rod": ROD}) as w:
        out = r.render(torch.as_tensor(truth))
        body = out.body.numpy().reshape(120, 160)
        for _ in range(3):
            w.add(np.where(body >= 0, out.depth.numpy().reshape(120, 160), 2.0).astype(np.float32))
    wall = np.zeros_like(body, bool)
    wall[80:95, 70:90] = True   # a patch of the wall below the second rod
    masks = np.stack([body >= 0, (body == 1) | wall]).astype(np.uint8)
    return truth, Segmentation(masks, 0, ["rod", "rod"], np.ones(2))


@pytest.mark.slow  # over 60 s on the shared 2-core machine
def test_a_start_that_covers_little_of_its_mask_is_fitted_again_to_a_part_of_it(tmp_path, monkeypatch):
    """The masks hold their neighbour's and the wall's pixels: without the second fit (``START_RECALL``
    0) some rod is over 50 mm from every tracked one; fitted again to parts of the masks where a start
    shows on under half its mask's pixels (track_start.py), each rod has a tracked one within 5 mm."""
    from vid2sim.pipeline import track_start

    truth, seg = _rod_pair(tmp_path / "rods")
    rec = open_recording(tmp_path / "rods")
    cfg = track.TrackConfig(overlay=False)

    def worst(poses):   # each true rod's distance to the tracked rod nearest it, worst over frames
        d = np.linalg.norm(poses.world_from_body[:, :, None, :3, 3] - truth[None, None, :, :3, 3], axis=-1)
        return float(d.min(1).max())

    monkeypatch.setattr(track_start, "START_RECALL", 0.0)
    assert worst(track.run(cfg, rec, seg, tmp_path)) > 0.05
    monkeypatch.setattr(track_start, "START_RECALL", 0.5)
    assert worst(track.run(cfg, rec, seg, tmp_path)) < 0.005


def test_the_coarse_start_pass_offers_its_mask_fits_to_the_whole_frame_judgement(tmp_path, monkeypatch):
    """cabinet s119 (clean): the door's fits of its mask at the measured noise held the right one at 3.9 times
    the best (a door turned 90 deg in its own plane, its lower edge hidden), beyond ``start_ratio``; the
    coarse pass's fits held it at 1.5 times their best, but only the first pass's fits were judged in the
    whole frame (``other_placements``), and the turned door was kept (frame cost 10200 against 8484 with the
    door at the truth). Here, on clean depth (so a coarse pass is made), every body's fits offered to that
    judgement are the first pass's followed by the coarse pass's: the drawer's list holds both passes' best
    fits (before: the first pass's only)."""
    truth, mask = _drawer_square_on(tmp_path / "drawer", frames=2)
    rec = open_recording(tmp_path / "drawer")
    seg = Segmentation(mask, 0, ["drawer"], np.ones(1))
    cfg = track.TrackConfig(overlay=False, noise=track.TrackNoise(depth_noise_k=0.0))
    scene = TrackScene(rec, [Primitive.from_shape(DRAWER)], cfg)
    scene.set_background(rec.depth(0), seg.masks, None)
    offered = []

    def judged(tracker, depth, rgb, T, others):
        offered.extend(others)
        return T

    monkeypatch.setattr(track, "other_placements", judged)
    track._start_poses(track._Tracker(cfg, scene, False), rec, seg)
    fine, coarse = [], []
    track._initial_poses(cfg, scene, rec.depth(0), seg, fine)
    coarse_cfg = track.TrackConfig(overlay=False, noise=track.TrackNoise(depth_noise_k=cfg.noise.start_noise_k))
    coarse_scene = TrackScene(rec, scene.prims, coarse_cfg)
    coarse_scene.set_background(rec.depth(0), seg.masks, None)
    track._initial_poses(coarse_cfg, coarse_scene, rec.depth(0), seg, coarse)
    assert len(offered) == 1 and len(offered[0]) == len(fine[0]) + len(coarse[0])
    for got, want in zip(offered[0], fine[0] + coarse[0]):
        assert float((got - want).abs().max()) < 1e-9


CARCASS = Shape("carcass", "box", size=(0.5, 0.4, 0.6))
DOOR = Shape("door", "box", size=(0.46, 0.02, 0.36))


def _carcass_and_open_door(path: Path) -> tuple[np.ndarray, Segmentation]:
    """The cabinet's carcass 2 m away, seen 25 deg from above, its door hinged at the front's left edge and
    open 40 deg (320x240, clean depth, a wall at 4 m), segmented with the carcass's mask drawn over the
    door too (cabinet s127's segmentation); returns the true poses (2, 4, 4)."""
    cam = Camera(320, 240, 250.0, 250.0, 159.5, 119.5)
    truth = np.tile(np.eye(4), (2, 1, 1))
    truth[0, :3, :3] = Rotation.from_euler("x", -25, degrees=True).as_matrix() @ FACING
    truth[0, :3, 3] = [0.0, 0.0, 2.0]
    swing = Rotation.from_euler("z", -40, degrees=True).as_matrix()
    truth[1, :3, :3] = truth[0, :3, :3] @ swing
    truth[1, :3, 3] = truth[0, :3, :3] @ (np.array([-0.25, -0.21, -0.1]) + swing @ [0.23, 0.0, 0.0]) + truth[0, :3, 3]
    out = make_renderer(cam, [CARCASS, DOOR]).render(torch.as_tensor(truth))
    body = out.body.numpy().reshape(240, 320)
    with RecordingWriter(path, cam, {"carcass": CARCASS, "door": DOOR}) as w:
        for _ in range(2):
            w.add(np.where(body >= 0, out.depth.numpy().reshape(240, 320), 4.0).astype(np.float32))
    return truth, Segmentation(np.stack([body >= 0, body == 1]).astype(np.uint8), 0, ["carcass", "door"], np.ones(2))


def test_a_mask_is_fitted_without_the_pixels_of_masks_nested_in_it():
    """A mask that holds over 85 % of a smaller mask's pixels (a door's in the carcass's) loses them; one
    holding less (two neighbouring links' masks sharing their joint: 59 % in double_pendulum s132), or a
    larger mask, or nothing but them, keeps all its own."""
    masks = np.zeros((3, 10, 10), np.uint8)
    masks[0, :, :6] = 1                  # 60 px
    masks[1, 2:6, 3:8] = 1               # 20 px, 12 inside mask 0
    masks[2, 0:2, 0:2] = 1               # 4 px, all inside mask 0
    assert track_fit.own_pixels(masks, 0).sum() == 60 - 4   # mask 1 is 60 % inside: kept
    assert track_fit.own_pixels(masks, 0, share=0.5).sum() == 60 - 12 - 4
    assert track_fit.own_pixels(masks, 1).sum() == 20   # mask 0 is larger
    assert track_fit.own_pixels(masks, 2).sum() == 4
    assert track_fit.own_pixels(np.stack([masks[2], masks[2]]), 0).sum() == 4   # equal masks keep theirs


@pytest.mark.slow  # about 30 s on the shared 2-core machine
def test_a_carcass_whose_mask_holds_its_open_door_starts_where_it_is(tmp_path, monkeypatch):
    """cabinet s127 (RealSense-like, close): the carcass's mask held the door's and the drawer's pixels, the
    carcass was fitted to them too and started 88 mm off, and tracked 122 mm off in all 40 frames (the tree
    then wrong). Here the door open 40 deg in front of the carcass, inside its mask: fitted to the whole mask
    (``own_pixels`` returning the mask), the carcass starts 108 mm off (measured); without the door's pixels,
    within 15 mm (measured 7.7 mm), the door within 1 mm."""
    truth, seg = _carcass_and_open_door(tmp_path / "cabinet")
    rec = open_recording(tmp_path / "cabinet")
    cfg = track.TrackConfig(overlay=False, noise=track.TrackNoise(depth_noise_k=0.002))
    scene = TrackScene(rec, [Primitive.from_shape(CARCASS), Primitive.from_shape(DOOR)], cfg)
    scene.set_background(rec.depth(0), seg.masks, None)

    def start_errors():   # (2,) m: each part's start position against its truth
        T = track._initial_poses(cfg, scene, rec.depth(0), seg).numpy()
        return np.linalg.norm(T[:, :3, 3] - truth[:, :3, 3], axis=1)

    err = start_errors()
    assert err[0] < 0.015 and err[1] < 0.001, err
    monkeypatch.setattr(track, "own_pixels", lambda masks, k: masks[k] > 0)
    err = start_errors()
    assert err[0] > 0.05, err
