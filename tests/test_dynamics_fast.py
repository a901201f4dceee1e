"""The joint-space path (fast.py): its kept tree structure, and a branching tree with every
joint kind compiled against eager.

``fast_prepare`` keeps what depends only on the tree, the joint axes and the contact bodies;
the accelerations of models that differ only in their axes are checked against ABA
(algorithms.py, which keeps nothing). The compiled step forms world poses per joint kind,
stores each angle's sin/cos once and sums over the tree's ancestor lists instead of a
product with the ancestor mask; the compiled rollout (value and gradients) is checked
against the eager one, which takes none of those paths.
"""
import numpy as np
import pytest
import torch

from vid2sim.models.dynamics import State, accelerations, model_from_urdf, rollout, stepcache


def _link(name: str, m: float, c: str) -> str:
    return (f'<link name="{name}"><inertial><origin xyz="{c}"/><mass value="{m}"/><inertia ixx="0.02" '
            f'iyy="0.03" izz="0.04" ixy="0.002" ixz="-0.001" iyz="0.003"/></inertial></link>')


def _joint(i: int, t: str, parent: str, child: str, xyz: str, axis: str) -> str:
    return (f'<joint name="j{i}" type="{t}"><parent link="{parent}"/><child link="{child}"/>'
            f'<origin xyz="{xyz}" rpy="0.1 -0.2 0.3"/><axis xyz="{axis}"/></joint>')


# a planar base carrying a prismatic slide and two revolute arms (one on the slide), and a
# fixed knob: branching, every kind of joint but free, rotated joint frames
TREE = ('<robot name="tree"><link name="world"/>' + _link("base", 3.0, "0.05 0 0.02") + _link("slide", 0.8, "0 0.1 0")
        + _link("arm1", 0.5, "0.1 0 -0.05") + _link("arm2", 0.4, "0 0 -0.15") + _link("knob", 0.1, "0.02 0 0")
        + _joint(0, "planar", "world", "base", "0 0 0.1", "0 0 1")
        + _joint(1, "prismatic", "base", "slide", "0.2 0 0", "0 1 0")
        + _joint(2, "revolute", "base", "arm1", "-0.2 0 0", "0 0 1")
        + _joint(3, "revolute", "slide", "arm2", "0 0.1 0", "1 0 0")
        + _joint(4, "fixed", "arm2", "knob", "0 0 -0.3", "0 0 1") + "</robot>")


def _state(model, seed: int) -> State:
    g = torch.Generator().manual_seed(seed)
    B = model.batch
    return State(torch.rand(B, model.nq, generator=g, dtype=torch.float64) - 0.5,
                 torch.rand(B, model.nv, generator=g, dtype=torch.float64) - 0.5)


def test_models_that_differ_only_in_their_axes_get_their_own_structure():
    """A second model with other (unit) joint axes, prepared after the first: both equal ABA's
    accelerations; axes that require grad get their gradient."""
    model = model_from_urdf(TREE, batch=3).replace(damping=torch.full((3, 6), 0.2, dtype=torch.float64))
    state = _state(model, 0)
    other = torch.tensor([[0.0, 0.6, 0.8], [0.6, 0.0, 0.8], [0.0, 0.0, 1.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]],
                         dtype=torch.float64)
    for m in (model, model.replace(joint_axis=other), model):
        ref = accelerations(m, state, algorithm="aba")
        np.testing.assert_allclose(accelerations(m, state).numpy(), ref.numpy(), rtol=0,
                                   atol=1e-12 * ref.abs().max().item())
    # axes that require grad: not kept, the gradient flows (directional derivative against
    # central differences of the same accelerations)
    ax = other.clone().requires_grad_()
    accelerations(model.replace(joint_axis=ax), state).pow(2).sum().backward()
    d = torch.randn(other.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    h = 1e-6
    f = [accelerations(model.replace(joint_axis=other + e * h * d), state).pow(2).sum().item() for e in (1, -1)]
    fd = (f[0] - f[1]) / (2 * h)
    assert abs(fd) > 1e-3
    np.testing.assert_allclose((ax.grad * d).sum().item(), fd, rtol=1e-6)


@pytest.mark.slow  # torch.compile of one step: tens of seconds
def test_compiled_branching_tree_rollout_equals_eager(monkeypatch, tmp_path):
    monkeypatch.setattr(stepcache, "_MEMORY", {})
    monkeypatch.setattr(stepcache, "_dir", lambda: tmp_path / "vid2sim_steps")
    base = model_from_urdf(TREE, batch=4)
    g = torch.Generator().manual_seed(2)
    mass = base.mass * (0.8 + 0.4 * torch.rand(base.mass.shape, generator=g, dtype=torch.float64))
    damping = 0.05 + 0.2 * torch.rand(4, base.nv, generator=g, dtype=torch.float64)
    s0 = _state(base, 1)

    def run(compile):
        m, d, q = (t.clone().requires_grad_() for t in (mass, damping, s0.q))
        tr = rollout(base.replace(mass=m, damping=d), State(q, s0.qd), 25, dt=5e-3, compile=compile)
        (tr.q[1:].pow(2).sum() + tr.qd[-1].sin().sum()).backward()
        return tr.q.detach(), tr.qd.detach(), m.grad, d.grad, q.grad

    compiled, eager = run(True), run(False)
    assert float(compiled[0][-1].sub(compiled[0][0]).abs().max()) > 1e-3     # it moved
    for a, b in zip(compiled, eager):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)
    again = run(True)        # the kept step, every step through its kernels
    for a, b in zip(again, eager):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)
