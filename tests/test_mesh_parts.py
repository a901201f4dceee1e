"""Mesh parts end to end: shapes.json meshes, their mass properties, the tracker's ray casting
of them (values and derivatives), tracking a synthetic mesh part against its box twin, and
the exported URDF in PyBullet."""
from __future__ import annotations

import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

from vid2sim.datasets.errors import RecordingError  # noqa: E402
from vid2sim.datasets.shapes import Shape, load_shapes  # noqa: E402
from vid2sim.datasets.synthetic import make_recording, simulate  # noqa: E402
from vid2sim.datasets.synthetic.mesh_parts import (BEAM_SIZE, SLOT_COUNT, SLOT_SIZE, _slot_centres,  # noqa: E402
                                                   mesh_shape, slotted_beam_mesh)
from vid2sim.models.geometry_torch import perturb  # noqa: E402
from vid2sim.models.render.align import depth_residuals, margin_residuals  # noqa: E402
from vid2sim.models.render.primitives import Primitive, ray_hit, ray_margin, ray_margin_and_grad, sdf, sdf_and_grad  # noqa: E402

F64 = torch.float64


@pytest.fixture(scope="module")
def beam() -> Shape:
    return mesh_shape("beam", slotted_beam_mesh())


def _box_inertia(size, m):
    x, y, z = size
    return np.diag([m * (y * y + z * z) / 12, m * (x * x + z * z) / 12, m * (x * x + y * y) / 12])


def test_beam_volume_and_inertia_match_the_solid_and_trimesh(beam, tmp_path):
    """Volume and inertia of the slotted beam: trimesh's mass properties of the file (read
    through shapes.json), the box minus its slots in closed form, and the beam assembled from
    boxes instead of cut by booleans all agree."""
    (tmp_path / "meshes").mkdir()
    (tmp_path / "meshes" / "beam.obj").write_bytes(beam.mesh_path().read_bytes())
    (tmp_path / "shapes.json").write_text(json.dumps({"beam": {"type": "mesh", "file": "meshes/beam.obj", "scale": 1.0}}))
    s = load_shapes(tmp_path / "shapes.json")["beam"]
    x, y, z = BEAM_SIZE
    sx, sz = SLOT_SIZE
    rho = 1000.0
    v = x * y * z - SLOT_COUNT * sx * y * sz
    assert s.volume() == pytest.approx(v, rel=1e-6)
    I = _box_inertia(BEAM_SIZE, rho * x * y * z)
    for c in _slot_centres():  # each slot is a box taken out, shifted along z (parallel axis)
        ms = rho * sx * y * sz
        I -= _box_inertia((sx, y, sz), ms) + ms * np.diag([c * c, c * c, 0.0])
    np.testing.assert_allclose(s.inertia_tensor(rho * v), I, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(s.inertia(rho * v), np.diag(I), rtol=1e-6)
    assert s.extents() == pytest.approx(BEAM_SIZE, rel=1e-6)
    import trimesh

    m = trimesh.load(beam.mesh_path(), force="mesh")
    m.density = rho
    np.testing.assert_allclose(s.inertia_tensor(m.mass), m.moment_inertia, rtol=1e-6, atol=1e-12)
    boxes = slotted_beam_mesh(boolean=False)
    assert boxes.is_watertight and boxes.volume == pytest.approx(v, rel=1e-9)
    # scale: lengths x2 -> volume x8, inertia at a fixed mass x4
    (tmp_path / "shapes.json").write_text(json.dumps({"beam": {"type": "mesh", "file": "meshes/beam.obj", "scale": 2.0}}))
    s2 = load_shapes(tmp_path / "shapes.json")["beam"]
    assert s2.volume() == pytest.approx(8 * v, rel=1e-6)
    np.testing.assert_allclose(s2.inertia_tensor(1.0), 4 * s.inertia_tensor(1.0), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("suffix", ["stl", "ply"])
def test_stl_and_ply_give_the_obj_mass_properties(beam, suffix, tmp_path):
    """The beam written as STL or PLY (trimesh's exporters) reads back with the OBJ's volume,
    inertia and centre-of-mass offset, in millimetres with scale 0.001."""
    m = beam.mesh().copy()
    m.apply_translation(beam.mesh_offset() + [0.01, -0.02, 0.03])  # a file frame away from the centre of mass
    m.apply_scale(1000.0)  # millimetres
    m.export(tmp_path / f"beam.{suffix}")
    (tmp_path / "shapes.json").write_text(json.dumps({"b": {"type": "mesh", "file": f"beam.{suffix}", "scale": 0.001}}))
    s = load_shapes(tmp_path / "shapes.json")["b"]
    assert s.volume() == pytest.approx(beam.volume(), rel=1e-6)
    np.testing.assert_allclose(s.inertia_tensor(0.2), beam.inertia_tensor(0.2), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(s.mesh_offset(), beam.mesh_offset() + [0.01, -0.02, 0.03], atol=1e-7)  # float32 files
    np.testing.assert_allclose(s.mesh().center_mass, 0.0, atol=1e-9)


def test_open_mesh_is_refused_in_one_line_naming_the_file(tmp_path):
    import trimesh

    m = trimesh.creation.box((0.1, 0.1, 0.1))
    m.update_faces(np.arange(len(m.faces)) != 0)  # one triangle missing: not watertight
    m.export(tmp_path / "open.stl")
    (tmp_path / "shapes.json").write_text(json.dumps({"p": {"type": "mesh", "file": "open.stl"}}))
    with pytest.raises(RecordingError) as e:
        load_shapes(tmp_path / "shapes.json")
    msg = str(e.value)
    assert "open.stl" in msg and "not watertight" in msg and "\n" not in msg


def _rays(n: int, seed: int, offset=(0.0, 0.0, 0.0)):
    """n body-frame rays from 1 m in front of the beam (-y), towards it, with small scatter."""
    g = torch.Generator().manual_seed(seed)
    o = torch.tensor([0.0, -1.0, 0.0], dtype=F64) + torch.tensor(offset, dtype=F64)
    o = o + torch.randn(n, 3, generator=g, dtype=F64) * torch.tensor([0.012, 0.0, 0.12], dtype=F64)
    d = torch.tensor([0.0, 1.0, 0.0], dtype=F64) + 0.05 * torch.randn(n, 3, generator=g, dtype=F64)
    return o, d


def test_ray_hit_and_sdf_values_against_trimesh(beam):
    """Hit depth and signed distance against trimesh's own ray casting and proximity (another
    implementation)."""
    import trimesh

    p = Primitive.from_shape(beam)
    m = beam.mesh()
    o, d = _rays(400, 0)
    s = ray_hit(p, o, d)
    hit = torch.isfinite(s)
    assert 50 < int(hit.sum()) < 390  # some rays pass through the slots or beside the beam
    loc, idx, _ = m.ray.intersects_location(o.numpy(), d.numpy(), multiple_hits=False)
    s_ref = np.full(len(o), np.inf)
    s_ref[idx] = np.einsum("ij,ij->i", loc - o.numpy()[idx], d.numpy()[idx]) / np.einsum("ij,ij->i", d.numpy()[idx], d.numpy()[idx])
    np.testing.assert_array_equal(np.isfinite(s_ref), hit.numpy())
    np.testing.assert_allclose(s.numpy()[hit], s_ref[hit.numpy()], atol=2e-6)
    q = torch.from_numpy(np.random.default_rng(1).uniform(-1, 1, (300, 3)) * [0.03, 0.015, 0.17])
    f, n = sdf_and_grad(p, q)
    np.testing.assert_allclose(f.numpy(), -trimesh.proximity.signed_distance(m, q.numpy()), atol=5e-6)  # 1 um: near-ties of two faces
    np.testing.assert_allclose(n.norm(dim=-1).numpy(), 1.0, atol=1e-9)


def test_mesh_derivatives_against_finite_differences(beam):
    """ray_hit and sdf by autograd (gradcheck); the ray margin's closed-form derivatives and the
    pose Jacobians the Gauss-Newton step uses, by central differences."""
    p = Primitive.from_shape(beam)
    o, d = _rays(60, 2)
    hit = torch.isfinite(ray_hit(p, o, d))
    oh, dh = o[hit][:12].clone().requires_grad_(), d[hit][:12].clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: ray_hit(p, a, b), (oh, dh))
    q = torch.from_numpy(np.random.default_rng(3).uniform(-1, 1, (12, 3)) * [0.03, 0.015, 0.17]).requires_grad_()
    assert torch.autograd.gradcheck(lambda a: sdf(p, a), (q,))
    # margin of rays that miss the beam (its coverage residual): smooth, unique closest approach
    o_m, d_m = _rays(40, 4, offset=(0.045, 0.0, 0.0))
    miss = ~torch.isfinite(ray_hit(p, o_m, d_m))
    o_m, d_m = o_m[miss], d_m[miss]
    m, g_o, g_d = ray_margin_and_grad(p, o_m, d_m)
    assert bool((m < 0).all())
    eps = 1e-6
    for i in range(3):
        e = torch.zeros(3, dtype=F64)
        e[i] = eps
        fd_o = (ray_margin(p, o_m + e, d_m) - ray_margin(p, o_m - e, d_m)) / (2 * eps)
        fd_d = (ray_margin(p, o_m, d_m + e) - ray_margin(p, o_m, d_m - e)) / (2 * eps)
        np.testing.assert_allclose(g_o[:, i].numpy(), fd_o.numpy(), atol=5e-3)  # |g_o| = 1: 0.5 % of it
        np.testing.assert_allclose(g_d[:, i].numpy(), fd_d.numpy(), atol=5e-3)
    # pose Jacobians (world twist (v, w)): depth along the ray, and the margin
    T = torch.eye(4, dtype=F64)
    T[:3, :3] = torch.from_numpy(cv2.Rodrigues(np.array([0.2, -0.3, 0.1]))[0])
    T[:3, 3] = torch.tensor([0.1, 0.9, 0.3], dtype=F64)
    c = torch.zeros(3, dtype=F64)  # the camera
    dirs = (o + d) @ T[:3, :3].T + T[:3, 3] - c  # towards body points near the beam (o + d, body frame)
    s = ray_hit(p, ((c - T[:3, 3]) @ T[:3, :3]).expand_as(dirs), dirs @ T[:3, :3])
    on = torch.isfinite(s)
    r, J = depth_residuals(p, T, c, dirs[on], s[on], min_cos=0.3)
    ok = torch.isfinite(r)
    assert int(ok.sum()) >= 10
    _, Jm = margin_residuals(p, T, c, dirs[~on])
    for k in range(6):
        xi = torch.zeros(6, dtype=F64)
        xi[k] = 1e-6
        Tp, Tm = perturb(T, xi), perturb(T, -xi)
        hit_p = ray_hit(p, ((c - Tp[:3, 3]) @ Tp[:3, :3]).expand_as(dirs), dirs @ Tp[:3, :3])[on][ok]
        hit_m = ray_hit(p, ((c - Tm[:3, 3]) @ Tm[:3, :3]).expand_as(dirs), dirs @ Tm[:3, :3])[on][ok]
        np.testing.assert_allclose(J[ok][:, k].numpy(), ((hit_p - hit_m) / 2e-6).numpy(), rtol=1e-4, atol=1e-4)
        mp = margin_residuals(p, Tp, c, dirs[~on])[0]
        mm = margin_residuals(p, Tm, c, dirs[~on])[0]
        np.testing.assert_allclose(Jm[:, k].numpy(), ((mp - mm) / 2e-6).numpy(), atol=5e-3)


def _seg_from_truth(path: Path):
    from vid2sim.pipeline.artifacts import Segmentation

    truth = json.loads((path / "truth.json").read_text())
    ids = cv2.imread(str(path / "truth_masks" / "000000.png"), cv2.IMREAD_UNCHANGED)
    names = [b["shape"] for b in truth["bodies"]]
    return Segmentation(np.stack([ids == i + 1 for i in range(len(names))]).astype(np.uint8), 0, names,
                        np.ones(len(names)))


@pytest.mark.slow
def test_mesh_part_tracked_as_well_as_its_box_twin(tmp_path):
    """The slotted beam pendulum and its box twin (same extents, pivot, start), clean depth,
    320x240, camera about 1 m away: every frame's position error <= 3 mm, and the mesh no worse
    than its twin (mean error within 0.5 mm of the twin's)."""
    from vid2sim.datasets.recording import open_recording
    from vid2sim.pipeline import track

    err = {}
    for name in ("slotted_pendulum", "slotted_pendulum_box"):
        path = make_recording(name, tmp_path / name, seed=0, frames=20, size=(320, 240), noise="none")
        rec = open_recording(path)
        eye = rec.camera.world_from_camera[:3, 3]
        truth = np.load(path / "truth_poses.npz")["world_from_body"]
        assert 0.8 < np.linalg.norm(truth[:, 0, :3, 3] - eye, axis=1).mean() < 1.2
        poses = track.run(track.TrackConfig(overlay=False), rec, _seg_from_truth(path), tmp_path / f"run_{name}")
        err[name] = np.linalg.norm(poses.world_from_body[:, 0, :3, 3] - truth[:, 0, :3, 3], axis=1)
        assert not poses.lost.any()
    assert err["slotted_pendulum"].max() <= 0.003, err
    assert err["slotted_pendulum_box"].max() <= 0.003, err
    assert err["slotted_pendulum"].mean() <= err["slotted_pendulum_box"].mean() + 0.0005, err


def test_exported_urdf_with_mesh_loads_in_pybullet(truth_inputs, tmp_path):
    """model.urdf of the slotted pendulum (truth joints and parameters) references its mesh
    beside it; PyBullet loads it with the mass and the principal moments of trimesh's inertia."""
    import pybullet as pb

    from vid2sim.pipeline import export

    st = simulate("slotted_pendulum", seed=0, frames=10)
    art, poses, _, post = truth_inputs(st)
    path = export.run(export.ExportConfig(mjcf=False), art, post, st.shapes, poses, tmp_path)
    assert (tmp_path / "meshes" / "beam.obj").read_bytes() == st.shapes["beam"].mesh_path().read_bytes()
    assert 'filename="meshes/beam.obj"' in path.read_text()
    mass = float(post.estimate["beam.mass"])
    cid = pb.connect(pb.DIRECT)
    try:
        body = pb.loadURDF(str(path), useFixedBase=True, flags=pb.URDF_USE_INERTIA_FROM_FILE, physicsClientId=cid)
        link = next(i for i in range(pb.getNumJoints(body, physicsClientId=cid))
                    if pb.getJointInfo(body, i, physicsClientId=cid)[12].decode() == "beam")
        info = pb.getDynamicsInfo(body, link, physicsClientId=cid)
        shape = pb.getVisualShapeData(body, physicsClientId=cid)
    finally:
        pb.disconnect(cid)
    assert info[0] == pytest.approx(mass, rel=1e-9)
    I = st.shapes["beam"].inertia_tensor(mass)
    np.testing.assert_allclose(sorted(info[2]), np.linalg.eigvalsh(I), rtol=1e-6)
    assert any(s[2] == pb.GEOM_MESH and s[4].decode().endswith("meshes/beam.obj") for s in shape)


@pytest.mark.parametrize("seed", [0, 1])  # seed 0: Open3D ray casting, seed 1: PyBullet's TinyRenderer
def test_random_scene_renders_the_mesh_where_the_tracker_does(seed, tmp_path):
    """A randomised scene (scene.py) of the slotted pendulum, clean sensor: on the pixels its
    truth mask gives the beam, the scene renderer's depth is the tracker's ray cast
    (``DepthRenderer``) of the mesh at the true pose."""
    from vid2sim.datasets.recording import open_recording
    from vid2sim.models.render.depth import DepthRenderer

    path = make_recording("slotted_pendulum", tmp_path / "rec", seed=seed, frames=2, scene="random", noise="none")
    assert json.loads((path / "truth.json").read_text())["scene"]["renderer"] == ("raycast", "tiny")[seed]
    rec = open_recording(path)
    truth = np.load(path / "truth_poses.npz")["world_from_body"]
    depth, ids = DepthRenderer(rec.camera, [rec.shapes["beam"]]).render(truth[1])
    mask = cv2.imread(str(path / "truth_masks" / "000001.png"), cv2.IMREAD_UNCHANGED) == 1
    both = mask & (ids == 0) & (rec.depth(1) > 0)
    assert both.sum() > 0.8 * mask.sum() > 20
    assert np.median(np.abs(rec.depth(1)[both] - depth[both])) < 0.002
