"""The report's view of where a known pusher touched which part (``report_actuators``'s section).

From the files only, no fit: the tracked poses (``poses.npz``), the parts' shapes and the
pusher's recorded path (``actuation.npz``, the first cylinder actuator: ``identify_push.pusher_of``).
Each part's outline in the horizontal plane through its centre (``identify_push.side_points``,
the points identify's tip contact acts on) is placed at its tracked pose every frame; the gap
(m) is the horizontal distance from the tip's axis to the nearest outline point less the tip's
radius (negative: the tip is inside the outline). A part is touched at a frame where its gap is
at most ``CONTACT_GAP_M``; the nearest outline point is then the contact point, in the part's
body frame. Shown: the gap of each part over the tracked frames, and each touched part's outline
seen from above with its contact points coloured by time; a table of the touched frames.
"""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np

CONTACT_GAP_M = 0.003   # m: a part's outline this close to the tip's surface (or inside it) counts as touched
                        # (tracked poses err by 0.1-1.5 mm on the push cases)


def tip_gaps(W: np.ndarray, outlines: list[np.ndarray], tip_xy: np.ndarray, radius: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """Gaps (T, M) (m) between a vertical tip of ``radius`` (m) at ``tip_xy`` (T, 2) (world) and the
    M parts at poses W (T, M, 4, 4), whose outlines ``outlines[m]`` (P_m, 3) are in the body frame;
    and the nearest outline point (T, M, 3) (body frame) of each part at each frame."""
    T, M = W.shape[:2]
    gaps, near = np.empty((T, M)), np.empty((T, M, 3))
    for m, pts in enumerate(outlines):
        world = np.einsum("tij,pj->tpi", W[:, m, :3, :3], pts) + W[:, m, None, :3, 3]   # (T, P, 3)
        d = np.linalg.norm(world[..., :2] - tip_xy[:, None], axis=-1)                    # (T, P)
        k = d.argmin(1)
        gaps[:, m], near[:, m] = d[np.arange(T), k] - radius, pts[k]
    return gaps, near


def runs(frames: np.ndarray) -> str:
    """'a-b, c, d-e' of the sorted frame indices ``frames`` (consecutive ones joined), '' if none."""
    if len(frames) == 0:
        return ""
    cut = np.flatnonzero(np.diff(frames) > 1)
    lo, hi = np.r_[frames[0], frames[cut + 1]], np.r_[frames[cut], frames[-1]]
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in zip(lo, hi))


def touches(rec, poses, shapes: dict) -> dict | None:
    """{"bodies": [M names], "gaps" (T, M) m, "points" (T, M, 3) body frame, "outlines" [(P_m, 3)], "touched" (T, M)
    bool, "radius", "actuator"} of the recording's pusher against the tracked parts over the frames both
    cover, or None without a pusher or a shape for every part."""
    from vid2sim.pipeline.identify_push import pusher_of, side_points

    found = pusher_of(rec)
    if found is None or any(n not in shapes for n in poses.shape_names):
        return None
    a, tip = found
    T = min(poses.num_frames, rec.actuation.world_from_actuator.shape[0])
    W = poses.world_from_body[:T]
    outlines = [side_points(shapes[n], W[0, m, :3, :3].T @ np.array([0.0, 0, 1]))
                for m, n in enumerate(poses.shape_names)]
    gaps, near = tip_gaps(W, outlines, rec.actuation.world_from_actuator[:T, a, :2, 3], float(tip.radius))
    return {"bodies": list(poses.body_names), "gaps": gaps, "points": near, "outlines": outlines,
            "touched": gaps <= CONTACT_GAP_M, "radius": float(tip.radius), "actuator": rec.actuation.names[a]}


def contacts_figure(tc: dict, fps: float) -> str:
    """<img> of the gaps over time and each touched part's outline from above (body x, y) with its contact
    points coloured by frame."""
    from vid2sim.pipeline.report import _img, _plt, fig_data_uri

    plt = _plt()
    hit = [m for m in range(len(tc["bodies"])) if tc["touched"][:, m].any()]
    fig, axes = plt.subplots(1, 1 + len(hit), figsize=(3.2 * (1 + len(hit)) + 1.5, 2.8), squeeze=False)
    ax = axes[0, 0]
    t = np.arange(len(tc["gaps"])) / fps
    for m, b in enumerate(tc["bodies"]):
        ax.plot(t, 1e3 * np.clip(tc["gaps"][:, m], -0.01, 0.05), lw=1, label=b)
    ax.axhline(1e3 * CONTACT_GAP_M, color="0.4", lw=0.8, ls="--")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("tip-part gap (mm)")
    ax.set_title(f"{tc['actuator']} to each part", fontsize=9)
    ax.legend(fontsize=6)
    for ax, m in zip(axes[0, 1:], hit):
        ring, k = tc["outlines"][m], np.flatnonzero(tc["touched"][:, m])
        ax.plot(*np.vstack([ring, ring[:1]])[:, :2].T, color="0.3", lw=1)
        sc = ax.scatter(*tc["points"][k, m, :2].T, c=k / fps, s=10, cmap="viridis")
        ax.set_aspect("equal")
        ax.set_title(f"{tc['bodies'][m]}: contact points (body x, y)", fontsize=9)
        fig.colorbar(sc, ax=ax, label="time (s)", shrink=0.8)
    fig.tight_layout()
    return _img(fig_data_uri(fig), "tip contacts")


def contacts_html(rec, run, poses) -> str:
    """The figure and a table (part, frames touched, contact points' centroid in the body frame) of
    where the recording's pusher touched which tracked part (``poses``: the run's PoseTracks, None
    if it has none), or '' without tracks or a pusher."""
    tc = touches(rec, poses, rec.shapes or {}) if poses is not None else None
    if tc is None:
        return ""
    rows = []
    for m, b in enumerate(tc["bodies"]):
        k = np.flatnonzero(tc["touched"][:, m])
        where = np.round(1e3 * tc["points"][k, m].mean(0), 1).tolist() if len(k) else "-"
        rows.append(f"<tr><td>{html.escape(b)}</td><td>{len(k)}</td><td>{html.escape(runs(k) or 'never')}</td>"
                    f"<td>{html.escape(str(where))}</td></tr>")
    try:
        fig = contacts_figure(tc, rec.fps)
    except Exception as e:   # a figure that cannot be drawn is reported, not fatal
        fig = f'<p class="missing">contacts not drawn ({html.escape(type(e).__name__)}: {html.escape(str(e))})</p>'
    return (f"<p>where the tip touched which part (tracked poses against the recorded path: gap at most "
            f"{1e3 * CONTACT_GAP_M:g} mm)</p>" + fig
            + "<table><tr><th>part</th><th>frames touched</th><th>which</th><th>mean contact point (mm, body frame)"
              "</th></tr>" + "".join(rows) + "</table>")


def fit_html(rec, run, poses) -> str:
    """<img> of the fit seen from above: each part's tracked centre path (solid; ``poses``, the run's PoseTracks or
    None) and the twin's predicted one over the held-back frames (dashed; forecast.json ``twin_centres``), the
    pusher's recorded path (grey), and the distance (mm) between the twin's and the tracked centres per held-back
    frame; '' without tracks or a forecast."""
    import json

    from vid2sim.pipeline.report import _img, _plt, fig_data_uri

    try:
        fc = json.loads((Path(run) / "forecast.json").read_text())
    except (OSError, json.JSONDecodeError):
        return ""
    twin = fc.get("twin_centres")
    if poses is None or not twin or not fc.get("predicted"):
        return ""
    lo, hi = fc["predicted"]
    xyz = np.asarray(twin["xyz_m"], float)   # (F, M, 3)
    frames = np.arange(lo, lo + len(xyz))
    ok = frames < poses.num_frames
    plt = _plt()
    fig, (top, err) = plt.subplots(1, 2, figsize=(9.5, 3.2))
    act = getattr(rec, "actuation", None)
    if act is not None:
        for a in range(len(act.names)):
            top.plot(*act.world_from_actuator[:, a, :2, 3].T, color="0.6", lw=1, label=f"{act.names[a]} (recorded)")
    t = frames[ok] / rec.fps
    for m, b in enumerate(twin["bodies"]):
        if b not in poses.body_names:
            continue
        tracked = poses.world_from_body[:, poses.body_names.index(b), :3, 3]
        line, = top.plot(*tracked[:, :2].T, lw=1.2, label=f"{b} tracked")
        top.plot(*xyz[:, m, :2].T, ls="--", lw=1.5, color=line.get_color(), label=f"{b} twin")
        err.plot(t, 1e3 * np.linalg.norm(xyz[ok, m] - tracked[frames[ok]], axis=1), color=line.get_color(), label=b)
    top.set_aspect("equal", adjustable="datalim")
    top.set_xlabel("world x (m)")
    top.set_ylabel("world y (m)")
    top.set_title(f"from above: tracked frames 0-{poses.num_frames - 1}, twin {lo}-{hi}", fontsize=9)
    top.legend(fontsize=6)
    err.set_xlabel("time (s)")
    err.set_ylabel("twin - tracked centre (mm)")
    err.set_title("held-back frames (no fit saw them)", fontsize=9)
    err.legend(fontsize=6)
    fig.tight_layout()
    return "<p>fit: the twin against the tracks</p>" + _img(fig_data_uri(fig), "twin against tracks")
