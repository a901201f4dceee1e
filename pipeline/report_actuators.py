"""The report's section on known actuators (``actuation.npz``, docs/formats.md §1.2).

Shown when the recording has one: a frame with each actuator's recorded path drawn over
it (the tracking overlay's tiles get the path up to their frame, ``draw_paths``) (its shape centre projected every frame, in one colour over the recording's frames and
another over the rows past its end, a circle of the tip's radius every ``MARK_EVERY`` frames);
where the tip touched which part and the twin's fit from above (``report_contacts``);
the contact model and its coefficients from ``contacts.json`` (export's side file) or
params.json's ``extra.pusher``; the fit of the floor and tip friction (estimate and the
particles' 5-95 % range from params.json, the twin's PyBullet calibration and what the
floor mu rests on: ``twin_fit_html``); and a known joint effort plotted over time.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import cv2
import numpy as np

MARK_EVERY = 15   # frames between the tip outlines drawn on the path
PATH_COLOUR, PLAN_COLOUR = (255, 60, 200), (255, 200, 60)   # RGB: recorded frames, planned rows past the end
FIT_KEYS = ("floor.friction", "tip.friction", "floor.stiffness", "floor.damping")


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def draw_paths(img: np.ndarray, rec, act, frame: int, upto: int | None = None) -> np.ndarray:
    """``img`` (H, W, 3) uint8 with every actuator's path drawn in place: rows 0 .. ``upto`` (None:
    every row; the recording's frames in ``PATH_COLOUR``, the rows past them in ``PLAN_COLOUR``),
    a circle of the tip's radius every ``MARK_EVERY`` frames and a white dot at row ``frame``."""
    cam = rec.camera
    T = rec.num_frames
    for a in range(len(act.names)):
        uv, z = cam.project(act.positions(a))
        n = len(uv) if upto is None else min(upto + 1, len(uv))
        ok = z[:n] > 1e-6
        pts = np.round(uv[:n]).astype(np.int32)
        shape = (rec.shapes or {}).get(act.shapes[a])
        r_m = float(shape.radius) if shape is not None and shape.radius else 0.0
        for k in range(0, min(T, n), MARK_EVERY):
            if ok[k] and r_m > 0:
                r_px = max(1, int(round(cam.fx * r_m / z[k])))
                cv2.circle(img, tuple(int(v) for v in pts[k]), r_px, PATH_COLOUR, 1, cv2.LINE_AA)
        f = min(frame, n - 1)
        if ok[f]:
            cv2.circle(img, tuple(int(v) for v in pts[f]), 3, (255, 255, 255), -1)
        for lo, hi, colour in ((T - 1, n, PLAN_COLOUR), (0, min(T, n), PATH_COLOUR)):   # the path over the marks
            seg = pts[lo:hi][ok[lo:hi]]
            if len(seg) > 1:
                cv2.polylines(img, [seg.reshape(-1, 1, 2)], False, colour, 1, cv2.LINE_8)
    return img


def path_image(rec, act, frame: int) -> np.ndarray:
    """(H, W, 3) uint8: frame ``frame`` with every actuator's whole path projected over it."""
    from vid2sim.pipeline.report import background_image

    img = draw_paths(np.ascontiguousarray(background_image(rec, frame)), rec, act, frame)
    cv2.putText(img, f"{', '.join(act.names)} path, frame {frame}", (5, 15), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
                (255, 255, 255), 1)
    return img


def _rows(d: dict, prefix: str = "") -> str:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out.append(_rows(v, f"{prefix}{k}."))
        else:
            txt = f"{v:.4g}" if isinstance(v, float) else json.dumps(v) if isinstance(v, list) else str(v)
            out.append(f"<tr><td>{html.escape(prefix + k)}</td><td>{html.escape(txt)}</td></tr>")
    return "".join(out)


def contacts_table(run: Path) -> str:
    """The contact model and its coefficients (contacts.json, else params.json ``extra.pusher``), or ''."""
    side = _json(run / "contacts.json")
    if side is None:
        params = _json(run / "params.json") or {}
        pusher = (params.get("extra") or {}).get("pusher")
        if not pusher:
            return ""
        side, source = {"pusher": pusher}, "params.json extra.pusher"
    else:
        source = '<a href="contacts.json">contacts.json</a>'
    model = side.pop("contact_model", None)
    return (f"<div><p>contacts ({source})</p><table><tr><th>key</th><th>value</th></tr>{_rows(side)}</table>"
            + (f"<p class='j'>{html.escape(str(model))}</p>" if model else "") + "</div>")


def fit_table(run: Path) -> str:
    """Floor and tip friction (and the floor's compliance) as identified: the estimate and the 5-95 %
    range of the posterior particles (Coulomb mu is scale-free: read as is, not as a ratio), or ''."""
    params = _json(run / "params.json")
    if not params:
        return ""
    est, names = params.get("estimate") or {}, list(params.get("names") or [])
    P = np.asarray(params.get("particles") or [], float).reshape(-1, len(names)) if names else np.zeros((0, 0))
    rows = []
    for k in FIT_KEYS:
        if k not in est:
            continue
        if k in names and len(P):
            lo, hi = np.percentile(P[:, names.index(k)], [5, 95])
            rng = f"{lo:.3g} .. {hi:.3g} ({len(P)} particles)"
        else:
            rng = "held (not fitted)"
        rows.append(f"<tr><td>{html.escape(k)}</td><td>{est[k]:.4g}</td><td>{rng}</td></tr>")
    if not rows:
        return ""
    return ("<div><p>contact fit (params.json)</p><table><tr><th>parameter</th><th>estimate</th>"
            "<th>particles 5-95 %</th></tr>" + "".join(rows) + "</table>" + twin_fit_html(params) + "</div>")


def twin_fit_html(params: dict) -> str:
    """How the twin's friction was chosen (params.json ``extra``): its PyBullet calibration over the fitted frames
    (``floor_bullet``: the twin's pose rms against the tracks at its coefficients and at the penalty fit's, which
    it kept) and what the floor friction rests on (``floor_release``: the tip's releases, or the note that the
    push never released the part), or ''."""
    extra = params.get("extra") or {}
    out = []
    cal = extra.get("floor_bullet")
    if cal and "tip_friction" in cal:
        out.append(f"the twin (PyBullet) against the tracks over frames {cal.get('frames')}: pose rms "
                   f"{1e3 * cal['rms']:.2f} mm at floor / tip mu {cal['friction']:.3g} / {cal['tip_friction']:.3g} "
                   f"(the {html.escape(str(cal.get('kept')))} ones kept; {1e3 * cal.get('rms_fitted', float('nan')):.2f} mm at the "
                   "penalty fit's)" + ("; masses and joint damping refitted there" if cal.get("refined") else ""))
    rel = extra.get("floor_release")
    if rel and rel.get("windows"):
        out.append(f"floor mu from {len(rel['windows'])} release(s) of the part by the tip: "
                   f"{rel.get('estimate', float('nan')):.3g} ({' .. '.join(f'{v:.3g}' for v in rel.get('interval', []))})")
    elif rel:
        out.append(html.escape(str(rel.get("note", ""))))
    return "".join(f"<p class='j'>{t}</p>" for t in out if t)


def effort_plot(rec, act) -> str:
    """The known joint effort over the recording's rows, as an <img>, or ''."""
    if act.joint_effort is None:
        return ""
    from vid2sim.pipeline.report import _img, _plt, fig_data_uri

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 2.2))
    t = np.arange(len(act.joint_effort)) / rec.fps
    for d, j in enumerate(act.effort_joints):
        ax.step(t, act.joint_effort[:, d], where="post", lw=1, label=j)
    ax.axvline((rec.num_frames - 1) / rec.fps, color="0.5", lw=0.8, ls="--")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("effort (N m or N)")
    ax.set_title("known joint effort (actuation.npz)")
    ax.legend(fontsize=7)
    return _img(fig_data_uri(fig), "known joint effort")


def actuators_section(rec, run: Path) -> str:
    """The section's HTML, or '' when the recording has no known actuator."""
    from vid2sim.pipeline.report import _img, _section, png_data_uri

    act = getattr(rec, "actuation", None)
    if act is None:
        return ""
    run = Path(run)
    parts = [f"<p>actuators: {html.escape(', '.join(f'{n} ({s})' for n, s in zip(act.names, act.shapes)) or 'none')}"
             + (f"; known effort at {html.escape(', '.join(act.effort_joints))}" if act.joint_effort is not None else "")
             + "</p>"]
    if len(act.names):
        try:
            parts.append(_img(png_data_uri(path_image(rec, act, rec.num_frames // 2)), "actuator path"))
        except Exception as e:   # a figure that cannot be drawn is reported, not fatal
            parts.append(f'<p class="missing">path not drawn ({html.escape(type(e).__name__)}: {html.escape(str(e))})</p>')
    if len(act.names):
        from vid2sim.pipeline.artifacts import PoseTracks
        from vid2sim.pipeline.report import _try
        from vid2sim.pipeline.report_contacts import contacts_html, fit_html

        poses, _ = _try(run / PoseTracks.FILE, PoseTracks.load)
        for part in (contacts_html, fit_html):
            try:
                parts.append(part(rec, run, poses))
            except Exception as e:   # a figure that cannot be drawn is reported, not fatal
                parts.append(f'<p class="missing">{part.__name__} not drawn ({html.escape(type(e).__name__)}: '
                             f'{html.escape(str(e))})</p>')
    parts.append("<div class='row'>" + contacts_table(run) + fit_table(run) + "</div>")
    parts.append(effort_plot(rec, act))
    return _section("Known actuators (actuation.npz): path, contacts, fit, effort", "".join(parts))
