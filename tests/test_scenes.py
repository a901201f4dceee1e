"""Scene-randomised synthetic recordings (datasets/synthetic/scene.py, scene_render.py)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from vid2sim.datasets.recording import Camera
from vid2sim.datasets.shapes import Shape
from vid2sim.datasets.synthetic import make_recording, mechanism, simulate
from vid2sim.datasets.synthetic.scene import (BACKGROUNDS, COVERAGE, DISTRACTOR_ID, MAX_DISTANCE_M, MIN_DEPTH_M,
                                              SIZES, SWEPT_MARGIN_M, VFOV_DEG, estimate_coverage, look_from,
                                              random_scene, swept_points)
from vid2sim.datasets.synthetic.scene_render import SceneRaycaster, TinyRenderer
from bench_scripts import load


@pytest.fixture(scope="module")
def clips():
    return {m: simulate(m, seed=1, frames=12) for m in ("cartpole", "cabinet", "pushed")}


def _scene_key(sc) -> str:
    d = {f.name: getattr(sc, f.name) for f in dataclasses.fields(sc) if f.name not in ("camera", "distractors")}
    d["T"] = sc.camera.world_from_camera
    d["K"] = sc.camera.K
    d["distractors"] = [(x.shape.to_json(), x.T0, x.velocity, x.colour) for x in sc.distractors]
    return repr(d)


def test_scene_deterministic_per_seed(clips):
    st = clips["cartpole"]
    mech = mechanism("cartpole")
    a, b = random_scene(st, 7, mech), random_scene(st, 7, mech)
    assert _scene_key(a) == _scene_key(b)
    assert _scene_key(a) != _scene_key(random_scene(st, 8, mech))


def test_scene_factors_in_range(clips):
    """20 seeds per mechanism: sizes, fields of view, framing, background, distractors, sensor in their ranges."""
    seen = {"renderer": set(), "background": set(), "sensor": set(), "size": set()}
    for name, st in clips.items():
        mech = mechanism(name)
        pts = swept_points(st)
        lo, hi = pts.min(0), pts.max(0)
        for seed in range(20):
            sc = random_scene(st, seed, mech)
            cam = sc.camera
            assert (cam.width, cam.height) in SIZES
            vfov = np.degrees(2 * np.arctan(cam.height / 2 / cam.fy))
            assert VFOV_DEG[0] - 1e-6 <= vfov <= VFOV_DEG[1] + 1e-6
            uv, z = cam.project(pts)  # the whole motion stays in view
            assert (z > MIN_DEPTH_M).all()
            assert (uv >= 0).all() and (uv[:, 0] < cam.width).all() and (uv[:, 1] < cam.height).all()
            assert COVERAGE[0] <= sc.coverage_target <= COVERAGE[1]
            cov = estimate_coverage(cam, st, np.array([0, 6, 11]))
            assert 0.003 < cov < 0.45, (name, seed, cov)
            assert sc.distance_m <= MAX_DISTANCE_M * 1.2
            assert sc.background in BACKGROUNDS
            if mech.floor is not None or mech.ground is not None:
                assert sc.background != "none" and sc.floor_z is not None
            if sc.wall is not None:  # the whole motion in front of the wall
                assert (pts @ sc.wall[0]).min() > sc.wall[1]
            assert 0 <= len(sc.distractors) <= 5
            for d in sc.distractors:  # never inside the mechanism's swept box, not a mechanism shape
                half = np.abs(d.T0[:3, :3]) @ (np.asarray(d.shape.extents()) / 2)
                p0, p1 = d.T0[:3, 3], d.T0[:3, 3] + d.velocity * len(st.world_from_body) / st.fps
                blo, bhi = np.minimum(p0, p1) - half, np.maximum(p0, p1) + half
                assert not (np.all(blo < hi + SWEPT_MARGIN_M) and np.all(lo - SWEPT_MARGIN_M < bhi))
                assert d.shape.name not in st.shapes
                assert np.linalg.norm(d.velocity) <= 0.05 + 1e-9
                if sc.wall is not None:  # in front of the wall
                    n, c = sc.wall
                    assert min(n @ p0, n @ p1) - np.abs(n) @ half >= c
            if sc.noise is not None:  # the mechanism is within the sensor's range
                assert 0.001 <= sc.noise.depth_sigma_k <= 0.005
                assert max(4.0, z.max() + 0.5) <= sc.noise.max_range <= max(10.0, z.max() + 0.5)
            for k, v in (("renderer", sc.renderer), ("background", sc.background),
                         ("sensor", sc.noise is None), ("size", (cam.width, cam.height))):
                seen[k].add(v)
    assert seen["renderer"] == {"raycast", "tiny"}
    assert seen["background"] == set(BACKGROUNDS)
    assert seen["sensor"] == {True, False}
    assert len(seen["size"]) >= 4


def _small(cam: Camera) -> Camera:
    s = 240 / cam.height
    return dataclasses.replace(cam, width=320, height=240, fx=cam.fx * s, fy=cam.fy * s, cx=159.5, cy=119.5)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max((a | b).sum(), 1))


def _inside_shape_box(cam: Camera, depth, mask, bid, T, shape, tol) -> float:
    """Share of the pixels of body ``bid`` whose back-projected point lies inside its shape's box (+ tol)."""
    pts = cam.backproject(depth)[mask == bid]
    pts = pts @ cam.world_from_camera[:3, :3].T + cam.world_from_camera[:3, 3]
    p_body = (pts - T[:3, 3]) @ T[:3, :3]
    return float(np.mean(np.all(np.abs(p_body) <= np.asarray(shape.extents()) / 2 + tol, axis=1)))


@pytest.mark.parametrize("name,seed", [("cartpole", 3), ("cabinet", 5)])
def test_renderers_agree_with_each_other_and_the_truth(clips, name, seed):
    """TinyRenderer and ray casting of the same scene: body masks IoU > 0.9, depth within mm; pixels on the true bodies."""
    st = clips[name]
    sc = random_scene(st, seed, mechanism(name))
    sc = dataclasses.replace(sc, camera=_small(sc.camera))
    shapes = [st.shapes[b["shape"]] for b in st.truth["bodies"]]
    rc = SceneRaycaster(sc, shapes)
    tr = TinyRenderer(sc, shapes)
    compared = 0
    try:
        for k in (0, 11):
            d1, _, m1 = rc.render(st.world_from_body[k], None, k / st.fps)
            d2, rgb2, m2 = tr.render(st.world_from_body[k], None, k / st.fps)
            assert rgb2.shape == (240, 320, 3)
            for i, shape in enumerate(shapes):
                a, b = m1 == i + 1, m2 == i + 1
                if a.sum() < 150:
                    continue
                assert _iou(a, b) > 0.9, (name, k, i, _iou(a, b))
                compared += 1
                both = a & b
                assert np.median(np.abs(d1[both] - d2[both])) < 0.004 + 0.002 * np.median(d1[both])
                T = st.world_from_body[k, i]
                assert _inside_shape_box(sc.camera, d1, m1, i + 1, T, shape, 0.002) > 0.99
                assert _inside_shape_box(sc.camera, d2, m2, i + 1, T, shape, 0.01) > 0.95
            if (m1 == DISTRACTOR_ID).sum() > 150:
                assert _iou(m1 == DISTRACTOR_ID, m2 == DISTRACTOR_ID) > 0.85
            assert set(np.unique(m1)) <= {0, DISTRACTOR_ID, *range(1, len(shapes) + 1)}
    finally:
        tr.close()
    assert compared >= 2


def test_random_recording_files(tmp_path):
    """A written random-scene recording: truth.json's scene factors match its masks; both renderers run."""
    renderers = set()
    for seed in (0, 1):
        out = make_recording("pushed", tmp_path / f"r{seed}", seed=seed, frames=3, scene="random")
        truth = json.loads((out / "truth.json").read_text())
        sc = truth["scene"]
        renderers.add(sc["renderer"])
        cam = json.loads((out / "camera.json").read_text())
        covs, distractor_px = [], 0
        for k in range(3):
            m = cv2.imread(str(out / "truth_masks" / f"{k:06d}.png"), cv2.IMREAD_UNCHANGED)
            d = cv2.imread(str(out / "depth" / f"{k:06d}.png"), cv2.IMREAD_UNCHANGED)
            assert m.shape == d.shape == (sc["size"][1], sc["size"][0])
            assert set(np.unique(m)) <= {0, 1, 2, 3, 254, 255}
            assert {1, 2, 3} <= set(np.unique(m))
            covs.append(float(((m > 0) & (m < 254)).mean()))
            distractor_px += int((m == DISTRACTOR_ID).sum())
        assert sc["coverage"] == pytest.approx(np.mean(covs), abs=1e-6)
        assert 0 <= sc["distractors"] <= 5 and (distractor_px > 0) <= (sc["distractors"] > 0)
        for key in ("width", "height"):
            assert cam[key] == sc["size"][0 if key == "width" else 1]
    assert renderers == {"raycast", "tiny"}


# Hashes of the decoded frames and truth.json of `make_recording(NAME, seed=3, frames=3, noise=NOISE)`,
# made by the generator before random scenes existed (commit 0367f9e).
DEFAULT_HASHES = {("cartpole", "none"): "70b0b73524ad1adfcf349e244de734b51232a7ad51d36c9f5d1c99a4feb15d59",
                  ("pushed", "realistic"): "11663144447ebb2049d899e8b6b73afff0eeeb5259eaf859e0d26784d5f052e7"}


@pytest.mark.parametrize("name,noise", list(DEFAULT_HASHES))
def test_default_scene_unchanged(tmp_path, name, noise):
    d = make_recording(name, tmp_path / "rec", seed=3, frames=3, noise=noise)
    h = hashlib.sha256()
    for sub in ("depth", "color", "truth_masks"):
        for f in sorted((d / sub).glob("*.png")):
            h.update(np.ascontiguousarray(cv2.imread(str(f), cv2.IMREAD_UNCHANGED)).tobytes())
    h.update((d / "truth.json").read_bytes())
    assert h.hexdigest() == DEFAULT_HASHES[(name, noise)]


def _bench():
    return load("bench_scenes")


def test_bench_scores_against_truth(tmp_path):
    """bench_scenes' scores of run artifacts made from the truth: perfect, then a known offset and a wrong joint."""
    from vid2sim.pipeline.artifacts import PoseTracks

    bench = _bench()
    rec = make_recording("cartpole", tmp_path / "rec", seed=2, frames=4, scene="random")
    truth = json.loads((rec / "truth.json").read_text())
    W = np.load(rec / "truth_poses.npz")["world_from_body"]
    run = tmp_path / "run"
    run.mkdir()
    np.savez(run / "segmentation.npz", shape_names=np.array(["pole", "cart"]))
    assert bench._segmentation_scores(run, truth)["seg_shapes_ok"]
    np.savez(run / "segmentation.npz", shape_names=np.array(["cart", "cart"]))
    s = bench._segmentation_scores(run, truth)
    assert s["seg_count_ok"] and not s["seg_shapes_ok"]
    W2 = W[:, ::-1].copy()  # bodies in another order: matched by position, not by index
    W2[..., 0, 3] += 0.01
    PoseTracks(W2, ["pole", "cart"], ["pole", "cart"], np.zeros(len(W2)), 30.0).save(run / "poses.npz")
    t = bench._tracking_scores(rec, run, truth)
    assert t["track_err_m"] == pytest.approx(0.01, abs=1e-9) and t["bodies_missing"] == 0
    assert t["track_err_rel"] == pytest.approx(0.01 / truth["scene"]["distance_m"])
    (run / "articulation.json").write_text(json.dumps({"joints": truth["joints"]}))
    top = bench._topology_scores(rec, run, truth)
    assert top["topology_ok"] and top["joints_found"] == sorted([j["parent"], j["child"], j["type"]]
                                                                for j in truth["joints"])
    wrong = [dict(j, type="prismatic") if j["type"] == "revolute" else j for j in truth["joints"]]
    (run / "articulation.json").write_text(json.dumps({"joints": wrong}))
    top = bench._topology_scores(rec, run, truth)
    assert top["tree_ok"] and not top["types_ok"] and not top["topology_ok"]
    ok = {"mechanism": "cartpole", "seed": 0, "scene": truth["scene"], "topology_ok": True, "tracebacks": 0,
          "seg_count_ok": True, "seg_shapes_ok": True, "track_err_rel": 0.01,
          "stages": {k: {"rc": 0} for k in bench.STAGES}}
    bad = dict(ok, seed=1, topology_ok=False, tracebacks=1, track_err_rel=None,
               stages={"segment": {"rc": 1, "traceback": True}})
    summary = bench.summarise([ok, bad])
    assert summary["cells"] == 2 and summary["segment_ok"] == 0.5 and summary["tracebacks"] == 1
    assert summary["track_err_rel_median"] == 0.01 and summary["topology_ok"] == 0.5
    assert summary["by_factor"]["renderer"][truth["scene"]["renderer"]]["cells"] == 2


def test_bench_scores_joints_at_rest_as_fixed(clips):
    """A truth joint whose child does not move in the clip is scored as fixed (the pushed links
    before the pusher reaches them); joints that move keep their type. Motion checked against
    the cart's displacement read straight from the poses."""
    from vid2sim.models.joints.evaluate import compare

    bench = _bench()
    s = clips["pushed"]
    motion = bench.joint_motion_m(s.truth, s.world_from_body, s.shapes)
    assert set(motion) == {"root", "hinge_1", "hinge_3"} and max(motion.values()) < 1e-4, motion
    truth = dict(s.truth, scene={"distance_m": 1.5})
    want = bench.observable_truth(truth, motion)
    assert [j["type"] for j in want["joints"]] == ["fixed"] * 3
    at_rest = [{"name": f"w_{b['name']}", "type": "fixed", "parent": "world", "child": b["name"]}
               for b in truth["bodies"]]
    c = compare(SimpleNamespace(joints=at_rest), want)
    assert c["tree_ok"] and c["types_ok"]
    c = compare(SimpleNamespace(joints=truth["joints"]), want)  # the joints the clip does not show
    assert not (c["tree_ok"] and c["types_ok"])

    s = clips["cartpole"]
    motion = bench.joint_motion_m(s.truth, s.world_from_body, s.shapes)
    cart = [b["name"] for b in s.truth["bodies"]].index("cart")
    x = s.world_from_body[:, cart, :3, 3]
    assert motion["slider"] == pytest.approx(np.linalg.norm(x - x[0], axis=1).max(), rel=1e-6)
    assert motion["hinge"] > 0.05
    want = bench.observable_truth(dict(s.truth, scene={"distance_m": 1.5}), motion)
    assert want["joints"] == s.truth["joints"]


def test_bench_accepts_a_still_joint_reported_as_its_true_type(clips):
    """The pushed linkage at rest: articulate makes its root planar by the known pusher (and the
    hinges fixed, since nothing shows them). That run is right; a root reported as a hinge to
    the world, which is neither still (fixed) nor the truth's planar joint, is not."""
    from vid2sim.models.joints.evaluate import compare

    bench = _bench()
    s = clips["pushed"]
    truth = dict(s.truth, scene={"distance_m": 1.5})
    want = bench.observable_truth(truth, bench.joint_motion_m(s.truth, s.world_from_body, s.shapes))
    root = next(j for j in truth["joints"] if j["parent"] == "world")
    assert root["type"] == "planar"
    run = [dict(j, type="fixed") if j is not root else j for j in truth["joints"]]
    c = compare(SimpleNamespace(joints=run), bench.with_true_types(want, truth, run))
    assert c["tree_ok"] and c["types_ok"]
    other = next(j["child"] for j in truth["joints"] if j["parent"] != "world")   # the root hung from another link
    moved = [dict(j, child=other) if j is root else dict(j, type="fixed", parent=root["child"], child=j["child"])
             if j["child"] == other else j for j in run]
    c = compare(SimpleNamespace(joints=moved), bench.with_true_types(want, truth, moved))
    assert c["tree_ok"] and c["types_ok"], moved
    hinge = [dict(j, type="revolute") if j is root else j for j in run]
    c = compare(SimpleNamespace(joints=hinge), bench.with_true_types(want, truth, hinge))
    assert not (c["tree_ok"] and c["types_ok"])


def test_bench_names_parts_of_the_same_shape_by_where_they_are(tmp_path):
    """double_pendulum's two links have the same geometry (library shapes 'link1' and 'link2'): a run that calls link1 'link2' and link2
    'link1' but hangs them right (world -> the upper link -> the lower one) has the right tree;
    hung the other way round it has not."""
    from vid2sim.datasets.shapes import shapes_to_json
    from vid2sim.pipeline.artifacts import PoseTracks

    bench = _bench()
    s = simulate("double_pendulum", seed=0, frames=12)
    rec, run = tmp_path / "rec", tmp_path / "run"
    rec.mkdir()
    run.mkdir()
    np.savez(rec / "truth_poses.npz", world_from_body=s.world_from_body)
    (rec / "shapes.json").write_text(json.dumps(shapes_to_json(s.shapes)))
    truth = dict(s.truth, scene={"distance_m": 1.5})
    assert [b["shape"] for b in truth["bodies"]] == ["link1", "link2"] and s.shapes["link1"] == \
        dataclasses.replace(s.shapes["link2"], name="link1")
    swapped = {"link1": "link2", "link2": "link1"}
    PoseTracks(s.world_from_body, ["link2", "link1"], ["link2", "link1"], np.zeros(12), 30.0).save(run / "poses.npz")
    assert bench.same_shape_names(np.load(run / "poses.npz"), s.world_from_body, truth, s.shapes) == swapped
    right = [dict(j, parent=swapped.get(j["parent"], "world"), child=swapped[j["child"]]) for j in truth["joints"]]
    (run / "articulation.json").write_text(json.dumps({"joints": right}))
    assert bench._topology_scores(rec, run, truth)["topology_ok"]
    (run / "articulation.json").write_text(json.dumps({"joints": truth["joints"]}))  # upper link hung from the lower
    assert not bench._topology_scores(rec, run, truth)["topology_ok"]


def test_synth_cli_random_scene_and_bad_options(tmp_path, monkeypatch, capsys):
    """``vid2sim synth --scene random`` writes a recording; bad --scene / --noise end in one line, exit code 2."""
    import sys

    from vid2sim.pipeline import cli

    def synth(*args) -> int:
        monkeypatch.setattr(sys, "argv", ["vid2sim", "synth", "cabinet", *args])
        with pytest.raises(SystemExit) as e:
            cli.main()
        return e.value.code

    assert synth("--out", str(tmp_path / "ok"), "--scene", "random", "--seed", "4", "--frames", "2",
                 "--noise", "none") in (0, None)
    truth = json.loads((tmp_path / "ok" / "truth.json").read_text())
    assert truth["scene"]["sensor"] == "clean" and truth["scene"]["seed"] == 4
    for bad in (["--scene", "studio"], ["--scene", "random", "--noise", "loud"], ["--noise", "random"]):
        capsys.readouterr()
        assert synth("--out", str(tmp_path / "bad"), "--frames", "2", *bad) == 2
        err = capsys.readouterr().err
        assert "error:" in err and "Traceback" not in err, (bad, err)
        assert not (tmp_path / "bad").exists()


def test_realsense_noise_model():
    """sigma = k z^2 on a flat wall, disparity steps, range limit, flying pixels only at depth edges."""
    from vid2sim.datasets.synthetic.sensor import RealSenseNoise, apply_realsense_noise

    rng = np.random.default_rng(0)
    flat = np.full((200, 300), 2.0, np.float32)
    m = RealSenseNoise(depth_sigma_k=0.004, flying=0.0, subpixel=1e-4, random_dropout=0.0)
    out = apply_realsense_noise(flat, rng, m, fx=400.0)
    assert (out > 0).all()
    assert np.std(out) == pytest.approx(0.004 * 4, rel=0.05) and abs(np.mean(out) - 2.0) < 1e-3
    m = RealSenseNoise(depth_sigma_k=0.0, subpixel=0.1, random_dropout=0.0)
    fb = 400.0 * m.baseline
    out = apply_realsense_noise(np.linspace(1.0, 3.0, 300, dtype=np.float32)[None].repeat(10, 0), rng, m, 400.0)
    steps = np.round(fb / out[out > 0] / m.subpixel, 3)  # disparities on the 0.1 px grid
    assert np.allclose(steps, np.round(steps), atol=2e-3)
    assert not apply_realsense_noise(np.full((20, 20), 7.0, np.float32), rng, RealSenseNoise(max_range=6.0),
                                     400.0).any()
    step = np.where(np.arange(300) < 150, 1.0, 2.0).astype(np.float32)[None].repeat(100, 0)
    out = apply_realsense_noise(step, rng, RealSenseNoise(depth_sigma_k=0.0, flying=1.0, edge_dropout=0.0,
                                                          subpixel=1e-4, random_dropout=0.0), 400.0)
    flying = (np.abs(out - 1.0) > 0.01) & (np.abs(out - 2.0) > 0.01)
    assert flying[:, 147:153].mean() > 0.3 and not flying[:, :145].any() and not flying[:, 155:].any()


@pytest.mark.parametrize("shape", [Shape("cap", "capsule", radius=0.025, length=0.3), Shape("ball", "sphere", radius=0.04),
                                   Shape("rod", "cylinder", radius=0.02, length=0.25)], ids=lambda s: s.type)
def test_tiny_renderer_draws_the_true_curved_surface(clips, shape):
    """TinyRenderer's sphere, cylinder and capsule against the tracker's analytic ray caster, seen obliquely at
    0.4 m (640x480): mask IoU > 0.985, median depth within 0.3 mm, silhouette ends within 1 px along the axis."""
    from vid2sim.models.render.depth import DepthRenderer

    st = clips["cartpole"]
    cam = look_from(np.zeros(3), 20.0, 35.0, 0.4, (640, 480), 60.0, 30.0)
    sc = dataclasses.replace(random_scene(st, 3, mechanism("cartpole")), camera=cam, floor_z=None, wall=None,
                             table=None, distractors=())
    T = np.eye(4)
    T[:3, :3] = Rotation.from_euler("xyz", [50, -30, 20], degrees=True).as_matrix()
    tr = TinyRenderer(sc, [shape])
    try:
        d_tiny, _, m_tiny = tr.render(T[None])
    finally:
        tr.close()
    d_ref, ids = DepthRenderer(cam, [shape]).render(T[None])
    a, b = ids == 0, m_tiny == 1
    assert a.sum() > 2000 and _iou(a, b) > 0.985, _iou(a, b)
    both = a & b
    assert np.median(np.abs(d_tiny[both] - d_ref[both])) < 3e-4
    uv, _ = cam.project(np.array([T[:3, 3] - T[:3, 2], T[:3, 3] + T[:3, 2]]))
    ax = (uv[1] - uv[0]) / np.linalg.norm(uv[1] - uv[0])
    def ends(mask):
        ys, xs = np.nonzero(mask)
        s = (np.stack([xs, ys], 1) - uv[0]) @ ax
        return np.array([s.min(), s.max()])
    assert np.abs(ends(a) - ends(b)).max() <= 1.0, (ends(a), ends(b))
