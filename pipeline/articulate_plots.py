"""Articulate's pictures: ``q_plot.png`` (joint positions over time) and ``joints_3d.png``
(the joints at frame 0, axes as arrows, in world coordinates)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vid2sim.pipeline.artifacts import Articulation, JointPositions
from vid2sim.datasets.atomic import atomic_path


_COLORS = {"revolute": "tab:red", "prismatic": "tab:blue", "fixed": "tab:gray", "planar": "tab:green",
           "free": "tab:purple"}


def plots(art: Articulation, jp: JointPositions, W0: np.ndarray, names: list[str], fps: float, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.arange(jp.q.shape[0]) / fps
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for i, n in enumerate(jp.names):
        ax.plot(t, jp.q[:, i], label=n)
    if jp.root_pose is not None:
        for i, n in enumerate("xyz"):
            ax.plot(t, jp.root_pose[:, i] - jp.root_pose[0, i], "--", label=f"root {n} - {n}(0) (m)")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("q (rad or m)")
    ax.set_title("joint positions q(t)")
    if jp.names or jp.root_pose is not None:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    with atomic_path(out / "q_plot.png") as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)

    fig = plt.figure(figsize=(5.5, 5))
    ax = fig.add_subplot(projection="3d")
    o = W0[:, :3, 3]
    span = max(float(np.ptp(o, axis=0).max()), 0.2) if len(o) else 0.2
    ax.scatter(*o.T, color="k", s=12)
    o_lim = o if len(o) else np.zeros((1, 3))
    for i, b in enumerate(names):
        ax.text(*o[i], f" {b}", fontsize=7)
    for j in art.joints:
        p = np.asarray(j.pivot)
        start = p if j.parent == "world" else o[names.index(j.parent)]
        ax.plot(*np.stack([start, o[names.index(j.child)]]).T, color="0.6", lw=1, ls=":" if j.parent == "world" else "-")
        if j.type in ("revolute", "prismatic", "planar"):
            a = np.asarray(j.axis) * 0.4 * span
            ax.quiver(*(p - a / 2), *a, color=_COLORS[j.type], arrow_length_ratio=0.2, lw=2.5)
        ax.scatter(*p, color=_COLORS[j.type], marker="o" if j.type != "fixed" else "s", s=30 if j.type != "fixed" else 60)
    for k, c in _COLORS.items():
        ax.plot([], [], color=c, label=k)
    ax.legend(fontsize=7, loc="upper left")
    lo, hi = o_lim.min(0) - 0.3 * span, o_lim.max(0) + 0.3 * span
    mid, r = (lo + hi) / 2, (hi - lo).max() / 2
    ax.set_xlim(mid[0] - r, mid[0] + r)
    ax.set_ylim(mid[1] - r, mid[1] + r)
    ax.set_zlim(mid[2] - r, mid[2] + r)
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_zlabel("z")
    ax.set_title("inferred joints (world, frame 0)")
    with atomic_path(out / "joints_3d.png") as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
