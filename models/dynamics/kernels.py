"""A compiled step's Inductor kernels called directly, and whole rollouts through them.

Inductor's CPU output for a graph is a Python wrapper, ``call(args)``: it allocates every
intermediate and output buffer (``empty_strided_cpu``), takes views of them
(``reinterpret_tensor``) and calls one or a few C++ kernels (``cpp_fused_*``) on raw
pointers. For a simulator step on 64 particles those ~25 (forward) and ~80 (backward)
allocations cost as much as the kernels. ``KernelPlan`` reads the wrapper's ``call`` (its
Python source, ``ast``) into a fixed list of kernel calls on slots; a ``KernelPlan.Bound``
allocates the scratch buffers once and reuses them on every call, allocating only the
buffers that the call returns. A wrapper with any other statement (an ATen fallback, an
extern matmul, ...) is refused (``Unsupported``), and a plan is checked once against the
wrapper's own ``call`` on the same inputs (``check``).

``run_rollout`` runs the steps k0..steps-1 of a rollout through a forward plan, and for
gradients through one ``torch.autograd.Function`` whose backward runs the backward plan
from the last step to k0 (reverse-mode adjoint of the step map), accumulating the
gradients of the inputs that are the same tensor at every step (model parameters) and
passing those of q, qd from step to step.
"""
from __future__ import annotations

import ast
import operator

import torch

from . import native

class Unsupported(Exception):
    """The wrapper holds a statement the plan does not interpret."""


class KernelPlan:
    """Inductor's wrapper ``call`` for one graph as slots and kernel calls.

    Slots 0..n_inputs-1 are the graph's inputs; then one slot per allocated buffer or view,
    in the wrapper's order. ``kernels``: (C++ kernel, slot of each argument); ``outputs``:
    slot per returned value (None for a returned None); ``fresh``: the buffers (and views of
    them) a call returns, allocated anew at each call.
    """

    def __init__(self, compiled):
        fn = getattr(compiled, "current_callable", None)
        src = getattr(compiled, "source_code", None)
        if fn is None or src is None:
            raise Unsupported("no wrapper source")
        g = getattr(fn, "__globals__", None) or getattr(getattr(fn, "__func__", None), "__globals__", None)
        if g is None:
            raise Unsupported("no wrapper module")
        tree = ast.parse(src)
        body = _call_body(tree)
        self._types = _kernel_arg_types(tree)
        self._reinterpret = g["reinterpret_tensor"]
        self.n_inputs = 0
        self.allocs = []        # (slot, ('buf', size, stride, dtype) | ('view', base slot, size, stride, offset))
        self.kernels = []
        self.outputs = None
        names = {}
        for st in body:
            self._statement(st, names, g)
        if self.outputs is None:
            raise Unsupported("no return")
        self.n_slots = self.n_inputs + len(self.allocs)
        base = {s: (a[1] if a[0] == "view" else s) for s, a in self.allocs}
        root = {}
        for s, a in self.allocs:
            root[s] = root.get(base[s], base[s]) if a[0] == "view" else s
        out_roots = {root[s] for s in self.outputs if s is not None and s >= self.n_inputs}
        self.fresh = [(s, a) for s, a in self.allocs if root[s] in out_roots]
        self.root, self.fresh_roots, self.alloc = root, out_roots, dict(self.allocs)
        self.written = set()    # inputs a kernel writes into (Inductor reuses a dead input's buffer)
        for _, args, types in self.kernels:
            if len(types) != len(args):
                raise Unsupported("kernel argument types")
            out = {a for a, t in zip(args, types) if t.endswith("*") and not t.startswith("const")}
            self.written |= {a for a in out if a < self.n_inputs}
            if any(self.alloc[a][0] == "global" for a in out if a >= self.n_inputs):
                raise Unsupported("a kernel writes into a module constant")
        self.kernels = [(k, args) for k, args, _ in self.kernels]

    def _statement(self, st, names, g):
        if isinstance(st, ast.Assign) and len(st.targets) == 1:
            tgt, v = st.targets[0], st.value
            if isinstance(tgt, ast.Tuple) and isinstance(v, ast.Name) and v.id == "args":
                for i, e in enumerate(tgt.elts):
                    names[e.id] = i
                self.n_inputs = len(tgt.elts)
                return
            if isinstance(tgt, ast.Name) and isinstance(v, ast.Name):     # buffer reuse
                names[tgt.id] = names[v.id]
                return
            if isinstance(tgt, ast.Name) and isinstance(v, ast.Call) and isinstance(v.func, ast.Name):
                slot = self.n_inputs + len(self.allocs)
                if v.func.id == "empty_strided_cpu" and len(v.args) == 3:
                    dtype = v.args[2]
                    if not (isinstance(dtype, ast.Attribute) and isinstance(dtype.value, ast.Name)
                            and dtype.value.id == "torch"):
                        raise Unsupported(ast.unparse(st))
                    self.allocs.append((slot, ("buf", ast.literal_eval(v.args[0]), ast.literal_eval(v.args[1]),
                                               getattr(torch, dtype.attr))))
                elif v.func.id == "reinterpret_tensor" and len(v.args) == 4 and isinstance(v.args[0], ast.Name):
                    self.allocs.append((slot, ("view", names[v.args[0].id], *(ast.literal_eval(a) for a in v.args[1:]))))
                else:
                    raise Unsupported(ast.unparse(st))
                names[tgt.id] = slot
                return
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            c = st.value
            if isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) and \
                    c.func.value.id == "args" and c.func.attr == "clear":
                return
            if isinstance(c.func, ast.Name) and c.func.id.startswith("cpp_fused_") and not c.keywords \
                    and all(isinstance(a, ast.Name) for a in c.args):
                for a in c.args:    # a constant of the module (a tensor the graph holds)
                    if a.id not in names and isinstance(g.get(a.id), torch.Tensor):
                        names[a.id] = self.n_inputs + len(self.allocs)
                        self.allocs.append((names[a.id], ("global", g[a.id], a.id)))
                self.kernels.append((g[c.func.id], [names[a.id] for a in c.args], self._types.get(c.func.id, ())))
                return
        if isinstance(st, ast.Delete):
            return
        if isinstance(st, ast.Return) and isinstance(st.value, ast.Tuple):
            self.outputs = [self._out_slot(e, names) for e in st.value.elts]
            return
        raise Unsupported(ast.unparse(st))

    def _out_slot(self, e, names):
        if isinstance(e, ast.Constant) and e.value is None:
            return None
        if isinstance(e, ast.Name):
            return names[e.id]
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "reinterpret_tensor" \
                and isinstance(e.args[0], ast.Name):
            slot = self.n_inputs + len(self.allocs)
            self.allocs.append((slot, ("view", names[e.args[0].id], *(ast.literal_eval(a) for a in e.args[1:]))))
            return slot
        raise Unsupported(ast.unparse(e))

    def bind(self, fresh: bool = True, cached: bool = False) -> "KernelPlan.Bound":
        """The plan with its buffers allocated; ``fresh=False``: the returned buffers too are
        reused, i.e. overwritten by the next call; ``cached``: the same buffers as the previous
        ``cached`` bind of this plan (for callers that are done with that one's outputs)."""
        if not cached:
            return KernelPlan.Bound(self, fresh)
        bound = self.__dict__.setdefault("bound", {})
        if fresh not in bound:
            bound[fresh] = KernelPlan.Bound(self, fresh)
        return bound[fresh]

    class Bound:
        """A plan with its scratch buffers allocated: ``__call__(inputs)`` -> the graph's outputs."""

        def __init__(self, plan: "KernelPlan", fresh: bool = True):
            self.plan = plan
            self.env = [None] * plan.n_slots
            for s, a in plan.allocs:
                self.env[s] = self._make(a)
            self.kernels = [(k, operator.itemgetter(*args) if len(args) > 1 else (lambda e, i=args[0]: (e[i],)))
                            for k, args in plan.kernels]
            self.outs = plan.outputs
            self.fresh = plan.fresh if fresh else ()

        def _make(self, a):
            if a[0] == "buf":
                return torch.empty_strided(a[1], a[2], dtype=a[3])
            if a[0] == "global":
                return a[1]
            return self.plan._reinterpret(self.env[a[1]], a[2], a[3], a[4])

        def __call__(self, inputs) -> list:
            env = self.env
            env[:len(inputs)] = inputs
            for s, a in self.fresh:
                env[s] = self._make(a)
            for k, get in self.kernels:
                k(*get(env))
            return [None if s is None else env[s] for s in self.outs]

    def check(self, compiled, inputs) -> list:
        """The plan's outputs on ``inputs``, raising Unsupported unless they equal the
        wrapper's own (bit for bit)."""
        ours = self.bind()([t.clone() if i in self.written else t for i, t in enumerate(inputs)])
        theirs = compiled.current_callable([t.clone() if i in self.written else t for i, t in enumerate(inputs)])
        if len(ours) != len(theirs) or not all(
                (a is None and b is None) or (a is not None and b is not None and a.shape == b.shape
                                              and a.stride() == b.stride() and torch.equal(a, b))
                for a, b in zip(ours, theirs)):
            raise Unsupported("plan differs from the wrapper")
        return ours


def _call_body(tree) -> list:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node.body
    raise Unsupported("no call()")


def _kernel_arg_types(tree) -> dict:
    """{kernel name: its C argument types} from the module's ``NAME = async_compile.cpp_pybinding([types], src)``."""
    out = {}
    for st in tree.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute) \
                and st.value.func.attr == "cpp_pybinding" and st.value.args and isinstance(st.value.args[0], ast.List):
            out[st.targets[0].id] = [e.value for e in st.value.args[0].elts if isinstance(e, ast.Constant)]
    return out


class _Slot:
    """Stands for q or qd when gathering a graph's inputs from a step's arguments."""


def graph_plans(graph, inputs):
    """(forward plan, backward plan or None) of an integrate._Graph, built and checked
    against its wrapper on the step inputs ``inputs`` at the first call; None if unsupported."""
    if graph.plans is None:
        try:
            fw = KernelPlan(graph.fw)
            if fw.written:
                raise Unsupported("the forward writes into its inputs")
            outs = fw.check(graph.fw, inputs)
            bw = None
            if graph.training:
                bw = KernelPlan(graph.bw)
                # the backward may write only into what no later step reads: a step's own saved
                # buffers (not the forward's inputs) and its tangents (formed anew each step)
                n_saved = bw.n_inputs - 2
                if any(i < n_saved and fw.outputs[2 + i] < fw.n_inputs for i in bw.written):
                    raise Unsupported("the backward writes into a forward input")
                bw.check(graph.bw, [*outs[2:], torch.ones_like(outs[0]), torch.ones_like(outs[1])])
            graph.plans = (fw, bw)
        except (Unsupported, KeyError, TypeError, ValueError, IndexError):
            graph.plans = False
    return graph.plans or None


def rollout_steps(graph, prep, q, qd, controls, dt: float, integrator: str, k0: int, steps: int):
    """States after steps k0..steps-1 from (q, qd) at step k0, through the kernels of ``graph``
    (an integrate._Graph of this step): (q (n, B, nq), qd (n, B, nv)), n = steps - k0, or None
    when the graph's wrapper or inputs are not ones this module handles."""
    qs, qds = _Slot(), _Slot()

    def gather(k):
        ctrl = None if controls is None else controls.at(k)
        return graph.gather(dict(prep=prep, q=qs, qd=qds, control=ctrl, dt=dt, integrator=integrator))

    try:
        per_step = [gather(k) for k in range(k0, steps)] if controls is not None else [gather(k0)]
    except Exception:  # a source that is not a plain attribute/item path of the arguments
        return None
    first = per_step[0]
    iq, iqd = [i for i, v in enumerate(first) if v is qs], [i for i, v in enumerate(first) if v is qds]
    if len(iq) != 1 or len(iqd) != 1:
        return None
    iq, iqd = iq[0], iqd[0]
    const, varying = [], []
    for i, v in enumerate(first):
        if i in (iq, iqd):
            continue
        if not isinstance(v, torch.Tensor):
            return None
        (const if all(p[i] is v for p in per_step) else varying).append(i)
    example = list(first)
    example[iq], example[iqd] = q, qd
    plans = graph_plans(graph, example)
    if plans is None:
        return None
    spec = dict(fw=plans[0], bw=plans[1], n_in=len(first), iq=iq, iqd=iqd, const=const, varying=varying,
                n=steps - k0)
    tensors = [q, qd] + [first[i] for i in const] + [p[i] for i in varying for p in per_step]
    if graph.training and torch.is_grad_enabled():
        return _Rollout.apply(spec, *tensors)
    out = native.forward(spec, tensors)
    return out[:2] if out is not None else _forward(spec, tensors, keep=False)[:2]


def _forward(spec, tensors, keep: bool):
    """Run the forward plan over spec["n"] steps: (Q, QD, saved per step or None)."""
    n = spec["n"]
    fw = spec["fw"].bind()
    inputs = [None] * spec["n_in"]
    for i, t in zip(spec["const"], tensors[2:]):
        inputs[i] = t
    var = tensors[2 + len(spec["const"]):]
    q, qd = tensors[0], tensors[1]
    iq, iqd = spec["iq"], spec["iqd"]
    Q, QD, saved = [], [], []
    for k in range(n):
        inputs[iq], inputs[iqd] = q, qd
        for j, i in enumerate(spec["varying"]):
            inputs[i] = var[j * n + k]
        outs = fw(inputs)
        q, qd = outs[0], outs[1]
        Q.append(q)
        QD.append(qd)
        if keep:
            saved.append(outs[2:])
    return torch.stack(Q), torch.stack(QD), saved


class _Rollout(torch.autograd.Function):
    """States of spec["n"] steps from (q, qd) through the forward plan; backward runs the
    backward plan from the last step to the first."""

    @staticmethod
    def forward(ctx, spec, *tensors):
        ctx.native = None
        if native.covered(spec, tensors[0], tensors[1]):
            out = native.forward(spec, tensors)
            if out is not None:
                ctx.spec, ctx.native, ctx.saved = spec, out[2], None
                ctx.needs = [t.requires_grad for t in tensors]
                return out[0], out[1]
        Q, QD, saved = _forward(spec, tensors, keep=True)
        ctx.spec, ctx.saved = spec, saved
        ctx.needs = [t.requires_grad for t in tensors]
        return Q, QD

    @staticmethod
    def backward(ctx, gQ, gQD):
        if torch.is_grad_enabled():     # the kernels record no graph, like torch.compile's backward
            raise RuntimeError("rollout(compile=True) does not support double backward (create_graph=True)")
        if ctx.native is not None:
            out = native.backward(ctx.spec, ctx.native, gQ, gQD)
            return (None, *(g if need else None for g, need in zip(out, ctx.needs)))
        spec, saved = ctx.spec, ctx.saved
        n, const, varying, iq, iqd = spec["n"], spec["const"], spec["varying"], spec["iq"], spec["iqd"]
        bw = spec["bw"].bind(fresh=False)    # each call's gradients are read before the next call
        gQ, gQD = gQ.contiguous().unbind(0), gQD.contiguous().unbind(0)
        acc = [None] * len(const)
        var_grads = [[None] * n for _ in varying]
        cq = cqd = None
        for k in reversed(range(n)):
            tq = gQ[k].clone() if cq is None else gQ[k] + cq
            tqd = gQD[k].clone() if cqd is None else gQD[k] + cqd
            grads = bw([*saved[k], tq, tqd])
            cq, cqd = grads[iq], grads[iqd]
            for j, i in enumerate(const):
                g = grads[i]
                if g is not None:
                    acc[j] = g.clone() if acc[j] is None else acc[j].add_(g)
            for j, i in enumerate(varying):
                var_grads[j][k] = None if grads[i] is None else grads[i].clone()
        cq = None if cq is None else cq.clone()
        cqd = None if cqd is None else cqd.clone()
        out = [cq, cqd, *acc, *(g for gs in var_grads for g in gs)]
        return (None, *(g if need else None for g, need in zip(out, ctx.needs)))
