"""Time stepping: accelerations with joint, contact and neural forces; Euler / RK4; rollouts.

Semi-implicit (symplectic) Euler as in TDS and MuJoCo's default: qd' = qd + dt*qdd(q, qd),
q' = q + dt*qdot(q, qd'), quaternions renormalised. RK4 is the classical four-stage
scheme on (q, qd) with the same renormalisation. ``rollout(compile=True)`` wraps one
step in ``torch.compile`` (traced once per model structure; ~12 CPU s cold) which
fuses the hundreds of tiny batched ops of a step into a few kernels for forward and
backward; compile time does not grow with the number of steps. After the first step
the rest of the rollout runs through those kernels without torch.compile's per-call
machinery: ``kernels.rollout_steps`` (every step's kernels in one loop, in C where
``native.py`` covers the layout, and one autograd node for the whole rollout), or, for
what it does not cover, ``_CompiledStep.replay`` (one autograd node per step). The
compiled step is kept (``stepcache.py``) in memory and on disk: a later rollout of the
same step, in this process or another, runs every step through the kernels and skips
Dynamo and Inductor. Not done here: compiling several steps per call or the whole loop
(``scan``): compile time grows with the graph, and Inductor's while-loop lowering of
``scan`` ran slower.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch._functorch.config  # noqa: F401  (activation_memory_budget, see rollout)

from .algorithms import aba_from_kinematics, kinematics, prepare
from .augment import friction_function, generalized_force
from .contact import contact_wrenches
from .fast import FastPrep, accel_fast, fast_prepare
from . import stepcache
from .kernels import rollout_steps
from .model import JOINT_NQ, Control, Model, State
from .spatial import quat_mul, quat_to_rot


def _prepare(model: Model, algorithm: str):
    if algorithm == "jsim":
        return fast_prepare(model)
    if algorithm == "aba":
        return prepare(model)
    raise ValueError(f"unknown algorithm {algorithm!r} (jsim, aba)")


def _accel(prep, q, qd, control: Control | None) -> torch.Tensor:
    if isinstance(prep, FastPrep):
        return accel_fast(prep, q, qd, control)
    m = prep.model
    kin = kinematics(prep, q, qd)
    mask = torch.tensor(m.spring_mask, dtype=q.dtype, device=q.device)
    tau = generalized_force(m, q, qd, control, list(m.spring_index), mask)
    w = contact_wrenches(prep, kin, control, friction_function(m) if m.nets else None)
    f_ext = None if w is None else list(w.unbind(1))
    return aba_from_kinematics(prep, kin, tau, f_ext)


def accelerations(model: Model, state: State, control: Control | None = None, algorithm: str = "jsim") -> torch.Tensor:
    """qdd (B, nv) with joint forces, contact and augmentation (what ``step`` integrates).

    algorithm: "jsim" (joint-space inertia method, ``fast.py``; default, fastest for small
    trees) or "aba" (Featherstone's articulated-body algorithm, O(N)).
    """
    return _accel(_prepare(model, algorithm), state.q, state.qd, control)


def qdot(model: Model, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
    """dq/dt (B, nq) from generalized velocities qd (B, nv) (child-frame velocities mapped to q rates)."""
    parts = []
    for i, t in enumerate(model.joint_types):
        qs, vs = model.q_slice(i), model.v_slice(i)
        if t in ("revolute", "prismatic"):
            parts.append(qd[:, vs])
        elif t == "planar":
            th = q[:, qs.start + 2]
            vx, vy, w = qd[:, vs.start], qd[:, vs.start + 1], qd[:, vs.start + 2]
            c, s = torch.cos(th), torch.sin(th)
            parts.append(torch.stack([c * vx - s * vy, s * vx + c * vy, w], -1))
        elif t == "free":
            quat = q[:, qs.start + 3:qs.start + 7]
            v_lin, w = qd[:, vs.start:vs.start + 3], qd[:, vs.start + 3:vs.start + 6]
            p_dot = (quat_to_rot(quat) @ v_lin[..., None])[..., 0]
            quat_dot = 0.5 * quat_mul(quat, torch.cat([w, torch.zeros_like(w[:, :1])], -1))
            parts.append(torch.cat([p_dot, quat_dot], -1))
    if not parts:
        return q.new_zeros(q.shape[0], 0)
    return torch.cat(parts, -1)


def _normalize_quats(model: Model, q: torch.Tensor) -> torch.Tensor:
    if "free" not in model.joint_types:
        return q
    parts = []
    for i, t in enumerate(model.joint_types):
        qs = model.q_slice(i)
        if t == "free":
            quat = q[:, qs.start + 3:qs.stop]
            parts += [q[:, qs.start:qs.start + 3], quat / quat.norm(dim=-1, keepdim=True)]
        elif JOINT_NQ[t]:
            parts.append(q[:, qs])
    return torch.cat(parts, -1)


def integrate_q(model: Model, q: torch.Tensor, qd: torch.Tensor, dt: float) -> torch.Tensor:
    """q + dt * qdot(q, qd), quaternions renormalised."""
    return _normalize_quats(model, q + dt * qdot(model, q, qd))


def _step_impl(prep, q, qd, control, dt: float, integrator: str):
    m = prep.model
    if integrator == "euler":
        qd_new = qd + dt * _accel(prep, q, qd, control)
        return integrate_q(m, q, qd_new, dt), qd_new
    if integrator == "rk4":
        def f(qq, vv):
            return qdot(m, qq, vv), _accel(prep, qq, vv, control)
        k1q, k1v = f(q, qd)
        k2q, k2v = f(_normalize_quats(m, q + 0.5 * dt * k1q), qd + 0.5 * dt * k1v)
        k3q, k3v = f(_normalize_quats(m, q + 0.5 * dt * k2q), qd + 0.5 * dt * k2v)
        k4q, k4v = f(_normalize_quats(m, q + dt * k3q), qd + dt * k3v)
        q_new = _normalize_quats(m, q + dt / 6.0 * (k1q + 2 * k2q + 2 * k3q + k4q))
        return q_new, qd + dt / 6.0 * (k1v + 2 * k2v + 2 * k3v + k4v)
    raise ValueError(f"unknown integrator {integrator!r} (euler, rk4)")


# Inductor options for the compiled step, chosen for many tiny tensors and short compiles:
# scalar (non-SIMD) C++ kernels (SIMD gains nothing on tiny tensors and costs code generation
# time); one compile thread (no worker pool); no pattern-matcher or scheduler reordering passes
# (compile time, no run-time gain on these graphs); no size/stride/alignment asserts in the
# generated wrapper (a replayed graph only ever sees the inputs it was compiled for); fewer
# inlined recomputations: a buffer read by more than 2 consumers, or whose expression has more
# than 20 ops, is materialised once (Inductor's defaults: 4 and 50). Measurements:
# docs/decisions.md, "Settings and their measured reasons".
_INDUCTOR_OPTIONS = {"cpp.vec_isa_ok": False, "compile_threads": 1, "pattern_matcher": False,
                     "loop_ordering_after_fusion": False, "reorder_for_peak_memory": False,
                     "reorder_for_locality": False, "loop_index_inversion_in_fusion": False,
                     "size_asserts": False, "alignment_asserts": False, "scalar_asserts": False,
                     "realize_reads_threshold": 2, "realize_cpu_opcount_threshold": 20}


class _Graph:
    """One Inductor-compiled step as Dynamo traced it: where its inputs come from (Dynamo's
    source names, e.g. ``L['prep'].model.mass``), the compiled forward/backward kernels and
    their numbers of outputs/inputs."""

    def __init__(self, sources: list[str]):
        self.sources = list(sources)
        self.fw = self.bw = None
        self.training = False
        self.n_fw_out = self.n_bw_in = self.n_tangents = -1
        self.in_meta = ()
        self.plans = None       # kernels.graph_plans: (forward, backward) KernelPlan, or False
        try:
            self.gather = eval("lambda L: (" + "".join(f"{s}, " for s in sources) + ")", {})
        except SyntaxError:
            self.gather = None

    def ready(self) -> bool:
        if self.gather is None or self.fw is None:
            return False
        # the generated ``call`` itself, without CompiledFxGraph.__call__'s per-call bookkeeping
        # (profiler records, autotune-cache context; nothing to do after the first call)
        self.fw_call = getattr(self.fw, "current_callable", None) or self.fw
        self.bw_call = getattr(self.bw, "current_callable", None) or self.bw
        if not self.training:
            return self.n_fw_out == 2
        # forward: (q, qd, *saved); backward: (*saved, grad q, grad qd)
        return self.bw is not None and self.n_tangents == 2 and self.n_bw_in == self.n_fw_out


class _Replay(torch.autograd.Function):
    """Runs a captured forward graph and, in backward, its backward graph: what AOTAutograd's
    runtime wrapper does, without its generic per-call bookkeeping (input/output aliasing,
    mutations, subclasses, RNG, which do not occur in a step)."""

    @staticmethod
    def forward(ctx, graph, *inputs):
        outs = graph.fw_call(list(inputs))
        ctx.graph = graph
        ctx.save_for_backward(*outs[2:])
        return outs[0], outs[1]

    @staticmethod
    def backward(ctx, g_q, g_qd):
        if torch.is_grad_enabled():     # the kernels record no graph, like torch.compile's backward
            raise RuntimeError("rollout(compile=True) does not support double backward (create_graph=True)")
        return (None, *ctx.graph.bw_call([*ctx.saved_tensors, g_q.contiguous(), g_qd.contiguous()]))


def _num_outputs(gm) -> int:
    return len(gm.graph.output_node().args[0])


def _meta(tensors) -> tuple:
    return tuple((t.shape, t.stride(), t.dtype, t.device, t.requires_grad) if isinstance(t, torch.Tensor) else t
                 for t in tensors)


class _CompiledStep:
    """``_step_impl`` under ``torch.compile``, plus a replay path for the rest of a rollout.

    All compiled steps of a rollout call the same graph on inputs of the same shapes, dtypes,
    strides and requires_grad (``rollout`` sees to it), so once Dynamo (guards) and AOTAutograd
    (runtime wrappers) have run it for the first of them, the later steps call its compiled
    kernels directly (``replay``): those wrappers cost more than the kernels (~100 us of the
    ~265 us per cartpole step forward and backward).
    The backend records, per compiled graph, Dynamo's input sources and the Inductor forward
    and backward (compiled eagerly at the first call instead of at the first backward). A graph
    is replayed only if that first call ran exactly one graph, from inputs that its sources
    find in the call's arguments, to the step's outputs; otherwise every step goes through
    Dynamo.
    """

    def __init__(self):
        self.runs = []
        self.fn = torch.compile(_step_impl, dynamic=False, backend=self._backend)

    def _backend(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        try:
            graph = _Graph([n.meta["grapharg"].source.name for n in gm.graph.find_nodes(op="placeholder")])
        except (AttributeError, KeyError):
            graph = _Graph([])
            graph.gather = None

        def inner(g, ex, **kw):
            out = compile_fx_inner(g, ex, **kw)
            if kw.get("is_backward"):
                graph.bw = out
                phs = [n.name for n in g.graph.find_nodes(op="placeholder")]
                graph.n_bw_in, graph.n_tangents = len(phs), sum(n.startswith("tangents") for n in phs)
            else:
                graph.fw, graph.training, graph.n_fw_out = out, not kw.get("is_inference", False), _num_outputs(g)
            return out

        # AOTAutograd's cache would hand back its wrapped function without calling ``inner``;
        # without it a warm start re-traces the joint graph (~2 s) and Inductor's FX graph
        # cache still serves the kernels.
        with torch._functorch.config.patch(force_non_lazy_backward_lowering=True, enable_autograd_cache=False):
            compiled = compile_fx(gm, example_inputs, inner_compile=inner, config_patches=_INDUCTOR_OPTIONS)

        def run(*args):
            out = compiled(*args)
            self.runs.append((graph, tuple(map(id, args)), tuple(map(id, out))))
            graph.in_meta = _meta(args)
            return out

        return run

    def __call__(self, prep, q, qd, control, dt: float, integrator: str):
        self.runs = []
        return self.fn(prep, q, qd, control, dt, integrator)

    def replayable(self, out, prep, q, qd, control, dt: float, integrator: str):
        """The graph that the latest call, with these arguments and outputs, ran if it can be
        replayed for the following steps, else None."""
        if len(self.runs) != 1:
            return None
        graph, in_ids, out_ids = self.runs[0]
        if not graph.ready() or out_ids[:2] != (id(out[0]), id(out[1])):
            return None
        try:
            inputs = graph.gather(dict(prep=prep, q=q, qd=qd, control=control, dt=dt, integrator=integrator))
        except Exception:  # a source that is not a plain attribute/item path of the arguments
            return None
        return graph if tuple(map(id, inputs)) == in_ids else None

    @staticmethod
    def matches(graph, prep, q, qd, control, dt: float, integrator: str) -> bool:
        """Whether these arguments hold inputs of the shapes, strides, dtypes and requires_grad
        the graph was compiled for (asserts are off in the generated code)."""
        inputs = graph.gather(dict(prep=prep, q=q, qd=qd, control=control, dt=dt, integrator=integrator))
        return _meta(inputs) == graph.in_meta

    @staticmethod
    def replay(graph, prep, q, qd, control, dt: float, integrator: str):
        inputs = graph.gather(dict(prep=prep, q=q, qd=qd, control=control, dt=dt, integrator=integrator))
        if graph.training:
            return _Replay.apply(graph, *inputs)
        outs = graph.fw_call(list(inputs))
        return outs[0], outs[1]


_compiled_step = None
KERNEL_ROLLOUT = True           # steps through kernels.rollout_steps and the step cache (False: replay per step)
RECOMPILE_LIMIT = 256           # graphs of the compiled step kept per process (Dynamo's default: 8)
_ACTIVATION_BUDGET = 0.0    # AOTAutograd's activation_memory_budget for the step (see rollout)


def _get_compiled() -> _CompiledStep:
    global _compiled_step
    if _compiled_step is None:
        _compiled_step = _CompiledStep()
    return _compiled_step


def _requires_grad(model: Model, state0: State, controls) -> bool:
    """Whether any tensor a step reads (state, model parameters, neural augmentation, controls)
    requires grad, i.e. whether the states after step 0 will."""
    tensors = [state0.q, state0.qd]
    tensors += [getattr(model, f.name) for f in dataclasses.fields(model)]
    tensors += [p for n in model.nets for p in n.parameters()]
    if controls is not None:
        tensors += [controls.tau, controls.tip_pos, controls.tip_vel]
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def step(model: Model, state: State, control: Control | None = None, dt: float = 1e-3,
         integrator: str = "euler", algorithm: str = "jsim") -> State:
    """One time step of length dt (s); algorithm as in ``accelerations``."""
    q, qd = _step_impl(_prepare(model, algorithm), state.q, state.qd, control, float(dt), integrator)
    return State(q, qd)


def _joined(qs: list, qds: list, rest: tuple) -> State:
    """The states of the steps taken one by one (lists of (B, nq) / (B, nv)) followed by ``rest``
    ((T, B, nq), (T, B, nv)) from ``kernels.rollout_steps``."""
    return State(torch.cat([torch.stack(qs), rest[0]]), torch.cat([torch.stack(qds), rest[1]]))


def rollout(model: Model, state0: State, steps: int, dt: float = 1e-3, controls=None,
            integrator: str = "euler", compile: bool = False, algorithm: str = "jsim") -> State:
    """States over time: q (steps+1, B, nq), qd (steps+1, B, nv); index 0 is state0.

    controls: None, a Control with a leading time dimension (steps, B, ...), or a
    callable (k, state) -> Control.
    """
    prep = _prepare(model, algorithm)
    compiled = None     # the torch.compile'd step (and Dynamo's import), made when a step needs it
    q, qd = state0.q, state0.qd
    qs, qds = [q], [qd]
    # Steps that run through torch.compile: from step 1 on every step's inputs have the same
    # shapes, dtypes, strides and requires_grad (step 0's q0 may not require grad while later
    # q do, which would cost a second compilation, so step 0 runs eagerly) ...
    first = 1
    if compile and not callable(controls):
        if torch.is_grad_enabled() and _requires_grad(model, state0, controls):
            # ... unless step 0 gets a q0/qd0 like the later ones: contiguous and requiring grad
            # (a copy whose gradient nobody reads; state0 is what index 0 of the result holds)
            first = 0
            q, qd = (t.contiguous() if t.requires_grad else t.detach().contiguous().requires_grad_() for t in (q, qd))
        elif not (q.requires_grad or qd.requires_grad):
            first = 0                   # no state will require grad
            q, qd = q.contiguous(), qd.contiguous()
    graph = key = None
    with contextlib.ExitStack() as stack:
        if compile:
            # Save only the step's inputs for backward and recompute the rest there: a step's
            # intermediates are ~100 tiny tensors whose allocation costs more than recomputing
            # them (cartpole 64 x 200 value+grad: 53 ms vs 70 ms). Read when AOTAutograd
            # partitions the joint graph, i.e. at (re)compilation inside this loop.
            stack.enter_context(torch._functorch.config.patch(activation_memory_budget=_ACTIVATION_BUDGET))
            # One graph per model structure and batch size, all of the one step function: a process
            # that identifies several mechanisms (scripts/bench_twin.py) passed Dynamo's default of 8
            # graphs per function, after which Dynamo falls back to eager, which under the stance
            # below is an error ("Recompilation triggered with skip_guard_eval_unsafe stance").
            stack.enter_context(torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT))
        for k in range(steps):
            if controls is None:
                ctrl = None
            elif callable(controls):
                ctrl = controls(k, State(q, qd))
            else:
                ctrl = controls.at(k)
            args = (prep, q, qd, ctrl, float(dt), integrator)
            if graph is not None and k == first + 1 and not compiled.matches(graph, *args):
                graph, first = None, k      # step `first` saw other inputs (dtype of q0?): compile anew
            if compile and k == first and KERNEL_ROLLOUT and not callable(controls):
                # a step compiled before, in this process or (disk cache) another: no Dynamo
                key = stepcache.step_key(*args, _INDUCTOR_OPTIONS, _ACTIVATION_BUDGET)
                kept = stepcache.lookup(key, _Graph, _INDUCTOR_OPTIONS)
                rest = None if kept is None else rollout_steps(kept, prep, q, qd, controls, float(dt), integrator,
                                                               k, steps)
                if rest is not None:
                    return _joined(qs, qds, rest)
            if graph is not None and k == first + 1 and KERNEL_ROLLOUT:
                rest = rollout_steps(graph, prep, q, qd, controls, float(dt), integrator, k, steps)
                if rest is not None:
                    if key is not None:
                        stepcache.remember(key, graph)
                    return _joined(qs, qds, rest)
            if graph is not None:
                q, qd = compiled.replay(graph, *args)
            elif k < first or not compile:
                q, qd = _step_impl(*args)
            else:
                if k == first + 2 and not callable(controls):
                    # no replay (see _CompiledStep): every call sees the inputs that the previous
                    # call's guards accepted (outputs of the same compiled step, same model)
                    stack.enter_context(torch.compiler.set_stance(skip_guard_eval_unsafe=True))
                compiled = compiled or _get_compiled()
                q, qd = compiled(*args)
                if k == first and not callable(controls):
                    graph = compiled.replayable((q, qd), *args)
            qs.append(q)
            qds.append(qd)
    return State(torch.stack(qs), torch.stack(qds))
