"""Forward/inverse dynamics and mass matrix against Pinocchio on random trees.

Pinocchio builds its own model from the same URDF text (``buildModelFromXML``, with a
``JointModelFreeFlyer`` root for floating trees), so the URDF loader is checked too.
"""
import numpy as np
import pinocchio as pin
import pytest
import torch

from vid2sim.models.dynamics import (Control, State, forward_dynamics, forward_kinematics, inverse_dynamics,
                                     mass_matrix, model_from_urdf, model_to_urdf, rollout, step)


def random_tree_urdf(rng: np.random.Generator, n_bodies: int, floating: bool) -> str:
    """A URDF with every joint type: revolute, prismatic, fixed, planar, floating."""
    types = ["revolute", "prismatic", "fixed", "planar", "revolute", "floating"]
    links, joints = [], []
    names = [] if floating else ["world"]
    if not floating:
        links.append('<link name="world"/>')
    for i in range(n_bodies):
        name = f"b{i}"
        A = rng.normal(size=(3, 3))
        I = A @ A.T * 0.05 + 0.01 * np.eye(3)
        c = rng.normal(size=3) * 0.2
        rpy = rng.uniform(-np.pi, np.pi, 3)
        links.append(
            f'<link name="{name}"><inertial><origin xyz="{c[0]} {c[1]} {c[2]}" rpy="{rpy[0]} {rpy[1]} {rpy[2]}"/>'
            f'<mass value="{rng.uniform(0.3, 2.0)}"/><inertia ixx="{I[0, 0]}" iyy="{I[1, 1]}" izz="{I[2, 2]}" '
            f'ixy="{I[0, 1]}" ixz="{I[0, 2]}" iyz="{I[1, 2]}"/></inertial></link>')
        if floating and i == 0:
            names = [name]
            continue
        parent = names[rng.integers(len(names))]
        t = types[(i + rng.integers(2)) % len(types)] if n_bodies > 1 else "revolute"
        if t == "fixed" and parent == "world":
            t = "revolute"
        o, r = rng.normal(size=3) * 0.3, rng.uniform(-np.pi, np.pi, 3)
        ax = rng.normal(size=3)
        ax = ax / np.linalg.norm(ax) if t != "planar" else np.array([0.0, 0.0, 1.0])  # Pinocchio: planar in xy
        lim = '<limit lower="-3" upper="3" effort="10" velocity="10"/>' if t in ("revolute", "prismatic") else ""
        joints.append(
            f'<joint name="j{i}" type="{t}"><parent link="{parent}"/><child link="{name}"/>'
            f'<origin xyz="{o[0]} {o[1]} {o[2]}" rpy="{r[0]} {r[1]} {r[2]}"/><axis xyz="{ax[0]} {ax[1]} {ax[2]}"/>{lim}</joint>')
        names.append(name)
    return '<robot name="random">' + "".join(links) + "".join(joints) + "</robot>"


def pin_model(urdf: str, floating: bool):
    if floating:
        return pin.buildModelFromXML(urdf, pin.JointModelFreeFlyer())
    return pin.buildModelFromXML(urdf)


def random_state(model, rng, B):
    q = torch.tensor(rng.normal(size=(B, model.nq)))
    for i, t in enumerate(model.joint_types):
        if t == "free":
            s = model.q_slice(i)
            quat = q[:, s.start + 3:s.stop]
            q[:, s.start + 3:s.stop] = quat / quat.norm(dim=-1, keepdim=True)
    return q, torch.tensor(rng.normal(size=(B, model.nv))), torch.tensor(rng.normal(size=(B, model.nv)))


def dof_permutation(model, pm):
    """Index of each Pinocchio velocity dof in our qd (both order joints by tree traversal, maybe differently)."""
    perm_q, perm_v = [], []
    ours = {n: i for i, n in enumerate(model.joint_names)}
    for jid in range(1, pm.njoints):
        name = pm.names[jid]
        i = 0 if name == "root_joint" else ours[name]
        vs = model.v_slice(i)
        perm_v += list(range(vs.start, vs.stop))
        perm_q.append(i)
    return perm_q, np.array(perm_v)


def pin_q(model, pm, q: np.ndarray) -> np.ndarray:
    order, _ = dof_permutation(model, pm)
    parts = []
    for i in order:
        qi = q[model.q_slice(i)]
        parts.append(np.array([qi[0], qi[1], np.cos(qi[2]), np.sin(qi[2])]) if model.joint_types[i] == "planar" else qi)
    return np.concatenate(parts)


@pytest.mark.parametrize("seed", range(12))
def test_aba_rnea_crba_match_pinocchio_on_random_trees(seed):
    rng = np.random.default_rng(seed)
    floating = seed % 3 == 0
    n = int(rng.integers(1, 9))
    urdf = random_tree_urdf(rng, n, floating)
    model = model_from_urdf(urdf, batch=4)
    pm = pin_model(urdf, floating)
    pd = pm.createData()
    assert pm.nv == model.nv
    _, perm = dof_permutation(model, pm)
    q, qd, tau = random_state(model, rng, 4)
    qdd = forward_dynamics(model, q, qd, tau)
    tau_id = inverse_dynamics(model, q, qd, qdd)
    H = mass_matrix(model, q)
    for b in range(4):
        qp = pin_q(model, pm, q[b].numpy())
        ref = pin.aba(pm, pd, qp, qd[b].numpy()[perm], tau[b].numpy()[perm])
        np.testing.assert_allclose(qdd[b].numpy()[perm], ref, rtol=0, atol=1e-9)
        np.testing.assert_allclose(tau_id[b].numpy(), tau[b].numpy(), rtol=0, atol=1e-9)
        M = pin.crba(pm, pd, qp)
        M = np.triu(M) + np.triu(M, 1).T
        np.testing.assert_allclose(H[b].numpy()[np.ix_(perm, perm)], M, rtol=0, atol=1e-9)
        ref_rnea = pin.rnea(pm, pd, qp, qd[b].numpy()[perm], qdd[b].numpy()[perm])
        np.testing.assert_allclose(ref_rnea, tau[b].numpy()[perm], rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", [1, 3])
def test_forward_kinematics_matches_pinocchio(seed):
    rng = np.random.default_rng(seed)
    floating = seed == 3
    urdf = random_tree_urdf(rng, 6, floating)
    model = model_from_urdf(urdf, batch=2)
    pm = pin_model(urdf, floating)
    pd = pm.createData()
    q, _, _ = random_state(model, rng, 2)
    T = forward_kinematics(model, q)
    for b in range(2):
        pin.framesForwardKinematics(pm, pd, pin_q(model, pm, q[b].numpy()))
        for i, name in enumerate(model.body_names):
            fid = pm.getFrameId(name)
            np.testing.assert_allclose(T[b, i].numpy(), pd.oMf[fid].homogeneous, atol=1e-12)


def test_float32_close_to_float64():
    rng = np.random.default_rng(7)
    urdf = random_tree_urdf(rng, 6, True)
    m64 = model_from_urdf(urdf, batch=3)
    m32 = model_from_urdf(urdf, batch=3, dtype=torch.float32)
    q, qd, tau = random_state(m64, rng, 3)
    a64 = forward_dynamics(m64, q, qd, tau)
    a32 = forward_dynamics(m32, q.float(), qd.float(), tau.float())
    assert a32.dtype == torch.float32
    np.testing.assert_allclose(a32.double().numpy(), a64.numpy(), rtol=1e-3, atol=1e-3 * a64.abs().max().item())


def test_batch_of_one_equals_row_of_batch():
    rng = np.random.default_rng(11)
    urdf = random_tree_urdf(rng, 5, True)
    model = model_from_urdf(urdf, batch=4, contact_points=0)
    # each particle its own parameters
    model = model.replace(mass=model.mass * torch.linspace(0.5, 2.0, 4, dtype=torch.float64)[:, None],
                          damping=torch.rand(4, model.nv, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    q, qd, tau = random_state(model, rng, 4)
    full = rollout(model, State(q, qd), 20, dt=1e-3, controls=Control(tau=tau.expand(20, 4, -1)))
    for b in range(4):
        one = rollout(model.select(b), State(q[b:b + 1], qd[b:b + 1]), 20, dt=1e-3,
                      controls=Control(tau=tau[b:b + 1].expand(20, 1, -1)))
        np.testing.assert_allclose(one.q[:, 0].numpy(), full.q[:, b].numpy(), rtol=0, atol=1e-13)
        np.testing.assert_allclose(one.qd[:, 0].numpy(), full.qd[:, b].numpy(), rtol=0, atol=1e-13)


def test_urdf_round_trip_same_dynamics_here_and_in_pinocchio():
    rng = np.random.default_rng(5)
    for floating in (False, True):
        urdf = random_tree_urdf(rng, 7, floating)
        model = model_from_urdf(urdf, batch=2)
        text = model_to_urdf(model)
        again = model_from_urdf(text, batch=2)
        assert again.joint_types == model.joint_types and again.parents == model.parents
        q, qd, tau = random_state(model, rng, 2)
        np.testing.assert_allclose(forward_dynamics(again, q, qd, tau).numpy(),
                                   forward_dynamics(model, q, qd, tau).numpy(), atol=1e-9)
        pm = pin_model(text, floating)
        pd = pm.createData()
        _, perm = dof_permutation(again, pm)
        a = forward_dynamics(model, q, qd, tau)
        ref = pin.aba(pm, pd, pin_q(again, pm, q[0].numpy()), qd[0].numpy()[perm], tau[0].numpy()[perm])
        np.testing.assert_allclose(a[0].numpy()[perm], ref, atol=1e-9)


def test_named_parameters_and_free_fall():
    urdf = random_tree_urdf(np.random.default_rng(2), 1, True)
    model = model_from_urdf(urdf, batch=2).with_params({"b0.mass": torch.tensor([1.0, 3.0], dtype=torch.float64)})
    assert model.get("b0.mass").tolist() == [1.0, 3.0]
    # a free body with no joint forces falls with g whatever its mass: z(t) = -g t^2 / 2 (Euler: exact up to O(dt))
    s0 = model.zero_state()
    s = rollout(model, s0, 100, dt=1e-3, integrator="rk4")
    T = forward_kinematics(model, s.q[-1])
    np.testing.assert_allclose(T[:, 0, 2, 3].numpy(), [-9.81 * 0.1 ** 2 / 2] * 2, atol=1e-9)
    s1 = step(model, s0, None, dt=1e-3)
    np.testing.assert_allclose(s1.qd[:, 2].numpy(), [-9.81e-3] * 2, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 2, 5])
def test_joint_space_inertia_path_matches_aba_with_joint_forces_and_contact(seed, monkeypatch):
    """The default step algorithm ("jsim", fast.py) against ABA, eagerly and in the code path
    torch.compile traces (multiply-and-sum products, unrolled Cholesky), forced here."""

    rng = np.random.default_rng(seed)
    model = model_from_urdf(random_tree_urdf(rng, 7, seed == 0), batch=3)
    g = torch.Generator().manual_seed(seed)
    P = 6
    model = model.replace(damping=torch.rand(3, model.nv, generator=g, dtype=torch.float64),
                          friction=torch.rand(3, model.nv, generator=g, dtype=torch.float64),
                          stiffness=torch.rand(3, model.nv, generator=g, dtype=torch.float64),
                          rest=torch.rand(3, model.nv, generator=g, dtype=torch.float64),
                          contact_body=tuple(int(b) for b in rng.integers(0, model.num_bodies, P)),
                          contact_points=torch.tensor(rng.normal(size=(P, 3)) * 0.3), ground=True, tip_radius=0.5)
    q, qd, tau = random_state(model, rng, 3)
    ctrl = Control(tau=tau, tip_pos=torch.tensor(rng.normal(size=(3, 3)) * 0.3),
                   tip_vel=torch.tensor(rng.normal(size=(3, 3))))
    _assert_fast_equals_aba(model, State(q, qd), ctrl, monkeypatch)


@pytest.mark.parametrize("contact_on_weld", [False, True])
def test_bodies_welded_to_the_world_are_left_out_of_the_forces_with_the_same_accelerations(contact_on_weld,
                                                                                              monkeypatch):
    """A body fixed to the world (and one fixed to it) moves with no dof: ``fast_prepare`` forms
    forces only for the others (and bodies with contact points), and the joint-space path still
    equals ABA over the whole tree, eagerly and in the traced code path."""
    from vid2sim.models.dynamics import fast

    links = "".join(f'<link name="{n}"><inertial><origin xyz="0.1 0.05 -0.2"/><mass value="{m}"/><inertia ixx="0.02" '
                    f'iyy="0.03" izz="0.04" ixy="0.001" ixz="0" iyz="0.002"/></inertial></link>'
                    for n, m in (("base", 8.0), ("shelf", 2.0), ("door", 0.6), ("drawer", 0.8), ("knob", 0.1)))
    joints = [("fixed", "world", "base", "0.1 0.2 0.3", "0 0 1"), ("fixed", "base", "shelf", "0 0 0.4", "0 0 1"),
              ("revolute", "base", "door", "0.2 -0.2 0.1", "0 0 1"), ("prismatic", "shelf", "drawer", "0 0.1 0", "0 1 0"),
              ("revolute", "drawer", "knob", "0.05 0 0", "1 0 0")]
    urdf = '<robot name="cab"><link name="world"/>' + links + "".join(
        f'<joint name="j{i}" type="{t}"><parent link="{p}"/><child link="{c}"/><origin xyz="{o}" rpy="0.1 -0.2 0.3"/>'
        f'<axis xyz="{a}"/></joint>' for i, (t, p, c, o, a) in enumerate(joints)) + "</robot>"
    rng = np.random.default_rng(3)
    model = model_from_urdf(urdf, batch=2).replace(damping=torch.full((2, 3), 0.3, dtype=torch.float64))
    welded = [model.body_names.index(b) for b in ("base", "shelf")]
    if contact_on_weld:
        model = model.replace(contact_body=(welded[1], model.body_names.index("knob")),
                              contact_points=torch.tensor([[0.0, 0.0, -3.0], [0.02, 0.0, -3.0]], dtype=torch.float64),
                              ground=True)
    prep = fast.fast_prepare(model)
    want = sorted(set(range(model.num_bodies)) - set(welded) | ({welded[1]} if contact_on_weld else set()))
    assert prep.active == want
    q, qd, tau = random_state(model, rng, 2)
    ctrl = Control(tau=tau)
    _assert_fast_equals_aba(model, State(q, qd), ctrl, monkeypatch)


def _assert_fast_equals_aba(model, state, ctrl, monkeypatch):
    """The joint-space path's accelerations equal ABA's to 1e-12 of their scale, eagerly and traced."""
    from vid2sim.models.dynamics import accelerations, fast

    ref = accelerations(model, state, ctrl, algorithm="aba")
    scale = ref.abs().max().item()
    np.testing.assert_allclose(accelerations(model, state, ctrl).numpy(), ref.numpy(), rtol=0, atol=1e-12 * scale)
    monkeypatch.setattr(fast, "_compiling", lambda: True)
    np.testing.assert_allclose(accelerations(model, state, ctrl).numpy(), ref.numpy(), rtol=0, atol=1e-12 * scale)
