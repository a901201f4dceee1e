"""Synthetic mechanisms: truth is self-consistent, lands on the rendered depth, is seeded."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import yourdfpy
from scipy.spatial.transform import Rotation

from vid2sim.datasets.recording import FolderRecording
from vid2sim.datasets.synthetic import MECHANISMS, make_recording, renderer_for, simulate
from vid2sim.datasets.synthetic.sensor import REALISTIC, apply_depth_noise, depth_edges, frame_rng

FRAMES = 16
SIZE = (160, 120)


@pytest.fixture(scope="module", params=MECHANISMS)
def recording(request, tmp_path_factory):
    name = request.param
    out = make_recording(name, tmp_path_factory.mktemp(name) / "rec", seed=1, frames=FRAMES, size=SIZE)
    return name, out


def _relative_motion(T_parent: np.ndarray, T_child: np.ndarray) -> np.ndarray:
    """(T, 4, 4): child's motion relative to its parent, as a world map at frame 0.

    M_t = T_P(0) T_P(t)^-1 T_C(t) T_C(0)^-1 moves frame-0 world points of the child
    to where the parent-relative motion takes them.
    """
    return T_parent[0] @ np.linalg.inv(T_parent) @ T_child @ np.linalg.inv(T_child[0])


def test_mechanism_list():
    assert MECHANISMS == ("cartpole", "double_pendulum", "rott", "tree5", "cabinet", "thrown", "pushed", "pendulum3")


def test_recording_files(recording):
    name, out = recording
    rec = FolderRecording(out)
    assert rec.num_frames == FRAMES and rec.has_depth and rec.has_color
    assert (rec.camera.width, rec.camera.height) == SIZE
    truth = json.loads((out / "truth.json").read_text())
    poses = np.load(out / "truth_poses.npz")
    M = len(truth["bodies"])
    assert poses["world_from_body"].shape == (FRAMES, M, 4, 4)
    assert list(poses["body_names"]) == [b["name"] for b in truth["bodies"]]
    assert set(rec.shapes) >= {b["shape"] for b in truth["bodies"]}
    assert (out / "truth.urdf").read_text().startswith("<?xml")
    mask = cv2.imread(str(out / "truth_masks" / "000000.png"), cv2.IMREAD_UNCHANGED)
    assert mask.shape == SIZE[::-1] and mask.dtype == np.uint8
    for i in range(M):  # every body is seen in frame 0 (camera fitted to the motion)
        assert (mask == i + 1).sum() >= 5, (name, truth["bodies"][i]["name"])


def test_poses_land_on_rendered_depth(recording):
    """Depth at a visible body's projected centre is within the body's size of its distance."""
    name, out = recording
    rec = FolderRecording(out)
    truth = json.loads((out / "truth.json").read_text())
    T = np.load(out / "truth_poses.npz")["world_from_body"]
    checked = total = 0
    for k in range(FRAMES):
        depth = rec.depth(k)
        mask = cv2.imread(str(out / "truth_masks" / f"{k:06d}.png"), cv2.IMREAD_UNCHANGED)
        for i, b in enumerate(truth["bodies"]):
            size = rec.shapes[b["shape"]].size_scalar()
            uv, z = rec.camera.project(T[k, i, :3, 3])
            u, v = int(round(uv[0])), int(round(uv[1]))
            total += 1
            if not (0 <= u < SIZE[0] and 0 <= v < SIZE[1]) or mask[v, u] != i + 1:
                continue  # occluded or out of view
            checked += 1
            assert abs(depth[v, u] - z) < size, (name, b["name"], k, depth[v, u], z)
            # The surface seen at the centre lies in front of it, within half the diagonal.
            half_diag = np.linalg.norm(rec.shapes[b["shape"]].extents()) / 2
            assert -0.002 <= z - depth[v, u] <= half_diag + 0.002, (name, b["name"], k)
    assert checked >= 0.5 * total, f"{name}: only {checked}/{total} body centres visible"


def test_joints_consistent_with_poses():
    """Child motion relative to parent is a pure rotation / translation / nothing."""
    for name in MECHANISMS:
        st = simulate(name, seed=3, frames=90)
        names = st.body_names
        for j in st.truth["joints"]:
            Tc = st.world_from_body[:, names.index(j["child"])]
            Tp = (np.broadcast_to(np.eye(4), Tc.shape) if j["parent"] == "world"
                  else st.world_from_body[:, names.index(j["parent"])])
            M = _relative_motion(Tp, Tc)
            axis, pivot = np.asarray(j["axis"]), np.asarray(j["pivot"])
            R, t = M[:, :3, :3], M[:, :3, 3]
            assert abs(np.linalg.norm(axis) - 1) < 1e-9
            moved = (R @ pivot + t) - pivot  # where the pivot goes
            tag = (name, j["name"])
            if j["type"] == "fixed":
                assert np.abs(R - np.eye(3)).max() < 1e-5 and np.abs(t).max() < 1e-5, tag
            elif j["type"] == "revolute":
                assert np.abs(R @ axis - axis).max() < 1e-5, tag
                assert np.abs(moved).max() < 1e-5, tag
                angle = Rotation.from_matrix(R).as_rotvec() @ axis
                qi = st.joint_names.index(j["name"])
                dq = st.q[:, qi] - st.q[0, qi]
                err = np.angle(np.exp(1j * (angle - dq)))
                assert np.abs(err).max() < 1e-4, tag
                assert np.ptp(dq) > 0.05, (tag, "joint barely moves")
            elif j["type"] == "prismatic":
                assert np.abs(R - np.eye(3)).max() < 1e-5, tag
                assert np.abs(t - np.outer(t @ axis, axis)).max() < 1e-5, tag
                qi = st.joint_names.index(j["name"])
                assert np.abs(t @ axis - (st.q[:, qi] - st.q[0, qi])).max() < 1e-5, tag
                assert np.ptp(st.q[:, qi]) > 0.01, (tag, "joint barely moves")
            elif j["type"] == "planar":
                assert np.abs(R @ axis - axis).max() < 2e-3, tag
                assert np.abs(moved @ axis).max() < 2e-3, tag


def test_seed_determinism():
    a = simulate("cartpole", seed=5, frames=30)
    b = simulate("cartpole", seed=5, frames=30)
    c = simulate("cartpole", seed=6, frames=30)
    assert np.array_equal(a.world_from_body, b.world_from_body) and np.array_equal(a.q, b.q)
    assert a.truth == b.truth
    assert np.abs(a.q[0] - c.q[0]).max() > 1e-3  # the seed changes the initial state


def test_recording_determinism(tmp_path):
    r1 = make_recording("double_pendulum", tmp_path / "a", seed=2, frames=3, size=(64, 48), noise="realistic")
    r2 = make_recording("double_pendulum", tmp_path / "b", seed=2, frames=3, size=(64, 48), noise="realistic")
    for k in range(3):
        for sub in ("depth", "color"):
            a = cv2.imread(str(r1 / sub / f"{k:06d}.png"), cv2.IMREAD_UNCHANGED)
            b = cv2.imread(str(r2 / sub / f"{k:06d}.png"), cv2.IMREAD_UNCHANGED)
            assert np.array_equal(a, b)
    with pytest.raises(FileExistsError):
        make_recording("double_pendulum", tmp_path / "a", frames=1)


def test_noise_statistics():
    st = simulate("cartpole", seed=0, frames=1, size=(320, 240))
    depth, rgb, _ = renderer_for(st).render(st.world_from_body[0])
    noisy = apply_depth_noise(depth, frame_rng(0, 0))
    edges = cv2.dilate(depth_edges(depth, REALISTIC.edge_jump).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    valid = depth > 0
    kept = valid & (noisy > 0)
    # Gaussian with sigma = k z^2: normalised residuals have unit spread and zero mean.
    r = (noisy[kept] - depth[kept]) / (REALISTIC.depth_sigma_k * depth[kept] ** 2)
    assert abs(r.std() - 1) < 0.05 and abs(r.mean()) < 0.05
    # Missing readings concentrate at depth edges.
    drop_edge = 1 - kept[valid & edges].mean()
    drop_flat = 1 - kept[valid & ~edges].mean()
    assert edges[valid].mean() > 0.005
    assert abs(drop_edge - REALISTIC.edge_dropout) < 0.1
    assert drop_flat < 3 * REALISTIC.random_dropout
    assert not np.array_equal(noisy, apply_depth_noise(depth, frame_rng(0, 1)))


def test_noisy_recording_quantised(tmp_path):
    clean = make_recording("cartpole", tmp_path / "c", seed=0, frames=2, size=(80, 60), noise="none")
    noisy = make_recording("cartpole", tmp_path / "n", seed=0, frames=2, size=(80, 60), noise="realistic")
    dc, dn = FolderRecording(clean).depth(1), FolderRecording(noisy).depth(1)
    both = (dc > 0) & (dn > 0)
    assert np.allclose(dc * 1000, np.round(dc * 1000), atol=1e-3)  # millimetre quantisation
    diff = np.abs(dn - dc)[both]
    sigma = REALISTIC.depth_sigma_k * dc[both] ** 2
    assert diff.max() > 0.001 and np.median(diff / np.maximum(sigma, 5e-4)) < 2.0
    cc, cn = FolderRecording(clean).color(1), FolderRecording(noisy).color(1)
    assert 1.5 < np.std(cn.astype(float) - cc) < 5.0


def test_rott_modes_near_two_to_one():
    from vid2sim.datasets.synthetic import mechanism
    from vid2sim.datasets.synthetic.physics import normal_mode_frequencies

    f = normal_mode_frequencies(mechanism("rott"))
    assert f.shape == (2,) and abs(f[1] / f[0] - 2.0) < 0.05


def test_truth_urdf_reproduces_poses():
    """Round trip: truth.urdf read by another library (yourdfpy) with q[t] gives the poses."""
    import io

    for name in MECHANISMS:
        st = simulate(name, seed=2, frames=60)
        u = yourdfpy.URDF.load(io.StringIO(st.urdf), load_meshes=False, build_collision_scene_graph=False,
                               load_collision_meshes=False)
        assert (u.base_link == "world") == (st.root_pose is None)
        for t in range(0, 60, 11):
            u.update_cfg({n: st.q[t, i] for i, n in enumerate(st.joint_names)})
            T_root = np.eye(4)
            if st.root_pose is not None:
                T_root[:3, :3] = Rotation.from_quat(st.root_pose[t, 3:]).as_matrix()
                T_root[:3, 3] = st.root_pose[t, :3]
            for m, b in enumerate(st.body_names):
                T = T_root @ u.get_transform(frame_to=b, frame_from=u.base_link) @ u.link_map[b].inertial.origin
                assert np.abs(T - st.world_from_body[t, m]).max() < 1e-6, (name, b, t)


def test_thrown_centre_of_mass_falls_freely():
    """In flight, the centre of mass of the two bodies accelerates at exactly g."""
    st = simulate("thrown", seed=0, frames=12, fps=60.0)
    m = np.array([b["mass"] for b in st.truth["bodies"]])
    com = np.einsum("m,tmi->ti", m, st.world_from_body[:, :, :3, 3]) / m.sum()
    assert com[:, 2].min() > 0.3  # still in the air
    acc = (com[2:] - 2 * com[1:-1] + com[:-2]) * st.fps**2
    assert np.abs(acc - np.asarray(st.truth["gravity"])).max() < 0.05


def test_pushed_tip_moves_linkage_without_interpenetration():
    st = simulate("pushed", seed=0, frames=120)
    T, tip, r = st.world_from_body, st.tip_position, st.truth["tip"]["radius"]
    assert np.allclose(T[:, :, 2, 3], T[0, 0, 2, 3], atol=1e-3)  # stays on the floor
    assert np.linalg.norm(T[-1, :, :2, 3] - T[0, :, :2, 3], axis=1).max() > 0.1  # pushed along
    for m, b in enumerate(st.body_names):
        half = np.asarray(st.shapes[st.truth["bodies"][m]["shape"]].size[:2]) / 2
        Tinv = np.linalg.inv(T[:, m])
        p = np.einsum("tij,tj->ti", Tinv[:, :3, :3], tip) + Tinv[:, :3, 3]
        gap = np.linalg.norm(np.maximum(np.abs(p[:, :2]) - half, 0), axis=1)
        assert gap.min() > r - 0.002, b  # the tip touches, at most 2 mm deep
    lo, hi = st.truth["joints"][1]["limits"]
    assert st.q.min() > lo - 0.01 and st.q.max() < hi + 0.01  # hinge stops hold


def test_params_set_masses_and_damping():
    """simulate(params=...) replaces masses and damping: recorded in truth.json's params, and
    the motion changes (a heavier pole swings the cart further); unknown names are refused."""
    base = simulate("cartpole", seed=0, frames=20)
    heavy = simulate("cartpole", seed=0, frames=20, params={"pole.mass": 0.6, "slider.damping": 0.1})
    assert heavy.truth["params"]["pole.mass"] == 0.6 and heavy.truth["params"]["slider.damping"] == 0.1
    assert heavy.truth["params"]["cart.mass"] == base.truth["params"]["cart.mass"] == 1.0
    assert np.abs(np.asarray(heavy.q) - np.asarray(base.q)).max() > 1e-3
    with pytest.raises(ValueError, match="cannot set 'wheel.mass'"):
        simulate("cartpole", frames=2, params={"wheel.mass": 1.0})
