"""Gradients: torch.autograd.gradcheck (float64) through one step and a 50-step rollout."""
import numpy as np
import pytest
import torch
from torch.autograd import gradcheck

from vid2sim.models.dynamics import Control, State, model_from_urdf, rollout, step

BOX = """<robot name="box"><link name="box"><inertial><mass value="1.0"/>
 <inertia ixx="0.01" iyy="0.02" izz="0.025" ixy="0" ixz="0" iyz="0"/></inertial>
 <collision><geometry><box size="0.3 0.2 0.1"/></geometry></collision></link></robot>"""


def _unpack(model, names, tensors):
    return model.replace(**dict(zip(names, tensors)))


@pytest.mark.parametrize("algorithm", ["jsim", "aba"])
@pytest.mark.parametrize("integrator", ["euler", "rk4"])
def test_gradcheck_step_wrt_all_joint_and_body_parameters(double_pendulum_urdf, algorithm, integrator):
    base = model_from_urdf(double_pendulum_urdf, batch=2)
    g = torch.Generator().manual_seed(0)
    names = ["mass", "com", "inertia", "damping", "friction", "stiffness", "rest", "gravity"]
    params = [getattr(base, n).clone() + 0.1 * torch.rand(getattr(base, n).shape, generator=g, dtype=torch.float64)
              for n in names]
    params[2] = 0.5 * (params[2] + params[2].transpose(-1, -2))
    q0 = torch.rand(2, 2, generator=g, dtype=torch.float64)
    qd0 = torch.rand(2, 2, generator=g, dtype=torch.float64)
    tau = torch.rand(2, 2, generator=g, dtype=torch.float64)

    def f(q, qd, u, *p):
        s = step(_unpack(base, names, p), State(q, qd), Control(tau=u), dt=0.01, integrator=integrator,
                 algorithm=algorithm)
        return s.q, s.qd

    inputs = tuple(t.requires_grad_() for t in [q0, qd0, tau] + params)
    assert gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_gradcheck_step_with_ground_contact_parameters():
    base = model_from_urdf(BOX, batch=2, contact_points=8, contact_stiffness=2e3, contact_damping=0.5,
                           contact_friction=0.6)
    assert base.joint_types == ("free",) and len(base.contact_body) == 8
    q0 = base.zero_state().q.clone()
    q0[:, 2] = 0.04                      # lower corners 1 cm into the ground
    q0[:, 3:7] = torch.tensor([0.02, -0.03, 0.0, 1.0], dtype=torch.float64)
    q0[:, 3:7] /= q0[:, 3:7].norm(dim=-1, keepdim=True)
    qd0 = torch.tensor([[0.3, -0.2, -0.1, 0.2, 0.1, -0.3]] * 2, dtype=torch.float64)
    names = ["contact_stiffness", "contact_damping", "contact_friction", "mass"]
    params = [getattr(base, n).clone() for n in names]

    def f(q, qd, *p):
        s = step(_unpack(base, names, p), State(q, qd), dt=1e-3)
        return s.q, s.qd

    inputs = tuple(t.requires_grad_() for t in [q0, qd0] + params)
    assert gradcheck(f, inputs, eps=1e-7, atol=1e-6, rtol=1e-5)


def test_gradcheck_fifty_step_rollout_wrt_parameters_and_initial_state(double_pendulum_urdf):
    base = model_from_urdf(double_pendulum_urdf, batch=1)
    mass = base.mass.clone()
    damping = torch.tensor([[0.1, 0.05]], dtype=torch.float64)
    q0 = torch.tensor([[0.4, -0.3]], dtype=torch.float64)
    qd0 = torch.tensor([[0.2, 0.1]], dtype=torch.float64)

    def f(q, qd, m, d):
        tr = rollout(base.replace(mass=m, damping=d), State(q, qd), 50, dt=0.01)
        return tr.q[-1], tr.qd[-1], tr.q[25]

    inputs = tuple(t.requires_grad_() for t in (q0, qd0, mass, damping))
    assert gradcheck(f, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_rollout_gradient_matches_central_differences_on_batch(double_pendulum_urdf):
    """Per-particle parameters: d(loss_b)/d(mass_b) from one backward equals finite differences."""
    base = model_from_urdf(double_pendulum_urdf, batch=3)
    mass = (base.mass * torch.tensor([[1.0], [1.3], [0.7]], dtype=torch.float64)).requires_grad_()
    s0 = State(torch.tensor([[0.5, 0.1]] * 3, dtype=torch.float64), torch.zeros(3, 2, dtype=torch.float64))

    def loss(m):
        return rollout(base.replace(mass=m), s0, 100, dt=0.01).q.pow(2).sum((0, 2))

    loss(mass).sum().backward()
    h = 1e-6
    for k in range(2):
        e = torch.zeros_like(mass)
        e[:, k] = h
        with torch.no_grad():
            fd = (loss(mass + e) - loss(mass - e)) / (2 * h)
        np.testing.assert_allclose(mass.grad[:, k].numpy(), fd.numpy(), rtol=1e-6, atol=1e-8)
