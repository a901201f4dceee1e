"""Benchmark: value + gradient of a 64-particle x 200-step rollout, ours vs MuJoCo finite differences.

For each scene (cartpole, chain5, pushed) every particle has its own masses and joint
dampings; the loss is sum over particles and steps of |q|^2. Ours: one rollout with
autograd, then ``backward`` to the (B, N) masses and (B, nv) dampings. MuJoCo: one
``mujoco.rollout`` call over 64 * (2p + 1) models (nominal and each parameter +-h, per
particle) and central differences — the same task in the same process, single thread
for both (torch.set_num_threads(1), one MjData); both timings are medians of ``--repeats``
rounds, each timing every variant once (ours and MuJoCo interleaved, so drift of a shared
machine's speed hits both alike); ``ratio_rounds`` lists each round's ratio.

For the contact-free scenes both engines run the same semi-implicit Euler scheme on the
same coordinates, so the two gradients must agree; ``grad_rel_err`` reports it. The
``pushed`` scene uses each engine's own contact model (ours: penalty; MuJoCo: its
solver), so only timings compare.

The last stdout line is one JSON object: {scene: {value_grad_ms, mujoco_fd_ms, ratio,
first_call_s, ...}}. The headline keys are for ``--mode`` (default ``compile``:
``rollout(compile=True)``, one ``torch.compile``d step whose kernels run the rollout
(``kernels.py``); its ``first_call_s`` is the first value+gradient call including compilation
with a cold, fresh Inductor cache, and ``warm_process_first_call_s`` the first call of a second
process that finds the compiled step on disk (``stepcache.py``), in the same cache directory).
The other mode is reported with an ``eager_``/``compiled_`` prefix unless ``--only``; with
``--mode compile``, ``replay_`` is the compiled step replayed one step at a time through
autograd (``integrate.KERNEL_ROLLOUT = False``), timed in the same rounds. ``ratio_cpu``:
the same ratio of the headline mode in CPU time of this process (``value_grad_cpu_ms``,
``mujoco_fd_cpu_ms``), which other jobs on a shared machine disturb less than wall time;
``first_call_cpu_s`` likewise (this process and its C++ compiler runs).
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import copy
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

if "--warm-cache" not in sys.argv:  # a cold compile: a fresh Inductor/AOT cache for this run, removed at exit
    _CACHE = tempfile.mkdtemp(prefix="bench_simulate_inductor_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, True)

import numpy as np
import torch

from vid2sim.models.dynamics import State, integrate, model_from_urdf, rollout
from vid2sim.models.dynamics.mjcf import model_to_mjcf, to_mujoco_state

log = logging.getLogger("bench_simulate")
B, STEPS = 64, 200


def _box_inertia(m, x, y, z):
    return f'<inertia ixx="{m * (y * y + z * z) / 12}" iyy="{m * (x * x + z * z) / 12}" izz="{m * (x * x + y * y) / 12}" ixy="0" ixz="0" iyz="0"/>'


def _link(name, m, size, com=(0, 0, 0), collide=False):
    x, y, z = size
    col = f'<collision><geometry><box size="{x} {y} {z}"/></geometry></collision>' if collide else ""
    return (f'<link name="{name}"><inertial><origin xyz="{com[0]} {com[1]} {com[2]}"/><mass value="{m}"/>'
            f'{_box_inertia(m, x, y, z)}</inertial>{col}</link>')


def _joint(name, t, parent, child, xyz, axis, damping):
    lim = '<limit lower="-10" upper="10" effort="100" velocity="100"/>' if t in ("revolute", "prismatic") else ""
    return (f'<joint name="{name}" type="{t}"><parent link="{parent}"/><child link="{child}"/>'
            f'<origin xyz="{xyz[0]} {xyz[1]} {xyz[2]}"/><axis xyz="{axis[0]} {axis[1]} {axis[2]}"/>'
            f'<dynamics damping="{damping}"/>{lim}</joint>')


def cartpole_urdf():
    return ('<robot name="cartpole"><link name="world"/>' + _link("cart", 1.0, (0.4, 0.2, 0.1))
            + _link("pole", 0.1, (0.02, 0.02, 0.5), com=(0, 0, 0.25))
            + _joint("slider", "prismatic", "world", "cart", (0, 0, 0.5), (1, 0, 0), 0.1)
            + _joint("hinge", "revolute", "cart", "pole", (0, 0, 0), (0, 1, 0), 0.05) + "</robot>")


def chain5_urdf():
    links = "".join(_link(f"l{i}", 0.5, (0.04, 0.04, 0.2), com=(0, 0, -0.1)) for i in range(5))
    joints = "".join(_joint(f"j{i}", "revolute", "world" if i == 0 else f"l{i - 1}", f"l{i}",
                            (0, 0, 2.0) if i == 0 else (0, 0, -0.2), (0, 1, 0) if i % 2 == 0 else (1, 0, 0), 0.05)
                     for i in range(5))
    return '<robot name="chain5"><link name="world"/>' + links + joints + "</robot>"


H, PITCH = 0.03, 0.19


def pushed_urdf():
    """As datasets/synthetic ``pushed``: three flat links on a floor, middle one planar, hinged ends."""
    links = "".join(_link(f"link{i}", 0.2, (0.16, 0.05, H), collide=True) for i in (1, 2, 3))
    joints = (_joint("root", "planar", "world", "link2", (0, 0, H / 2), (0, 0, 1), 0.01)
              + _joint("hinge_1", "revolute", "link2", "link1", (-PITCH, 0, 0), (0, 0, 1), 0.002)
              + _joint("hinge_3", "revolute", "link2", "link3", (PITCH, 0, 0), (0, 0, 1), 0.002))
    return '<robot name="pushed"><link name="world"/>' + links + joints + "</robot>"


TIP = dict(radius=0.015, start=(0.05, -0.06, 0.032), velocity=0.12)


def make_scene(name: str, rng: np.random.Generator):
    """-> (model with per-particle parameters, initial State, dt, controls or None)."""
    if name == "cartpole":
        model, dt = model_from_urdf(cartpole_urdf(), batch=B), 5e-3
    elif name == "chain5":
        model, dt = model_from_urdf(chain5_urdf(), batch=B), 5e-3
    else:
        model = model_from_urdf(pushed_urdf(), batch=B, contact_points=8, contact_stiffness=1e3,
                                contact_damping=5.0, contact_friction=0.5)
        # bottom corners 1 mm into the floor: the planar joint holds the height, the floor gives friction
        model = model.replace(ground_height=1e-3, tip_radius=TIP["radius"], tip_half_length=0.03)
        dt = 5e-3
    scale = torch.tensor(rng.uniform(0.8, 1.2, (B, model.num_bodies)))
    model = model.replace(mass=model.mass * scale,
                          damping=model.damping * torch.tensor(rng.uniform(0.5, 1.5, (B, model.nv))))
    s0 = model.zero_state()
    q0 = s0.q + torch.tensor(rng.uniform(-0.3, 0.3, s0.q.shape))
    controls = None
    if name == "pushed":
        q0[:, :2] = torch.tensor(rng.uniform(-0.02, 0.02, (B, 2)))
        t = torch.arange(STEPS, dtype=torch.float64) * dt
        x0, y0, z0 = TIP["start"]
        tip_pos = torch.stack([torch.full_like(t, x0), y0 + TIP["velocity"] * t, torch.full_like(t, z0)], -1)
        tip_vel = torch.tensor([0.0, TIP["velocity"], 0.0], dtype=torch.float64).expand(STEPS, 3)
        from vid2sim.models.dynamics import Control
        controls = Control(tip_pos=tip_pos[:, None].expand(STEPS, B, 3), tip_vel=tip_vel[:, None].expand(STEPS, B, 3))
    return model, State(q0, s0.qd.clone()), dt, controls


def ours_value_grad(model, s0, dt, controls, variant: str):
    """variant: "compile" (kernel rollout), "replay" (compiled step replayed per step) or "eager"."""
    mass = model.mass.detach().clone().requires_grad_()
    damping = model.damping.detach().clone().requires_grad_()
    with contextlib.ExitStack() as stack:
        if variant == "replay":
            stack.callback(setattr, integrate, "KERNEL_ROLLOUT", integrate.KERNEL_ROLLOUT)
            integrate.KERNEL_ROLLOUT = False
        tr = rollout(model.replace(mass=mass, damping=damping), s0, STEPS, dt=dt, controls=controls,
                     compile=variant != "eager")
    loss = tr.q[1:].pow(2).sum((0, 2))                 # (B,) per particle
    loss.sum().backward()
    return loss.detach(), mass.grad, damping.grad


def _cpu_with_children() -> float:
    """CPU seconds of this process and its finished children (Inductor's C++ compiler runs)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def warm_process_first_call(name: str) -> dict:
    """first_call_s and first_call_cpu_s of the compiled value+gradient in a new process with this
    one's Inductor cache directory (where the compiled step was kept), as that process reports them."""
    out = subprocess.run([sys.executable, __file__, "--scenes", name, "--first-call-only", "--warm-cache"],
                         capture_output=True, text=True, check=True)   # inherits TORCHINDUCTOR_CACHE_DIR
    return json.loads(out.stdout.strip().splitlines()[-1])[name]


def mujoco_fd(model, s0, dt, name, h=1e-6):
    """-> run() returning the value and central-difference gradient wrt the same masses and
    dampings (one ``mujoco.rollout`` call), after one warm-up call (thread pool, caches)."""
    import mujoco
    from mujoco import rollout as mj_rollout

    extra = ""
    if name == "pushed":
        x0, y0, z0 = TIP["start"]
        extra = (f'<body name="tip" pos="{x0} {y0} {z0}"><joint name="tip_y" type="slide" axis="0 1 0"/>'
                 '<inertial pos="0 0 0" mass="1000" diaginertia="1 1 1"/>'
                 f'<geom type="cylinder" size="{TIP["radius"]} 0.03" mass="0" friction="0.3 0 0"/></body>')
    nbody, nv = model.num_bodies, model.nv
    base = mujoco.MjModel.from_xml_string(model_to_mjcf(model, 0, dt=dt, integrator="Euler",
                                                        geoms=name == "pushed", extra_world=extra))
    # MuJoCo dof order = ours (planar -> slide, slide, hinge); body ids 1..N in our order
    params = [("mass", i) for i in range(nbody)] + [("damping", k) for k in range(nv)]
    data = mujoco.MjData(base)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    nstate = mujoco.mj_stateSize(base, spec)
    x0 = np.zeros((B, nstate))
    for b in range(B):
        mujoco.mj_resetData(base, data)
        qpos, qvel = to_mujoco_state(model, s0.q[b].numpy(), s0.qd[b].numpy())
        data.qpos[:len(qpos)], data.qvel[:len(qvel)] = qpos, qvel
        if name == "pushed":
            data.qvel[len(qvel)] = TIP["velocity"]
        mujoco.mj_getState(base, data, x0[b], spec)
    models = []
    for variant in [None] + [(k, s) for k in range(len(params)) for s in (1, -1)]:
        for b in range(B):
            m = copy.copy(base)
            m.body_mass[1:nbody + 1] = model.mass[b].detach().numpy()
            m.dof_damping[:nv] = model.damping[b].detach().numpy()
            if variant is not None:
                (kind, i), sign = params[variant[0]], variant[1]
                if kind == "mass":
                    m.body_mass[1 + i] += sign * h
                else:
                    m.dof_damping[i] += sign * h
            models.append(m)
    init = np.tile(x0, (1 + 2 * len(params), 1))
    nq_ours = sum(1 for _ in range(model.nq))

    def run():
        state, _ = mj_rollout.rollout(models, data, init, nstep=STEPS)
        qpos = state[:, :, 1:1 + nq_ours]
        loss = (qpos ** 2).sum((1, 2)).reshape(1 + 2 * len(params), B)
        grad = (loss[1::2] - loss[2::2]) / (2 * h)     # (p, B)
        return loss[0], grad.T

    run()  # warm-up (thread pool, caches)
    return run


def bench_scene(name: str, mode: str, only: bool, repeats: int = 3, first_only: bool = False) -> dict:
    rng = np.random.default_rng(0)
    model, s0, dt, controls = make_scene(name, rng)
    out = {}
    other = "eager" if mode == "compile" else "compile"
    modes = [("", mode)] + ([] if only else [("eager_" if other == "eager" else "compiled_", other)])
    if mode == "compile" and not first_only:
        modes.append(("replay_", "replay"))
    # first calls (compilation), then `repeats` rounds that time every variant once each, ours
    # and MuJoCo interleaved, so that a machine whose speed drifts (shared CPU) slows all alike
    results = {}
    for prefix, variant in modes:
        t, c = time.perf_counter(), _cpu_with_children()
        results[prefix] = ours_value_grad(model, s0, dt, controls, variant)
        out[prefix + "first_call_s"] = round(time.perf_counter() - t, 3)
        if prefix == "":
            out["first_call_cpu_s"] = round(_cpu_with_children() - c, 3)
    if first_only:
        return out
    if mode == "compile":
        warm = warm_process_first_call(name)
        out["warm_process_first_call_s"], out["warm_process_first_call_cpu_s"] = warm["first_call_s"], warm["first_call_cpu_s"]
    mj_run = mujoco_fd(model, s0, dt, name)
    times = {prefix: [] for prefix, _ in modes}
    times["mujoco"] = []
    cpu = {"": [], "mujoco": []}
    for _ in range(repeats):
        for prefix, variant in modes:
            t, c = time.perf_counter(), time.process_time()
            ours_value_grad(model, s0, dt, controls, variant)
            times[prefix].append((time.perf_counter() - t) * 1e3)
            if prefix == "":
                cpu[""].append((time.process_time() - c) * 1e3)
        t, c = time.perf_counter(), time.process_time()
        mj_value, mj_grad = mj_run()
        times["mujoco"].append((time.perf_counter() - t) * 1e3)
        cpu["mujoco"].append((time.process_time() - c) * 1e3)
    value, g_mass, g_damp = results[""]
    for prefix, _ in modes:
        out[prefix + "value_grad_ms"] = round(float(np.median(times[prefix])), 2)
    mj_ms = float(np.median(times["mujoco"]))
    out["mujoco_fd_ms"] = round(mj_ms, 2)
    # per-round ratios: their spread shows how much the shared machine moved during the run
    per_round = np.array(times[""]) / np.array(times["mujoco"])
    out["ratio"] = round(out["value_grad_ms"] / mj_ms, 3)
    out["ratio_rounds"] = [round(float(r), 3) for r in per_round]
    # CPU seconds of this process (both engines single-threaded here): what a loaded machine
    # changes less than wall time
    out["value_grad_cpu_ms"] = round(float(np.median(cpu[""])), 2)
    out["mujoco_fd_cpu_ms"] = round(float(np.median(cpu["mujoco"])), 2)
    out["ratio_cpu"] = round(out["value_grad_cpu_ms"] / out["mujoco_fd_cpu_ms"], 3)
    for prefix in ("eager_", "compiled_", "replay_"):
        if prefix + "value_grad_ms" in out:
            out[prefix + "ratio"] = round(out[prefix + "value_grad_ms"] / mj_ms, 3)
    out["mode"] = mode
    out["params_per_particle"] = int(mj_grad.shape[1])
    ours_grad = torch.cat([g_mass, g_damp], 1).numpy()
    if name != "pushed":
        out["value_rel_err"] = float(np.abs(value.numpy() - mj_value).max() / np.abs(mj_value).max())
        out["grad_rel_err"] = float(np.abs(ours_grad - mj_grad).max() / np.abs(mj_grad).max())
    log.info("%s: %s", name, out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", default="cartpole,chain5,pushed")
    ap.add_argument("--mode", choices=("compile", "eager"), default="compile", help="mode of the headline keys")
    ap.add_argument("--only", action="store_true", help="do not also measure the other mode")
    ap.add_argument("--warm-cache", action="store_true", help="keep the user's Inductor cache (first_call_s not cold)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--first-call-only", action="store_true", help="only the first call of --mode (no rounds)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    result = {name: bench_scene(name, args.mode, args.only or args.first_call_only, args.repeats,
                                args.first_call_only) for name in args.scenes.split(",")}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
