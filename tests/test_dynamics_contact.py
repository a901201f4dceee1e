"""Penalty contact: static equilibrium, Coulomb sliding distance, a pushing tip; articulation builder."""
import numpy as np
import torch

from vid2sim.models.dynamics import (Control, State, forward_kinematics, model_from_articulation, model_from_urdf,
                                     rollout)
from vid2sim.pipeline.artifacts import Articulation, Joint

BOX = """<robot name="box"><link name="box"><inertial><mass value="2.0"/>
 <inertia ixx="0.01" iyy="0.02" izz="0.025" ixy="0" ixz="0" iyz="0"/></inertial>
 <collision><geometry><box size="0.3 0.2 0.1"/></geometry></collision></link></robot>"""


def box_model(**kw):
    return model_from_urdf(BOX, batch=1, contact_points=8, **kw)


def test_box_rests_at_penalty_equilibrium():
    k, m, g = 2e3, 2.0, 9.81
    model = box_model(contact_stiffness=k, contact_damping=50.0, contact_friction=0.5)
    q0 = model.zero_state().q.clone()
    q0[:, 2] = 0.05
    tr = rollout(model, State(q0, torch.zeros(1, 6, dtype=torch.float64)), 500, dt=2e-3)
    # four bottom corners share the weight: 4 k depth = m g
    depth = m * g / (4 * k)
    np.testing.assert_allclose(tr.q[-1, 0, 2].item(), 0.05 - depth, rtol=0, atol=1e-5)
    assert tr.qd[-1].abs().max().item() < 1e-3


def test_sliding_box_stops_after_coulomb_distance():
    k, m, g, mu, v0 = 2e3, 2.0, 9.81, 0.5, 1.0
    model = box_model(contact_stiffness=k, contact_damping=50.0, contact_friction=mu)
    model = model.replace(slip_velocity=1e-3)
    q0 = model.zero_state().q.clone()
    q0[:, 2] = 0.05 - m * g / (4 * k)
    qd0 = torch.tensor([[v0, 0, 0, 0, 0, 0]], dtype=torch.float64)
    tr = rollout(model, State(q0, qd0), 200, dt=2e-3)
    x_stop = tr.q[-1, 0, 0].item()
    expected = v0 ** 2 / (2 * mu * g)                      # 0.102 m
    np.testing.assert_allclose(x_stop, expected, rtol=0.03)
    assert abs(tr.qd[-1, 0, 0].item()) < 0.02


def test_moving_tip_pushes_a_body():
    model = model_from_urdf(BOX, batch=1, contact_points=8, gravity=(0.0, 0.0, 0.0), contact_stiffness=5e3,
                            contact_damping=10.0, contact_friction=0.0)
    # one contact point at the centre of the -x face, where the tip (a vertical cylinder) arrives
    model = model.replace(ground=False, tip_radius=0.02, tip_half_length=0.5, contact_body=(0,),
                          contact_points=torch.tensor([[-0.15, 0.0, 0.0]], dtype=torch.float64))
    steps, dt, v = 300, 1e-3, 0.5
    t = torch.arange(steps, dtype=torch.float64) * dt
    tip_pos = torch.stack([-0.22 + v * t, torch.zeros_like(t), torch.zeros_like(t)], -1)[:, None, :]
    tip_vel = torch.tensor([v, 0.0, 0.0], dtype=torch.float64).expand(steps, 1, 3)
    tr = rollout(model, model.zero_state(), steps, dt=dt, controls=Control(tip_pos=tip_pos, tip_vel=tip_vel))
    # the tip surface reaches the box's -x face (x = -0.15) after 0.1 s and then carries it along at about v
    assert tr.q[90, 0, 0].abs().item() < 1e-9
    assert 0.9 * v < tr.qd[-1, 0, 0].item() < 2.1 * v
    assert tr.q[-1, 0, 0].item() - 0.15 > tip_pos[-1, 0, 0].item() - 0.005


def test_model_from_articulation_places_bodies_as_tracked_at_frame_zero():
    art = Articulation(["arm"], [Joint("hinge", "revolute", "world", "arm", (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))])
    T0 = np.eye(4)
    T0[:3, 3] = [0.0, 0.0, 0.7]          # hanging 0.3 m below the pivot
    model = model_from_articulation(art, {"arm": T0}, masses={"arm": 2.0})
    q = torch.tensor([[0.5]], dtype=torch.float64)
    T = forward_kinematics(model, q)[0, 0].numpy()
    com_world = T[:3, :3] @ model.com[0, 0].numpy() + T[:3, 3]
    c, s = np.cos(0.5), np.sin(0.5)
    # rotating by +0.5 rad about +y through the pivot (0, 0, 1)
    np.testing.assert_allclose(com_world, [-0.3 * s, 0.0, 1.0 - 0.3 * c], atol=1e-12)
    # small-angle pendulum period of a point mass at 0.3 m (inertia 0.4 m r^2 about its centre)
    L, r = 0.3, 0.05
    I_pivot = 2.0 * L ** 2 + 0.4 * 2.0 * r ** 2
    period = 2 * np.pi * np.sqrt(I_pivot / (2.0 * 9.81 * L))
    tr = rollout(model, State(torch.tensor([[0.01]], dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64)),
                 int(period / 2 / 1e-3), dt=1e-3, integrator="rk4")
    np.testing.assert_allclose(tr.q[-1, 0, 0].item(), -0.01, atol=2e-4)


def test_model_from_articulation_matches_the_truth_urdf_in_pinocchio(tmp_path):
    """The identify simulator's model (articulation + frame-0 poses + library shapes) has the
    dynamics of the synthetic recording's truth URDF (Pinocchio's ABA, independent). A capsule's
    inertia once counted its caps as cylinder (5 % too much), which biased identify."""
    import pinocchio as pin

    from vid2sim.datasets.synthetic import simulate
    from vid2sim.models.dynamics import forward_dynamics

    s = simulate("cartpole", seed=0, frames=2, fps=30.0)
    tr = s.truth
    art = Articulation.from_truth(tr)
    shapes = {b["name"]: s.shapes[b["shape"]] for b in tr["bodies"]}
    model = model_from_articulation(art, dict(zip(art.bodies, s.world_from_body[0])), shapes=shapes,
                                    masses={b["name"]: b["mass"] for b in tr["bodies"]})
    path = tmp_path / "truth.urdf"
    path.write_text(s.urdf)
    pm = pin.buildModelFromUrdf(str(path))
    pm.gravity.linear = np.array([0.0, 0.0, -9.81])
    data = pm.createData()
    q0 = np.asarray(s.q[0], float)               # model q = 0 is this configuration
    rng = np.random.default_rng(1)
    for _ in range(5):
        dq, v = rng.uniform(-1.5, 1.5, 2), rng.uniform(-3.0, 3.0, 2)
        th = q0[1] + dq[1]
        a_pin = pin.aba(pm, data, np.array([q0[0] + dq[0], np.cos(th), np.sin(th)]), v, np.zeros(2))
        a = forward_dynamics(model, torch.tensor(dq[None]), torch.tensor(v[None]))[0].numpy()
        # 1e-5: the synthetic poses and pivots are stored in float32 (old capsule inertia: ~1e-2)
        np.testing.assert_allclose(a, a_pin, rtol=1e-5, atol=1e-5)
