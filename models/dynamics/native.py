"""The step loop of a kernel rollout in C: one call runs every step's kernels, forward or backward.

``kernels.rollout_steps`` calls a step's Inductor kernels once per step from Python; this
module moves that loop into a small generated C function per plan (each kernel's arity is
part of its code), called once per rollout through ctypes with a table of argument
pointers (steps x arguments). The C function calls each kernel through its address in the
shared object Inductor built (``kernel`` is exported there), so only the loop is compiled
here (~0.1 s, kept under ``<inductor cache dir>/vid2sim_loops``). The forward writes each
step's state and saved tensors into one block per buffer (step k at k x its size); the
backward forms each step's tangents (the trajectory's gradient plus the one carried from
the step after), runs the backward kernels and adds the gradients of the constant inputs
into accumulators. Any layout it does not cover (a buffer that is not float64 and dense, a
gradient that is not a buffer of its own, a state that is a view) makes ``Loop.build``
return None, and the Python loop runs instead.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import torch

from vid2sim.datasets.atomic import OutputError, atomic_path

log = logging.getLogger(__name__)
ENABLED = os.environ.get("VID2SIM_NATIVE_LOOP", "1") != "0"   # the C step loop (0: the Python loop)
_LIBS: dict = {}
_F64 = 8


def _compiler() -> str | None:
    """The C compiler ($CC, cc or gcc), or None."""
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def _kernel_address(kernel) -> int:
    """Address of ``kernel`` (the C function) in the shared object behind an Inductor pybinding."""
    so = sys.modules[kernel.__module__].__file__
    return ctypes.cast(ctypes.CDLL(so).kernel, ctypes.c_void_p).value


def _source(fw_arity: list[int], bw_arity: list[int]) -> str:
    """C source of fw_run and bw_run for kernels of these arities (forward, backward)."""
    def calls(arity):
        lines, o = [], 0
        for j, n in enumerate(arity):
            lines.append(f"    ((K{n})fns[{j}])({', '.join(f'a[{o + i}]' for i in range(n))});")
            o += n
        return "\n".join(lines)

    types = "\n".join(f"typedef void (*K{n})({', '.join(['void*'] * n)});" for n in sorted(set(fw_arity + bw_arity)))
    wf, wb = sum(fw_arity), sum(bw_arity)
    return f"""#include <stdint.h>
#include <string.h>
{types}
void fw_run(void** fns, int64_t n, void** table) {{
  for (int64_t k = 0; k < n; k++) {{
    void** a = table + k * {wf};
{calls(fw_arity)}
  }}
}}
void bw_run(void** fns, int64_t n, void** table, double* tq, double* tqd, const double* gq, const double* gqd,
            int64_t nq, int64_t nqd, const double* cq, const double* cqd, int64_t nacc, double** acc,
            const double** acc_src, const int64_t* acc_len, int64_t nvar, double** var_dst,
            const double** var_src, const int64_t* var_len) {{
  for (int64_t k = n - 1; k >= 0; k--) {{
    for (int64_t i = 0; i < nq; i++) tq[i] = gq[k * nq + i] + (k == n - 1 ? 0.0 : cq[i]);
    for (int64_t i = 0; i < nqd; i++) tqd[i] = gqd[k * nqd + i] + (k == n - 1 ? 0.0 : cqd[i]);
    void** a = table + k * {wb};
{calls(bw_arity)}
    for (int64_t j = 0; j < nacc; j++)
      for (int64_t i = 0; i < acc_len[j]; i++) acc[j][i] += acc_src[j][i];
    for (int64_t j = 0; j < nvar; j++) memcpy(var_dst[j] + k * var_len[j], var_src[j], var_len[j] * sizeof(double));
  }}
}}
"""


def _library(src: str):
    """The compiled loop for ``src`` (built once, kept on disk), or None without a C compiler."""
    key = hashlib.sha256(src.encode()).hexdigest()[:32]
    if key in _LIBS:
        return _LIBS[key]
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    d = pathlib.Path(cache_dir()) / "vid2sim_loops"
    so = d / f"{key}.so"
    if not so.exists():
        cc = _compiler()
        if cc is None:
            return None
        c = d / f"{key}.{os.getpid()}.c"
        try:
            with atomic_path(so) as tmp:
                c.write_text(src)
                subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(c)], check=True, capture_output=True)
        except (OSError, OutputError, subprocess.CalledProcessError) as e:
            log.warning("step loop not compiled (%s); the Python loop runs", e)
            return None
        finally:
            c.unlink(missing_ok=True)
    lib = ctypes.CDLL(str(so))
    lib.fw_run.restype = lib.bw_run.restype = None
    _LIBS[key] = lib
    return lib


def _dense64(t) -> bool:
    """Whether t is a contiguous float64 tensor."""
    return isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.is_contiguous()


def _storage(size, stride) -> int:
    """Elements spanned by a tensor of this size and stride."""
    return 1 + sum((a - 1) * s for a, s in zip(size, stride)) if all(size) else 0


def _addresses(plan) -> list:
    """The C address of each of the plan's kernels (found once per plan)."""
    if not hasattr(plan, "addresses"):
        plan.addresses = [_kernel_address(k) for k, _ in plan.kernels]
    return plan.addresses


def _table(plan, env, blocks: set, rule, n: int) -> np.ndarray:
    """(n, total arguments) int64 pointers: ``rule(slot)`` -> (base, bytes per step) or an (n,)
    array. The scratch buffers of ``env`` (a cached bind of ``plan``; ``blocks``: the roots
    kept per step, not scratch) sit at the same addresses at every call: their columns are
    computed once per plan."""
    slots = [s for _, args in plan.kernels for s in args]
    cache = plan.__dict__.setdefault("static_cols", {})
    if id(env) not in cache:
        fixed = [j for j, s in enumerate(slots) if s >= plan.n_inputs and plan.root[s] not in blocks]
        cache[id(env)] = (env, np.array(fixed, dtype=np.int64),
                          np.array([env[slots[j]].data_ptr() for j in fixed], dtype=np.int64),
                          [j for j in range(len(slots)) if j not in set(fixed)])
    _, fixed, fixed_ptr, dynamic = cache[id(env)]
    table = np.empty((n, len(slots)), dtype=np.int64)
    table[:, fixed] = fixed_ptr
    cols, base, step = [], [], []
    for j in dynamic:
        r = rule(slots[j])
        if isinstance(r, np.ndarray):
            table[:, j] = r
        else:
            cols.append(j)
            base.append(r[0])
            step.append(r[1])
    if cols:    # base + k * bytes per step, every such column at once
        table[:, cols] = np.array(base, dtype=np.int64) + np.arange(n, dtype=np.int64)[:, None] * np.array(step, dtype=np.int64)
    return table


def _ptrs(a: list) -> ctypes.Array:
    """A C array of pointers (void*) from integers."""
    return (ctypes.c_void_p * max(len(a), 1))(*a)


def _lib_for(spec):
    """The compiled loop of this rollout's plans, or None (off, no compiler, no kernel address)."""
    if not ENABLED:
        return None
    fw, bw = spec["fw"], spec["bw"]
    if "loop" not in fw.__dict__.setdefault("loops", {}):
        try:    # each kernel's address in Inductor's shared object (its exported ``kernel``)
            for p in (fw, bw) if bw else (fw,):
                _addresses(p)
            ok = True
        except (AttributeError, KeyError, OSError, TypeError) as e:
            log.warning("kernel addresses not found (%s); the Python step loop runs", e)
            ok = False
        fw.loops["loop"] = _library(_source([len(a) for _, a in fw.kernels],
                                            [len(a) for _, a in bw.kernels] if bw else [])) if ok else None
    return fw.loops["loop"]


def forward(spec, tensors):
    """(Q (n, B, nq), QD, context for ``backward``) through the C loop, or None (not covered)."""
    lib = _lib_for(spec)
    if lib is None:
        return None
    fw, n, iq, iqd = spec["fw"], spec["n"], spec["iq"], spec["iqd"]
    q0, qd0 = tensors[0], tensors[1]
    o0, o1 = fw.outputs[0], fw.outputs[1]
    for o, x in ((o0, q0), (o1, qd0)):
        a = fw.alloc.get(o)
        if a is None or a[0] != "buf" or tuple(a[1]) != tuple(x.shape) or tuple(a[2]) != x.stride() \
                or a[3] != torch.float64 or x.dtype != torch.float64:
            return None
    if any(fw.alloc[r][0] != "buf" for r in fw.fresh_roots):
        return None
    bound = fw.bind(cached=True)
    env = bound.env
    const = dict(zip(spec["const"], tensors[2:]))
    var = tensors[2 + len(spec["const"]):]
    var_ptrs = {i: np.array([t.data_ptr() for t in var[j * n:(j + 1) * n]], dtype=np.int64)
                for j, i in enumerate(spec["varying"])}
    blocks, base = {}, {}
    for r in fw.fresh_roots:
        a = fw.alloc[r]
        stor = _storage(a[1], a[2])
        count = n + 1 if r in (o0, o1) else n
        blocks[r] = torch.empty(count * stor, dtype=a[3])
        step = stor * blocks[r].element_size()
        base[r] = (blocks[r].data_ptr() + (step if r in (o0, o1) else 0), step)
    for r, x in ((o0, q0), (o1, qd0)):
        a = fw.alloc[r]
        blocks[r].as_strided(x.shape, x.stride(), 0).copy_(x)

    def rule(s):
        if s == iq or s == iqd:
            b, step = base[o0 if s == iq else o1]
            return b - step, step
        if s in const:
            return const[s].data_ptr(), 0
        if s in var_ptrs:
            return var_ptrs[s]
        r = fw.root[s]
        if r in blocks:
            return base[r][0] + env[s].data_ptr() - env[r].data_ptr(), base[r][1]
        return env[s].data_ptr(), 0

    table = _table(fw, env, set(blocks), rule, n)
    lib.fw_run(_ptrs(_addresses(fw)), ctypes.c_int64(n), ctypes.c_void_p(table.ctypes.data))
    Q, QD = (blocks[r].as_strided((n, *x.shape), (_storage(x.shape, x.stride()), *x.stride()),
                                  _storage(x.shape, x.stride())) for r, x in ((o0, q0), (o1, qd0)))
    return Q, QD, dict(rule=rule, keep=(bound, blocks, tensors, var_ptrs))


def _bw_buffers(spec, env, tq, tqd):
    """The backward plan's gradient buffers, each a dense float64 tensor that every call
    rewrites: (q, qd, per constant input or None, per per-step input or None), or None."""
    bw = spec["bw"]
    n_saved = bw.n_inputs - 2

    def fixed(i, numel=None):
        s = bw.outputs[i]
        if s is None:
            return None
        t = tq if s == n_saved else tqd if s == n_saved + 1 else env[s] if s >= bw.n_inputs else None
        return t if _dense64(t) and (numel is None or t.numel() == numel) else False

    cq, cqd = fixed(spec["iq"], tq.numel()), fixed(spec["iqd"], tqd.numel())
    const, var = [fixed(i) for i in spec["const"]], [fixed(i) for i in spec["varying"]]
    if not isinstance(cq, torch.Tensor) or not isinstance(cqd, torch.Tensor) or any(
            t is False for t in const + var):
        return None
    return cq, cqd, const, var


def covered(spec, q0, qd0) -> bool:
    """Whether the backward of this rollout can run in the C loop (checked once per plan)."""
    if "bw_ok" not in spec["bw"].__dict__:
        bw = spec["bw"]
        ok = bw.n_inputs - 2 + 2 == len(spec["fw"].outputs) and len(bw.outputs) == spec["n_in"]
        if ok:
            env = bw.bind(fresh=False, cached=True).env
            ok = _bw_buffers(spec, env, torch.empty(q0.shape, dtype=torch.float64),
                             torch.empty(qd0.shape, dtype=torch.float64)) is not None
        bw.bw_ok = ok
    return bool(spec["bw"].bw_ok) and _lib_for(spec) is not None


def backward(spec, fctx, gQ, gQD) -> list:
    """Gradients [q0, qd0, *constants, *per-step inputs (step-major per input)] through the C
    loop (``covered`` said yes at the forward): see kernels._Rollout.backward."""
    lib, bw, fw, n = _lib_for(spec), spec["bw"], spec["fw"], spec["n"]
    n_saved = bw.n_inputs - 2
    env = bw.bind(fresh=False, cached=True).env
    gQ = gQ.to(torch.float64).contiguous()
    gQD = gQD.to(torch.float64).contiguous()
    tq, tqd = torch.empty(gQ.shape[1:], dtype=torch.float64), torch.empty(gQD.shape[1:], dtype=torch.float64)
    cq, cqd, const_src, var_src = _bw_buffers(spec, env, tq, tqd)
    frule = fctx["rule"]

    def rule(s):
        if s < n_saved:
            return frule(fw.outputs[2 + s])
        if s < n_saved + 2:
            return (tq if s == n_saved else tqd).data_ptr(), 0
        return env[s].data_ptr(), 0

    acc_src = [t for t in const_src if t is not None]
    acc = [torch.zeros_like(t) for t in acc_src]
    vsrc = [t for t in var_src if t is not None]
    vdst = [torch.empty((n, *t.shape), dtype=torch.float64) for t in vsrc]
    acc_len = np.array([t.numel() for t in acc] or [0], dtype=np.int64)
    var_len = np.array([t.numel() for t in vsrc] or [0], dtype=np.int64)
    table = _table(bw, env, set(), rule, n)
    vp = ctypes.c_void_p
    lib.bw_run(_ptrs(_addresses(bw)), ctypes.c_int64(n), vp(table.ctypes.data), vp(tq.data_ptr()),
               vp(tqd.data_ptr()), vp(gQ.data_ptr()), vp(gQD.data_ptr()), ctypes.c_int64(tq.numel()),
               ctypes.c_int64(tqd.numel()), vp(cq.data_ptr()), vp(cqd.data_ptr()),
               ctypes.c_int64(len(acc)), _ptrs([t.data_ptr() for t in acc]), _ptrs([t.data_ptr() for t in acc_src]),
               vp(acc_len.ctypes.data), ctypes.c_int64(len(vdst)), _ptrs([t.data_ptr() for t in vdst]),
               _ptrs([t.data_ptr() for t in vsrc]), vp(var_len.ctypes.data))
    accs, vds = iter(acc), iter(vdst)
    const_grads = [None if t is None else next(accs) for t in const_src]
    var_grads = [g for t in var_src for g in ([None] * n if t is None else next(vds).unbind(0))]
    return [cq.clone(), cqd.clone(), *const_grads, *var_grads]
