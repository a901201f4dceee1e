"""Control: the cartpole planning model read from a URDF equals the truth, its dynamics
match PyBullet, and MPPI balances the pole on the true system."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from vid2sim.datasets.shapes import Shape  # noqa: E402
from vid2sim.datasets.synthetic import simulate  # noqa: E402
from vid2sim.models import control  # noqa: E402
from vid2sim.pipeline import export  # noqa: E402



@pytest.fixture(scope="module")
def urdfs(truth_inputs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("control")
    st = simulate("cartpole", seed=0, frames=60)
    true = tmp / "true.urdf"
    true.write_text(st.urdf)
    art, poses, jp, post = truth_inputs(st)
    twin = export.run(export.ExportConfig(), art, post, st.shapes, poses, tmp)
    return str(true), str(twin), st


def test_planning_params_from_urdf(urdfs):
    true, twin, st = urdfs
    p = control.cartpole_from_urdf(true)
    I_pole = Shape("pole", "capsule", radius=0.025, length=0.6).inertia(0.2)[0]
    assert (p.mc, p.mp, p.bc, p.bp) == pytest.approx((1.0, 0.2, 0.3, 0.004), abs=1e-9)
    assert p.l == pytest.approx(0.3, abs=1e-9) and p.I == pytest.approx(I_pole, rel=1e-6)
    assert p.theta_up == pytest.approx(0.0, abs=1e-9)
    q = control.cartpole_from_urdf(twin)  # the exported twin: same physics, q = 0 at frame 0
    assert (q.mc, q.mp, q.l, q.I, q.bc, q.bp) == pytest.approx((p.mc, p.mp, p.l, p.I, p.bc, p.bp), rel=1e-6)
    hinge = st.joint_names.index("hinge")
    assert q.theta_up == pytest.approx(-st.q[0, hinge], abs=1e-6)  # upright, in the twin's coordinates


def test_planning_model_matches_pybullet(urdfs):
    true, _, _ = urdfs
    p = control.cartpole_from_urdf(true)
    sys = control.BulletCartpole(true)
    try:
        for F in (0.0, 4.0):
            sys.reset(0.0, 0.3, 0.1, -0.5)
            x, th, xd, thd = 0.0, 0.3, 0.1, -0.5
            h = 1e-3
            for _ in range(200):
                xdd, thdd = control.accel(p, th, xd, thd, F, control.hinge_sign(p))
                xd, thd = xd + h * xdd, thd + h * thdd
                x, th = x + h * xd, th + h * thd
            sys.step(F, 0.2)
            assert np.allclose([x, th, xd, thd], sys.state(), atol=2e-3), (F, [x, th, xd, thd], sys.state())
    finally:
        sys.close()


def test_reward_definition():
    assert control.reward(0.0, 0.0, 0.0, 0.0) == pytest.approx(1.0)
    assert control.reward(0.0, math.pi, 0.0, 0.0) == pytest.approx(0.0)
    # DMC margins: x at 2 m and th' at 5 rad/s give tolerance 0.1, |u| = 1 gives small_control 0.8
    assert control.reward(2.0, 0.0, 0.0, 0.0) == pytest.approx(0.55)
    assert control.reward(0.0, 0.0, 5.0, 1.0) == pytest.approx(0.55 * 0.8)


def test_mppi_balances_on_true_system(urdfs):
    """Planning on the exported twin balances about as well as planning on the true model
    (single MPPI episodes vary a lot with the seed, so three each)."""
    true, twin, _ = urdfs
    cfg = control.MPPIConfig(steps=30)
    start = (0.0, math.radians(20), 0.1, 0.0)
    r_twin = np.mean([control.episode(twin, true, start, cfg, seed=s) for s in range(3)])
    r_true = np.mean([control.episode(true, true, start, cfg, seed=s) for s in range(3)])
    assert r_twin > 0.6 and abs(r_twin - r_true) < 0.15, (r_twin, r_true)
