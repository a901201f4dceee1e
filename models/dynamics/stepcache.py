"""Compiled simulator steps found again without Dynamo: in this process and, on disk, in later ones.

A compiled step (integrate._CompiledStep) is, once Dynamo has traced it and Inductor has
compiled it, two generated Python wrappers (forward, backward) around C++ kernels, plus
where each graph input comes from in the step's arguments (Dynamo's source names, e.g.
``L['prep'].model.mass``). ``kernels.rollout_steps`` needs nothing else. This module keys
them by everything the traced graph can depend on and keeps them in memory and under
Inductor's cache directory (``<cache_dir>/vid2sim_steps/<key>.json``; TORCHINDUCTOR_CACHE_DIR
moves it): a later rollout with the same key, in this process or another, skips Dynamo's
tracing and Inductor's compilation (the wrapper's kernels come from Inductor's own on-disk
C++ cache, or are rebuilt from the source kept in the wrapper).

The key (``step_key``) holds: the source of this package and of geometry_torch (any code
change is a new key), torch's version, the Inductor options and activation budget of the
compiled step, grad mode and default dtype, dt, the integrator, and a walk of the step's
arguments (the prepared model's type and its model, q, qd, control): every non-tensor value
(joint types, parents, float settings of the model, ...) by its repr (numpy arrays by their
bytes), every tensor by shape, stride, storage offset, dtype, requires_grad and which storage
it shares with the tensors before it. Arguments holding anything else (a neural
augmentation, a callable) get no key and go through Dynamo every time, as do changes to
this package's module globals made at run time (not in the key). Tensor constants of a
wrapper (Inductor sets them on its module; they are not in its source) are kept beside it
(``<key>.pt``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import platform
import types

import numpy as np
import torch

from vid2sim.datasets.atomic import OutputError, atomic_path, write_text

log = logging.getLogger(__name__)
ENABLED = os.environ.get("VID2SIM_STEP_CACHE", "1") != "0"   # memory + disk cache of compiled steps (0: off)
_MEMORY: dict = {}
_CODE_HASH = None


class _Unkeyable(Exception):
    pass


def _code_hash() -> str:
    global _CODE_HASH
    if _CODE_HASH is None:
        here = pathlib.Path(__file__).resolve().parent
        h = hashlib.sha256()
        for p in sorted(here.glob("*.py")) + [here.parent / "geometry_torch.py"]:
            h.update(p.name.encode() + b"\0" + p.read_bytes())
        _CODE_HASH = h.hexdigest()
    return _CODE_HASH


def _walk(obj, out: list, storages: dict, depth: int = 0) -> None:
    if depth > 12:
        raise _Unkeyable("too deep")
    if obj is None or isinstance(obj, (bool, int, float, str)):
        out.append(repr(obj))
    elif isinstance(obj, torch.Tensor):
        if type(obj) is not torch.Tensor and not isinstance(obj, torch.nn.Parameter):
            raise _Unkeyable(type(obj).__name__)
        sid = storages.setdefault(obj.untyped_storage().data_ptr(), len(storages))
        out.append(f"T{tuple(obj.shape)}{obj.stride()}{obj.storage_offset()}{obj.dtype}{obj.device}"
                   f"{obj.requires_grad}s{sid}")
    elif isinstance(obj, np.ndarray):
        out.append(f"A{obj.dtype}{obj.shape}" + hashlib.sha1(np.ascontiguousarray(obj).tobytes()).hexdigest())
    elif isinstance(obj, np.generic):
        out.append(f"{type(obj).__name__}{obj.item()!r}")
    elif isinstance(obj, (list, tuple)):
        out.append(f"{type(obj).__name__}{len(obj)}(")
        for v in obj:
            _walk(v, out, storages, depth + 1)
        out.append(")")
    elif isinstance(obj, dict):
        out.append(f"dict{len(obj)}(")
        for k, v in obj.items():
            out.append(repr(k))
            _walk(v, out, storages, depth + 1)
        out.append(")")
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if type(obj).__module__.split(".")[-2:-1] != ["dynamics"]:
            raise _Unkeyable(type(obj).__name__)
        out.append(type(obj).__qualname__ + "(")
        for f in dataclasses.fields(obj):
            out.append(f.name)
            _walk(getattr(obj, f.name), out, storages, depth + 1)
        out.append(")")
    else:
        raise _Unkeyable(type(obj).__name__)


def step_key(prep, q, qd, control, dt: float, integrator: str, options: dict, budget: float) -> str | None:
    """Hex key of the compiled step for these arguments, or None (not keyable: see module doc)."""
    if not ENABLED or getattr(getattr(prep, "model", None), "nets", ()):
        return None
    out = [_code_hash(), torch.__version__, platform.machine(), repr(sorted(options.items())), repr(budget),
           repr(torch.is_grad_enabled()), repr(torch.get_default_dtype()), repr(float(dt)), repr(integrator)]
    try:     # prep is a deterministic function of its model (integrate._prepare): its type stands for it
        _walk([type(prep).__qualname__, prep.model, q, qd, control], out, {})
    except _Unkeyable:
        return None
    return hashlib.sha256("\x1f".join(out).encode()).hexdigest()[:40]


def _dir() -> pathlib.Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    return pathlib.Path(cache_dir()) / "vid2sim_steps"


def remember(key: str, graph) -> None:
    """Keep ``graph`` (an integrate._Graph whose kernel plans were built) under ``key``, in
    memory and on disk (written atomically; a failed write only logs)."""
    _MEMORY[key] = graph
    rec = dict(sources=graph.sources, training=graph.training, fw=graph.fw.source_code,
               bw=graph.bw.source_code if graph.training else None)
    # tensor constants of the wrappers: Inductor sets them on the module, they are not in its source
    consts = {part: {a[2]: a[1] for a in plan.alloc.values() if a[0] == "global"}
              for part, plan in zip(("fw", "bw"), graph.plans) if plan is not None}
    try:
        d = _dir()
        if any(consts.values()):
            with atomic_path(d / f"{key}.pt") as tmp:
                torch.save(consts, tmp)
        write_text(d / f"{key}.json", json.dumps(dict(rec, constants=any(consts.values()))))
    except (OSError, OutputError) as e:
        log.warning("compiled step not written to the disk cache: %s", e)


def lookup(key: str | None, make_graph, options: dict):
    """The graph kept under ``key`` (memory, then disk), or None. ``make_graph(sources)`` -> an
    empty integrate._Graph, filled here from the kept wrapper sources; ``options``: the Inductor
    options the step was compiled with (its kernels' compiler flags, hence where Inductor's
    C++ cache holds them)."""
    if key is None:
        return None
    if key in _MEMORY:
        return _MEMORY[key]
    path = _dir() / f"{key}.json"
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    try:
        graph = make_graph(rec["sources"])
        graph.training = bool(rec["training"])
        consts = torch.load(path.with_suffix(".pt")) if rec.get("constants") else {}
        import torch._inductor.config as inductor_config
        with inductor_config.patch(options):
            graph.fw = _load(rec["fw"], consts.get("fw", {}))
            graph.bw = _load(rec["bw"], consts.get("bw", {})) if graph.training else None
    except Exception as e:  # a kept wrapper that no longer loads: compile anew
        log.warning("compiled step %s in the disk cache did not load (%s); compiling", key, e)
        return None
    _MEMORY[key] = graph
    return graph


def _load(src: str, constants: dict):
    """A kept Inductor wrapper source, its tensor ``constants`` set on its module, as the two
    attributes kernels.KernelPlan reads."""
    from torch._inductor.codecache import PyCodeCache
    mod = PyCodeCache.load(src)
    for name, t in constants.items():
        setattr(mod, name, t)
    return types.SimpleNamespace(current_callable=mod.call, source_code=src)
