"""Neural augmentation learns joint damping that the analytical model lacks (NeuralSim, Heiden et al. 2021).

Truth: a double pendulum with viscous joint damping. Model: the same pendulum without
damping plus a 2x5 ELU network at "joint_force" reading q and qd of both joints,
trained end to end through 10-step rollouts with the sparse group lasso (proximal
steps). It must explain the data and switch the position inputs off.
"""
import numpy as np
import torch

from vid2sim.models.dynamics import (State, adam_group_lasso_step, add_augmentation, augmentation_penalty,
                                     group_lasso_prox,
                                     model_from_urdf, rollout)

DP = """<robot name="dp"><link name="world"/>
<link name="l1"><inertial><origin xyz="0 0 -0.25"/><mass value="1.0"/>
 <inertia ixx="0.02" iyy="0.02" izz="0.004" ixy="0" ixz="0" iyz="0"/></inertial></link>
<link name="l2"><inertial><origin xyz="0 0 -0.2"/><mass value="0.6"/>
 <inertia ixx="0.01" iyy="0.01" izz="0.003" ixy="0" ixz="0" iyz="0"/></inertial></link>
<joint name="j0" type="revolute"><parent link="world"/><child link="l1"/><origin xyz="0 0 1"/><axis xyz="0 1 0"/>
 <limit lower="-3" upper="3" effort="1" velocity="1"/></joint>
<joint name="j1" type="revolute"><parent link="l1"/><child link="l2"/><origin xyz="0 0 -0.5"/><axis xyz="0 1 0"/>
 <limit lower="-3" upper="3" effort="1" velocity="1"/></joint></robot>"""


def test_augmentation_learns_missing_damping_and_lasso_drops_position_inputs():
    torch.manual_seed(0)
    dt, window, n_traj, T = 0.01, 10, 8, 100
    truth = model_from_urdf(DP, batch=n_traj).with_params({"j0.damping": 0.3, "j1.damping": 0.15})
    g = torch.Generator().manual_seed(1)
    s0 = State((torch.rand(n_traj, 2, generator=g, dtype=torch.float64) - 0.5) * 2.0,
               (torch.rand(n_traj, 2, generator=g, dtype=torch.float64) - 0.5) * 4.0)
    with torch.no_grad():
        data = rollout(truth, s0, T, dt=dt)                           # (T+1, n_traj, 2)
    starts = list(range(0, T - window, 5))
    q_start = torch.cat([data.q[k] for k in starts])
    qd_start = torch.cat([data.qd[k] for k in starts])
    target = torch.cat([data.q[k + 1:k + 1 + window] for k in starts], 1)   # (window, windows*n_traj, 2)
    B = q_start.shape[0]
    inputs = ["q/j0", "q/j1", "qd/j0", "qd/j1"]
    model = add_augmentation(model_from_urdf(DP, batch=B), "joint_force", inputs, hidden=5, layers=2, seed=0)
    net = model.nets[0]
    lr, lasso = 2e-2, 5e-2
    opt = torch.optim.Adam(net.parameters(), lr=lr)

    def fit_error(m):
        pred = rollout(m, State(q_start, qd_start), window, dt=dt).q[1:]
        return (pred - target).pow(2).mean()

    with torch.no_grad():
        err_analytic = fit_error(model.replace(nets=())).item()
    for it in range(150):
        opt.zero_grad()
        loss = fit_error(model) * 1e4 + augmentation_penalty(model, lasso=0.0, l2=1e-5)
        loss.backward()
        opt.step()
        group_lasso_prox(model, adam_group_lasso_step(net, opt, lr, lasso))  # proximal step of the lasso
    with torch.no_grad():
        err_aug = fit_error(model).item()
    norms = net.input_norms().detach().numpy()
    # the network explains the data far better than the undamped analytical model
    assert err_aug < 0.05 * err_analytic, (err_aug, err_analytic)
    # position inputs are switched off (exact zeros from the proximal step), velocity inputs kept
    assert norms[0] < 1e-3 and norms[1] < 1e-3, norms
    assert norms[2] > 0.1 and norms[3] > 0.1, norms
    # and the learned force is damping-like: tau ~ -b qd at a probe state
    probe = torch.tensor([[0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    tau = net(probe[:, None, :])[0, 0].detach().numpy()
    assert tau[0] < -0.1, tau


BOX = """<robot name="box"><link name="box"><inertial><mass value="2.0"/>
 <inertia ixx="0.01" iyy="0.02" izz="0.025" ixy="0" ixz="0" iyz="0"/></inertial>
 <collision><geometry><box size="0.3 0.2 0.1"/></geometry></collision></link></robot>"""


def test_contact_friction_insertion_point_adds_to_the_friction_force():
    """A "contact_friction" network whose output is a constant X per touching point adds 4X
    (four bottom corners) to the Coulomb force: the sliding distance follows v0^2 / (2 a)."""
    k, m, g, mu, v0, X = 2e3, 2.0, 9.81, 0.3, 1.0, 0.5
    model = model_from_urdf(BOX, batch=1, contact_points=8, contact_stiffness=k, contact_damping=50.0,
                            contact_friction=mu).replace(slip_velocity=1e-3)
    model = add_augmentation(model, "contact_friction", ["contact/slip", "contact/normal_force"])
    with torch.no_grad():
        model.nets[0].weights[-1].fill_(X)           # output bias; the output weights start at zero
    q0 = model.zero_state().q.clone()
    q0[:, 2] = 0.05 - m * g / (4 * k)
    qd0 = torch.tensor([[v0, 0, 0, 0, 0, 0]], dtype=torch.float64)
    tr = rollout(model, State(q0, qd0), 150, dt=2e-3)
    decel = mu * g + 4 * X / m
    np.testing.assert_allclose(tr.q[-1, 0, 0].item(), v0 ** 2 / (2 * decel), rtol=0.03)
    # d(x after 40 ms)/dX by autograd through the rollout equals central differences
    b_out = model.nets[0].weights[-1]
    tr = rollout(model, State(q0, qd0), 20, dt=2e-3)
    tr.q[-1, 0, 0].backward()
    h, xs = 1e-5, []
    for sign in (1, -1):
        with torch.no_grad():
            b_out.fill_(X + sign * h)
            xs.append(rollout(model, State(q0, qd0), 20, dt=2e-3).q[-1, 0, 0].item())
    np.testing.assert_allclose(b_out.grad.item(), (xs[0] - xs[1]) / (2 * h), rtol=1e-5)
    assert b_out.grad.item() < 0                      # more friction, less sliding
