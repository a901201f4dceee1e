"""rollout(compile=True) against the eager rollout: states and gradients, with and without grad.

The compiled path runs step 1 through torch.compile and runs that graph's Inductor
kernels for the later steps: directly, through kernels.rollout_steps (integrate.KERNEL_ROLLOUT),
or else replayed one step at a time (integrate._CompiledStep); a later rollout of the same
step (stepcache: in memory, or from disk in another process) runs every step through the
kernels without Dynamo. These tests check that each path is taken and changes no number
beyond float64 rounding.
"""
import numpy as np
import pytest
import torch

from vid2sim.models.dynamics import Control, State, model_from_urdf, rollout
from vid2sim.models.dynamics import integrate, stepcache

pytestmark = pytest.mark.slow  # torch.compile: tens of seconds per compiled shape

STEPS = 30


def _problem(urdf: str):
    base = model_from_urdf(urdf, batch=3)
    g = torch.Generator().manual_seed(1)
    mass = base.mass * (0.8 + 0.4 * torch.rand(base.mass.shape, generator=g, dtype=torch.float64))
    damping = 0.05 + 0.1 * torch.rand(3, 2, generator=g, dtype=torch.float64)
    q0 = torch.rand(3, 2, generator=g, dtype=torch.float64) - 0.5
    qd0 = torch.rand(3, 2, generator=g, dtype=torch.float64)
    tau = Control(tau=0.3 * torch.randn(STEPS, 3, 2, generator=g, dtype=torch.float64))
    return base, mass, damping, q0, qd0, tau


@pytest.fixture(autouse=True)
def fresh_step_cache(monkeypatch, tmp_path):
    """An empty step cache (memory and disk) for each test: the first compiled rollout goes
    through Dynamo."""
    monkeypatch.setattr(stepcache, "_MEMORY", {})
    monkeypatch.setattr(stepcache, "_dir", lambda: tmp_path / "vid2sim_steps")
    return tmp_path / "vid2sim_steps"


@pytest.fixture(params=[True, False], ids=["kernels", "replay"])
def kernel_rollout(request, monkeypatch):
    monkeypatch.setattr(integrate, "KERNEL_ROLLOUT", request.param)
    return request.param


def _count_replays(monkeypatch):
    """A list that gets one entry per step run past torch.compile (kernel rollout or replay)."""
    calls = []
    replay, steps = integrate._CompiledStep.replay, integrate.rollout_steps

    def counting(*args):
        calls.append(1)
        return replay(*args)

    def counting_steps(*args):
        out = steps(*args)
        if out is not None:
            calls.extend([1] * out[0].shape[0])
        return out

    monkeypatch.setattr(integrate._CompiledStep, "replay", staticmethod(counting))
    monkeypatch.setattr(integrate, "rollout_steps", counting_steps)
    return calls


def test_compiled_rollout_value_and_gradients_equal_eager(double_pendulum_urdf, monkeypatch, kernel_rollout):
    base, mass, damping, q0, qd0, tau = _problem(double_pendulum_urdf)

    def run(compile, q0_grad=True):
        m, d, q = (t.clone().requires_grad_() for t in (mass, damping, q0))
        u = tau.tau.clone().requires_grad_()      # per-step inputs with gradients
        q.requires_grad_(q0_grad)
        # a strided start state, as identify's (B, nq + nv) starts give
        start = torch.cat([q, qd0], 1)
        tr = rollout(base.replace(mass=m, damping=d), State(start[:, :2], start[:, 2:]), STEPS, dt=0.01,
                     controls=Control(tau=u), compile=compile)
        (tr.q[1:].pow(2).sum() + tr.qd[-1].sin().sum()).backward()
        return tr.q.detach(), tr.qd.detach(), m.grad, d.grad, u.grad, q.grad

    calls = _count_replays(monkeypatch)
    compiled = run(True)
    assert len(calls) == STEPS - 1          # step 0 through torch.compile
    compiled = run(True)                    # a second rollout: every step through the kept kernels, or replayed
    n2 = len(calls)
    assert n2 == (2 * STEPS - 1 if kernel_rollout else 2 * (STEPS - 1))
    for a, b in zip(compiled, run(False)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)
    # q0 that does not require grad (step 0 then sees a copy that does, like the later steps)
    compiled = run(True, q0_grad=False)
    assert len(calls) == n2 + (STEPS if kernel_rollout else STEPS - 1)
    for a, b in zip(compiled[:5], run(False, q0_grad=False)[:5]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)
    assert compiled[5] is None


def test_compiled_rollout_without_grad_equals_eager(double_pendulum_urdf, monkeypatch, kernel_rollout):
    base, mass, damping, q0, qd0, tau = _problem(double_pendulum_urdf)
    model = base.replace(mass=mass, damping=damping)
    calls = _count_replays(monkeypatch)
    with torch.no_grad():
        compiled = rollout(model, State(q0, qd0), STEPS, dt=0.01, controls=tau, compile=True)
    assert len(calls) == STEPS - 1 and not compiled.q.requires_grad
    eager = rollout(model, State(q0, qd0), STEPS, dt=0.01, controls=tau)
    np.testing.assert_allclose(compiled.q.numpy(), eager.q.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(compiled.qd.numpy(), eager.qd.numpy(), rtol=1e-10, atol=1e-12)


def test_more_compiled_graphs_than_dynamos_default_limit_in_one_process(double_pendulum_urdf):
    """One graph per model structure and batch size: a process identifying several mechanisms
    (scripts/bench_twin.py: the double pendulum after five others) passed Dynamo's default
    recompile limit of 8 and failed with "Recompilation triggered with skip_guard_eval_unsafe
    stance" (reproduced here with integrate.RECOMPILE_LIMIT = 8 at batch 9 or earlier)."""
    for b in range(1, 11):
        m = model_from_urdf(double_pendulum_urdf, batch=b)
        s = State(torch.full((b, 2), 0.3, dtype=torch.float64), torch.zeros(b, 2, dtype=torch.float64))
        with torch.no_grad():
            compiled, eager = rollout(m, s, 4, dt=0.01, compile=True), rollout(m, s, 4, dt=0.01)
        assert torch.allclose(compiled.q, eager.q, atol=1e-12)


def test_kernel_rollout_gradcheck(double_pendulum_urdf, monkeypatch):
    """The kernel rollout's backward (the step's backward kernels run from the last step to
    the first) against finite differences of its own forward, wrt masses, dampings, the
    start state and per-step joint torques."""
    calls, steps_fn = [], integrate.rollout_steps
    monkeypatch.setattr(integrate, "rollout_steps", lambda *a: calls.append(steps_fn(*a)) or calls[-1])
    base, mass, damping, q0, qd0, tau = _problem(double_pendulum_urdf)
    steps = 6

    def f(m, d, q, qd, u):
        tr = rollout(base.replace(mass=m, damping=d), State(q, qd), steps, dt=0.01,
                     controls=Control(tau=u), compile=True)
        return tr.q[1:], tr.qd[-1]

    inputs = [t.clone().requires_grad_() for t in (mass, damping, q0, qd0, tau.tau[:steps])]
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)
    # the first rollout: step 0 through torch.compile; later ones: every step through the kept kernels
    assert calls and all(c is not None for c in calls)
    assert calls[0][0].shape[0] == steps - 1 and all(c[0].shape[0] == steps for c in calls[1:])


def test_step_cache_from_disk_runs_without_dynamo(double_pendulum_urdf, monkeypatch, fresh_step_cache):
    """A step compiled once is found again from its file (as by another process) and runs
    every step through its kernels without Dynamo: same states and gradients as eager."""
    base, mass, damping, q0, qd0, tau = _problem(double_pendulum_urdf)

    def run(compile):
        m, d = (t.clone().requires_grad_() for t in (mass, damping))
        tr = rollout(base.replace(mass=m, damping=d), State(q0, qd0), STEPS, dt=0.01, controls=tau, compile=compile)
        (tr.q[1:].pow(2).sum() + tr.qd[-1].sin().sum()).backward()
        return tr.q.detach(), tr.qd.detach(), m.grad, d.grad

    run(True)                                       # compiles, keeps the step
    assert len(list(fresh_step_cache.glob("*.json"))) == 1
    monkeypatch.setattr(stepcache, "_MEMORY", {})   # a new process: only the disk

    def no_dynamo():
        raise AssertionError("the kept step went through torch.compile")

    monkeypatch.setattr(integrate, "_get_compiled", no_dynamo)
    calls = _count_replays(monkeypatch)
    kept = run(True)
    assert len(calls) == STEPS
    for a, b in zip(kept, run(False)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


def test_step_key_covers_what_the_graph_depends_on(double_pendulum_urdf):
    base = model_from_urdf(double_pendulum_urdf, batch=3)
    q, qd = torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, 2, dtype=torch.float64)
    opts, prep = integrate._INDUCTOR_OPTIONS, integrate._prepare

    def key(model=base, q=q, dt=0.01, control=None, integrator="euler"):
        return stepcache.step_key(prep(model, "jsim"), q, qd, control, dt, integrator, opts, 0.0)

    k = key()
    assert k is not None and k == key()            # fresh prep tensors, same structure
    assert len({k, key(dt=0.02), key(integrator="rk4"), key(q=q.clone().requires_grad_()),
                key(q=torch.zeros(2, 3, dtype=torch.float64).T), key(model=base.replace(friction_velocity=0.02)),
                key(control=Control(tau=torch.zeros(3, 2, dtype=torch.float64))),
                key(model=model_from_urdf(double_pendulum_urdf, batch=4))}) == 8
    with torch.no_grad():
        assert key() != k
    assert key(model=base.replace(nets=(torch.nn.Linear(2, 2),))) is None   # not keyable: through Dynamo


def test_native_loop_equals_python_loop(double_pendulum_urdf, monkeypatch):
    """The C step loop (native.py) against the Python loop over the same kernels: states and
    gradients wrt masses, dampings, the start state and per-step torques, bit for bit."""
    from vid2sim.models.dynamics import native

    base, mass, damping, q0, qd0, tau = _problem(double_pendulum_urdf)
    used, fw = [], native.forward
    monkeypatch.setattr(native, "forward", lambda *a: used.append(1) or fw(*a))

    def run(enabled):
        monkeypatch.setattr(native, "ENABLED", enabled)
        m, d, q, u = (t.clone().requires_grad_() for t in (mass, damping, q0, tau.tau))
        tr = rollout(base.replace(mass=m, damping=d), State(q, qd0), STEPS, dt=0.01, controls=Control(tau=u),
                     compile=True)
        (tr.q[1:].pow(2).sum() + tr.qd[-1].sin().sum()).backward()
        with torch.no_grad():
            free = rollout(base.replace(mass=mass), State(q0, qd0), STEPS, dt=0.01, controls=tau, compile=True)
        return tr.q.detach(), tr.qd.detach(), m.grad, d.grad, q.grad, u.grad, free.q, free.qd

    a = run(True)
    assert len(used) == 2 and native._LIBS      # with grad and without, through the C loop
    for x, y in zip(a, run(False)):
        assert torch.equal(x, y)


BOX = """<robot name="box"><link name="box"><inertial><mass value="2.0"/>
 <inertia ixx="0.01" iyy="0.02" izz="0.025" ixy="0" ixz="0" iyz="0"/></inertial>
 <collision><geometry><box size="0.3 0.2 0.1"/></geometry></collision></link></robot>"""


def test_contact_step_from_disk_equals_eager(monkeypatch, fresh_step_cache):
    """A free box on the floor (penalty contact, a graph with tensor constants of its own,
    which are kept beside the wrapper): compiled, kept, found again from disk without Dynamo,
    against eager."""
    model = model_from_urdf(BOX, batch=2, contact_points=8, contact_stiffness=2e3, contact_damping=50.0,
                            contact_friction=0.5)
    q0 = model.zero_state().q.clone()
    q0[:, 2] = torch.tensor([0.04, 0.06], dtype=torch.float64)
    s0 = State(q0, torch.zeros(2, 6, dtype=torch.float64))
    with torch.no_grad():
        rollout(model, s0, 20, dt=2e-3, compile=True)
        monkeypatch.setattr(stepcache, "_MEMORY", {})
        monkeypatch.setattr(integrate, "_get_compiled", lambda: (_ for _ in ()).throw(AssertionError("Dynamo")))
        kept = rollout(model, s0, 20, dt=2e-3, compile=True)
    eager = rollout(model, s0, 20, dt=2e-3)
    np.testing.assert_allclose(kept.q.numpy(), eager.q.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(kept.qd.numpy(), eager.qd.numpy(), rtol=1e-10, atol=1e-10)
