"""Report stage: one self-contained ``report.html`` a person reads.

Sections, each from the run folder's files and each saying "stage not run" when its
file is absent (or unreadable): segmentation overlay; tracking overlay (the tracked
shapes ray-cast over the frames) and the per-frame residual; the kinematic tree with
joint axes and pivots drawn on frame 0; q(t); the posterior (per-parameter particle
histograms with estimate and limits, pairwise scatter); with known actuators
(``actuation.npz``) their recorded path over a frame, where the tip touched which part
and the fit from above (``report_contacts.py``), the contact coefficients and their fit
(``report_actuators.py``); the forecast strip (observed |
predicted | error) with the metrics table; links to ``model.urdf`` / ``model.xml`` with
a table of links and joints; and any other PNG a stage left in the folder. Images are
base64-embedded PNGs; the page has no script and loads nothing, so it opens anywhere.

It deliberately computes nothing new about the mechanism: it only shows the files (and the
tip-part gaps, geometry of the tracked poses against the recorded tip).
"""
from __future__ import annotations

import base64
import html
import io
import json
import logging
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from vid2sim.datasets.recording import Recording
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks, Posterior, Segmentation
from vid2sim.datasets.atomic import write_text
from vid2sim.pipeline.plots import limit_bins

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"
PALETTE = [(230, 80, 50), (50, 140, 220), (240, 190, 40), (80, 180, 90), (165, 90, 190), (240, 130, 50), (80, 200, 200)]
NOT_RUN = '<p class="missing">stage not run ({})</p>'


@dataclass(frozen=True)
class ReportConfig:
    """Settings of the report stage."""

    track_frames: int = 4  # frames shown in the tracking overlay strip
    forecast_frames: int = 5  # frames shown in the forecast strip
    max_params_scatter: int = 5  # pairwise posterior scatter for at most this many parameters
    title: str = "vid2sim report"  # heading and <title> of report.html


# ----------------------------------------------------------------------------- helpers


def png_data_uri(img: np.ndarray) -> str:
    """RGB (or grey) uint8 image -> data URI of a PNG."""
    if img.ndim == 3:
        img = cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(".png", img)
    if not ok:
        raise RuntimeError("PNG encoding failed")
    return "data:image/png;base64," + base64.b64encode(buf.tobytes()).decode("ascii")


def fig_data_uri(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{html.escape(alt)}">'


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def background_image(rec: Recording, i: int) -> np.ndarray:
    """RGB frame i (colour if present, else depth as a grey ramp)."""
    if rec.has_color:
        return rec.color(i).copy()
    d = rec.depth(i)
    v = d[d > 0]
    lo, hi = (np.percentile(v, 1), np.percentile(v, 99)) if v.size else (0, 1)
    g = (255 * (1 - np.clip((d - lo) / max(hi - lo, 1e-6), 0, 1))).astype(np.uint8)
    return np.repeat(np.where(d > 0, g, 0)[..., None], 3, axis=2)


def _tint(img: np.ndarray, mask: np.ndarray, colour, alpha: float = 0.5) -> np.ndarray:
    out = img.astype(np.float32)
    out[mask] = (1 - alpha) * out[mask] + alpha * np.asarray(colour, np.float32)
    return out.astype(np.uint8)


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>\n{body}\n</section>"


def _try(path: Path, loader):
    """The artifact, or (None, why) when absent or unreadable."""
    if not path.exists():
        return None, f"{path.name} missing"
    try:
        return loader(path), ""
    except Exception as e:  # an unreadable artifact is reported, not fatal to the page
        return None, f"{path.name} unreadable: {type(e).__name__}: {e}"


# ----------------------------------------------------------------------------- sections


def segmentation_section(rec: Recording, run: Path) -> str:
    seg, why = _try(run / Segmentation.FILE, Segmentation.load)
    if seg is None:
        return _section("Segmentation", NOT_RUN.format(why))
    img = background_image(rec, seg.frame)
    rows = []
    for k, (m, name, score) in enumerate(zip(seg.masks, seg.shape_names, seg.scores)):
        c = PALETTE[k % len(PALETTE)]
        img = _tint(img, m > 0, c)
        rows.append(f'<tr><td style="color:rgb{c}">&#9632;</td><td>{html.escape(name)}</td><td>{float(score):.2f}</td>'
                    f"<td>{int((m > 0).sum())}</td></tr>")
    table = "<table><tr><th></th><th>shape</th><th>score</th><th>pixels</th></tr>" + "".join(rows) + "</table>"
    return _section("Segmentation", f"<p>frame {seg.frame}: {len(seg.shape_names)} parts</p>"
                    + _img(png_data_uri(img), "segmentation overlay") + table)


def tracking_section(rec: Recording, run: Path, cfg: ReportConfig) -> str:
    poses, why = _try(run / PoseTracks.FILE, PoseTracks.load)
    if poses is None:
        return _section("Tracking", NOT_RUN.format(why))
    parts = []
    shapes = rec.shapes or {}
    if all(s in shapes for s in poses.shape_names):
        try:
            from vid2sim.models.render.depth import DepthRenderer

            renderer = DepthRenderer(rec.camera, [shapes[s] for s in poses.shape_names])
            T = min(poses.num_frames, rec.num_frames)
            tiles = []
            for i in np.linspace(0, T - 1, min(cfg.track_frames, T)).round().astype(int):
                _, ids = renderer.render(poses.world_from_body[i])
                img = background_image(rec, i)
                for m in range(len(poses.body_names)):
                    img = _tint(img, ids == m, PALETTE[m % len(PALETTE)])
                if getattr(rec, "actuation", None) is not None:   # a known actuator's path up to this frame
                    from vid2sim.pipeline.report_actuators import draw_paths

                    img = draw_paths(np.ascontiguousarray(img), rec, rec.actuation, int(i), upto=int(i))
                cv2.putText(img, f"frame {i}", (5, 15), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1)
                tiles.append(img)
            parts.append(_img(png_data_uri(np.concatenate(tiles, axis=1)), "tracking overlay"))
        except Exception as e:
            parts.append(f'<p class="missing">overlay not drawn ({html.escape(type(e).__name__)}: {html.escape(str(e))})</p>')
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 2.2))
    ax.plot(np.arange(poses.num_frames), poses.residual, lw=1)
    ax.set_xlabel("frame")
    ax.set_ylabel("fit residual")
    ax.set_title("tracking residual per frame")
    parts.append(_img(fig_data_uri(fig), "tracking residual"))
    names = ", ".join(f"{html.escape(b)} ({html.escape(s)})" for b, s in zip(poses.body_names, poses.shape_names))
    lost = "" if poses.lost is None or not poses.lost.any() else "; lost (held at the last good pose): " + ", ".join(
        f"{html.escape(b)} in {int(n)} frames" for b, n in zip(poses.body_names, poses.lost.sum(0)) if n)
    noise = "" if poses.depth_noise_k is None else (
        f"<p>depth noise used: sigma = {poses.depth_noise_k:.5f} z&sup2; (m; {1000 * poses.depth_noise_k:.1f} mm at 1 m, "
        f"{4000 * poses.depth_noise_k:.1f} mm at 2 m; 0: clean depth, where the tracker's noise floor, track.noise.depth_noise_floor_m, applies)</p>")
    return _section("Tracking", f"<p>{poses.num_frames} frames, bodies: {names}{lost}</p>" + noise + "".join(parts))


def articulation_section(rec: Recording, run: Path) -> str:
    art, why = _try(run / Articulation.FILE, Articulation.load)
    if art is None:
        return _section("Kinematic tree", NOT_RUN.format(why))
    img = background_image(rec, 0)
    cam = rec.camera
    for k, j in enumerate(art.joints):
        if j.type in ("fixed",):
            continue
        p = np.asarray(j.pivot, float)
        a = np.asarray(j.axis, float)
        uv, z = cam.project(np.stack([p, p + 0.15 * a]))
        if np.all(z > 0) and np.all(np.isfinite(uv)):
            (u0, v0), (u1, v1) = uv.round().astype(int)
            c = PALETTE[k % len(PALETTE)]
            cv2.arrowedLine(img, (u0, v0), (u1, v1), c, 2, tipLength=0.25)
            cv2.circle(img, (u0, v0), 3, c, -1)
            cv2.putText(img, j.name, (u1 + 3, v1), cv2.FONT_HERSHEY_SIMPLEX, 0.35, c, 1)
    children: dict[str, list] = {}
    for j in art.joints:
        children.setdefault(j.parent, []).append(j)

    def tree(node: str) -> str:
        items = "".join(f"<li>{html.escape(j.child)} <span class='j'>&larr; {html.escape(j.name)} ({j.type}, axis "
                        f"[{', '.join(f'{v:.2f}' for v in j.axis)}])</span>{tree(j.child)}</li>" for j in children.get(node, []))
        return f"<ul>{items}</ul>" if items else ""

    return _section("Kinematic tree", "<div class='row'><div><b>world</b>" + tree("world") + "</div>"
                    + _img(png_data_uri(img), "joint axes on frame 0") + "</div>")


def joints_section(run: Path) -> str:
    jp, why = _try(run / JointPositions.FILE, JointPositions.load)
    if jp is None:
        return _section("Joint positions q(t)", NOT_RUN.format(why))
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 2.6))
    for i, n in enumerate(jp.names):
        ax.plot(jp.q[:, i], label=n, lw=1)
    ax.set_xlabel("frame")
    ax.set_ylabel("q (rad or m)")
    if jp.names:
        ax.legend(fontsize=7)
    extra = " (floating root: its pose is root_pose)" if jp.root_pose is not None else ""
    return _section("Joint positions q(t)", f"<p>{len(jp.names)} coordinates{extra}</p>" + _img(fig_data_uri(fig), "q(t)"))


def posterior_section(run: Path, cfg: ReportConfig) -> str:
    post, why = _try(run / Posterior.FILE, Posterior.load)
    if post is None:
        return _section("Posterior", NOT_RUN.format(why))
    plt = _plt()
    n = len(post.names)
    parts = [f"<p>method {html.escape(post.method)}, {post.particles.shape[0]} particles, "
             f"log-likelihood {post.log_likelihood:.4g}</p>"]
    parts.append(identifiable_html(post))
    at = {h["parameter"]: h for h in post.identifiable.get("at_limit", [])}
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{post.estimate[k]:.4g}</td><td>{np.mean(post.particles[:, i]):.4g}</td>"
                   f"<td>{np.std(post.particles[:, i]):.3g}</td><td>[{post.limits[k][0]:.3g}, {post.limits[k][1]:.3g}]</td>"
                   f"<td>{'at its ' + at[k]['side'] + ' limit' if k in at else ''}</td></tr>"
                   for i, k in enumerate(post.names))
    parts.append("<p>All parameters (in the scale above):</p><table><tr><th>parameter</th><th>estimate</th>"
                 "<th>particle mean</th><th>particle std</th><th>limits</th><th></th></tr>" + rows + "</table>")
    if n:
        cols = min(n, 4)
        fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(2.4 * cols, 1.9 * ((n + cols - 1) // cols)), squeeze=False)
        for i, k in enumerate(post.names):
            ax = axes[i // cols][i % cols]
            ax.hist(post.particles[:, i], bins=limit_bins(post.limits[k], 12), color="tab:blue", alpha=0.7)
            ax.axvline(post.estimate[k], color="k", lw=1)
            _set_limits(ax.set_xlim, post.limits[k])
            ax.set_title(k, fontsize=8)
            ax.tick_params(labelsize=6)
        for i in range(n, axes.size):
            axes[i // cols][i % cols].axis("off")
        fig.tight_layout()
        parts.append(_img(fig_data_uri(fig), "posterior histograms"))
    if 2 <= n <= cfg.max_params_scatter and post.particles.shape[0] > 1:
        fig, axes = plt.subplots(n, n, figsize=(1.6 * n, 1.6 * n), squeeze=False)
        for r in range(n):
            for c in range(n):
                ax = axes[r][c]
                ax.tick_params(labelsize=5)
                if r == c:
                    ax.hist(post.particles[:, r], bins=limit_bins(post.limits[post.names[r]], 10), color="tab:blue")
                else:
                    ax.scatter(post.particles[:, c], post.particles[:, r], s=4)
                    _set_limits(ax.set_ylim, post.limits[post.names[r]])
                _set_limits(ax.set_xlim, post.limits[post.names[c]])
                if r == n - 1:
                    ax.set_xlabel(post.names[c], fontsize=6)
                if c == 0:
                    ax.set_ylabel(post.names[r], fontsize=6)
        fig.tight_layout()
        parts.append(_img(fig_data_uri(fig), "pairwise posterior"))
    return _section("Posterior", "".join(parts))


def identifiable_html(post: Posterior) -> str:
    """What the posterior determines (params.json ``identifiable``, pipeline/identifiability.py):
    the scale, each identifiable quantity's estimate, median and 50 %/90 % intervals, and every
    parameter that ends at a limit with its reason."""
    ident = post.identifiable
    if not ident:
        return '<p class="missing">params.json says nothing about identifiability (written before it did)</p>'
    out = []
    if ident.get("particles_identical"):
        out.append(f'<p class="missing"><b>The {post.particles.shape[0]} particles are one point</b>: method '
                   f'{html.escape(post.method)} gives an estimate, not a posterior; its intervals are empty. Use '
                   f'<code>identify.inference.method=csvgd</code> (or mcmc) for a posterior.</p>')
    scale = ident.get("scale", {})
    if scale:
        out.append(f"<p><b>Scale</b>: {html.escape(str(scale.get('note', '')))} (source: "
                   f"{html.escape(str(scale.get('source', '')))}).</p>")
    q = ident.get("quantities", {})
    if q:
        smp = ident.get("samples", {})
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v['estimate']:.4g}</td><td>{v.get('median', float('nan')):.4g}</td>"
                       f"<td>[{v['interval50'][0]:.4g}, {v['interval50'][1]:.4g}]</td>"
                       f"<td>[{v['interval90'][0]:.4g}, {v['interval90'][1]:.4g}]</td></tr>" for k, v in q.items())
        out.append("<p><b>Identifiable quantities</b> (intervals from the "
                   f"{html.escape(str(smp.get('from', 'particles')))}"
                   + (f"; {smp['particles_left_out']} unconverged particle(s) left out" if smp.get("particles_left_out") else "")
                   + "):</p><table><tr><th>quantity</th><th>estimate</th><th>median</th><th>50 % interval</th>"
                   "<th>90 % interval</th></tr>" + rows + "</table>")
    hits = ident.get("at_limit", [])
    if hits:
        items = "".join(f"<li><b>{html.escape(h['parameter'])}</b> ends at its {h['side']} limit {h['limit']:.4g} "
                        f"({h['value']:.4g}): {html.escape(h['reason'])}</li>" for h in hits)
        out.append(f"<p><b>At a limit</b>:</p><ul>{items}</ul>")
    else:
        out.append("<p>No parameter ends at a limit.</p>")
    return "".join(out)


def _set_limits(setter, limits) -> None:
    lo, hi = (float(v) for v in limits)
    if hi > lo:
        setter(lo, hi)


def forecast_section(rec: Recording, run: Path, cfg: ReportConfig) -> str:
    from vid2sim.pipeline.forecast import Forecast, normalise_depth

    fc, why = _try(run, Forecast.load)
    if fc is None:
        return _section("Validation: predicting held-back frames", NOT_RUN.format(why))
    if not fc.info.get("validated", True) or len(fc.frames) == 0:
        return _section("Validation: predicting held-back frames",
                        f"<p><b>Not validated</b>: {html.escape(str(fc.info.get('why', 'no held-back frames')))}. "
                        f"{html.escape(str(fc.info.get('remedy', 'Set forecast.holdout (e.g. 0.25) on a longer clip.')))}</p>")
    lo, hi = fc.info.get("depth_range_m", [0.0, 1.0])
    tiles = []
    for k in np.linspace(0, len(fc.frames) - 1, min(cfg.forecast_frames, len(fc.frames))).round().astype(int):
        i = int(fc.frames[k])
        pred = normalise_depth(fc.predicted[k], lo, hi)
        real = normalise_depth(rec.depth(i), lo, hi) if rec.has_depth and i < rec.num_frames else np.zeros_like(pred)
        col = np.concatenate([real, pred, np.abs(real - pred)], axis=0)
        tile = (255 * np.clip(col, 0, 1)).astype(np.uint8)
        tile = cv2.cvtColor(tile, cv2.COLOR_GRAY2RGB)
        cv2.putText(tile, f"frame {i}", (5, 15), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 200, 0), 1)
        tiles.append(tile)
    cols = ("iou", "mse", "mae", "ssim")
    rows = "".join(f"<tr><td>{html.escape(m)}</td>" + "".join(f"<td>{v.get(x, float('nan')):.4g}</td>" for x in cols)
                   + "</tr>" for m, v in fc.metrics.items())
    table = ("<table><tr><th>prediction</th><th>silhouette IoU</th><th>depth MSE</th><th>MAE</th><th>SSIM</th></tr>"
             + rows + "</table>")
    fit, pred = fc.info.get("fitted"), fc.info.get("predicted")
    twin, base = fc.metrics.get("twin", {}), [fc.metrics.get(k, {}) for k in ("hold", "constvel")]
    best_base = max((b.get("iou", 0.0) for b in base), default=0.0)
    verdict = (f"<p><b>Twin validation score (silhouette IoU over the held-back frames): {twin.get('iou', float('nan')):.3f}</b> "
               f"against {best_base:.3f} for the better of holding the last fitted frame and constant velocity.</p>")
    info = (f"<p>Identify fitted frames {fit}; the twin fitted there was restarted from its last fitted state and "
            f"predicted frames {pred} ({fc.info.get('seconds_predicted', float('nan')):.2f} s), which no fit saw. "
            f"IoU is against the {html.escape(str(fc.info.get('iou_reference', 'tracked silhouettes')))}; depth "
            f"errors against the recorded depth, normalised over {lo:.2f}-{hi:.2f} m. Rows of the strip: recorded / "
            f"predicted / |error|. Renderer: {html.escape(str(fc.info.get('renderer')))}; simulator: "
            f"{html.escape(str(fc.info.get('simulator')))}</p>")
    video = '<p><a href="forecast.mp4">forecast.mp4</a> (recorded | predicted | error)</p>' if (run / "forecast.mp4").exists() else ""
    body = (verdict + info + _img(png_data_uri(np.concatenate(tiles, axis=1)), "forecast strip") + _iou_plot(fc)
            + _band_html(fc.info.get("band")))
    return _section("Validation: predicting held-back frames", body + table + video)


def _band_html(band: dict | None) -> str:
    """The posterior predictive band (forecast.json ``band``, pipeline/forecast_band.py): plot and
    the share of the held-back motion inside it."""
    if not band:
        return ('<p class="missing">No posterior predictive band: forecast simulated no particle '
                '(forecast.particles=0 or a one-point posterior).</p>')
    from vid2sim.pipeline.forecast_band import plot_band

    per = ", ".join(f"{html.escape(k)} {100 * v:.0f} %" for k, v in band.get("inside_per_coordinate", {}).items())
    text = (f"<p><b>Posterior predictive: {100 * band['inside_fraction']:.0f} % of the held-back joint positions lie "
            f"inside the {100 * band['level']:.0f} % posterior predictive band</b> ({band['particles']} "
            f"posterior draws of params_train.json, each restarted from its own fitted state, plus identify's track "
            f"noise; per coordinate: {per}). Without the track noise the band holds "
            f"{100 * band.get('inside_fraction_without_noise', float('nan')):.0f} %.</p>")
    return text + _img(fig_data_uri(plot_band(band)), "posterior predictive band")


def _iou_plot(fc) -> str:
    """Per-frame silhouette IoU of the twin and the baselines over the held-back frames."""
    per = fc.info.get("iou_per_frame") or {}
    if not per:
        return ""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 2.6))
    for name, v in per.items():
        ax.plot(fc.frames[:len(v)], v, label=name, lw=2 if name == "twin" else 1)
    ax.set_xlabel("frame (held back)")
    ax.set_ylabel("silhouette IoU")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return _img(fig_data_uri(fig), "silhouette IoU per held-back frame")


def model_section(run: Path) -> str:
    path = run / "model.urdf"
    if not path.exists():
        return _section("Model", NOT_RUN.format("model.urdf missing"))
    try:
        robot = ET.parse(path).getroot()
    except ET.ParseError as e:
        return _section("Model", NOT_RUN.format(f"model.urdf unreadable: {html.escape(str(e))}"))
    links = "".join(f"<tr><td>{html.escape(l.get('name'))}</td><td>{l.find('inertial/mass').get('value')}</td></tr>"
                    for l in robot.findall("link") if l.find("inertial/mass") is not None)
    joints = "".join(f"<tr><td>{html.escape(j.get('name'))}</td><td>{j.get('type')}</td><td>{j.find('parent').get('link')}</td>"
                     f"<td>{j.find('child').get('link')}</td>"
                     f"<td>{'' if j.find('limit') is None else html.escape(str(j.find('limit').get('lower')))} .. "
                     f"{'' if j.find('limit') is None else html.escape(str(j.find('limit').get('upper')))}</td>"
                     f"<td>{'' if j.find('dynamics') is None else j.find('dynamics').get('damping')}</td></tr>"
                     for j in robot.findall("joint"))
    mjcf = ' and <a href="model.xml">model.xml</a> (MJCF)' if (run / "model.xml").exists() else ""
    return _section("Model", f'<p><a href="model.urdf">model.urdf</a>{mjcf}</p>'
                    "<div class='row'><table><tr><th>link</th><th>mass (kg)</th></tr>" + links + "</table>"
                    "<table><tr><th>joint</th><th>type</th><th>parent</th><th>child</th><th>limits</th><th>damping</th></tr>"
                    + joints + "</table></div>")


def other_figures(run: Path) -> str:
    pngs = sorted(p for p in run.glob("*.png") if p.is_file())
    if not pngs:
        return ""
    body = "".join(f"<figure><img src=\"data:image/png;base64,{base64.b64encode(p.read_bytes()).decode('ascii')}\" "
                   f"alt=\"{html.escape(p.name)}\"><figcaption>{html.escape(p.name)}</figcaption></figure>" for p in pngs)
    return _section("Other figures from the stages", body)


STYLE = """body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;border-bottom:1px solid #ccc;padding-bottom:.2em}
img{max-width:100%;margin:.3em 0}table{border-collapse:collapse;margin:.5em 1em .5em 0;font-size:.85em}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}.missing{color:#a00;font-style:italic}
.row{display:flex;gap:1.5em;flex-wrap:wrap;align-items:flex-start}.j{color:#666;font-size:.85em}
figure{display:inline-block;margin:.3em}figcaption{font-size:.8em;color:#666}"""


def run(cfg: ReportConfig, rec: Recording, out_dir: Path) -> Path:
    """Write ``out_dir/report.html`` from whatever stage files exist there; return its path."""
    from vid2sim.pipeline.report_actuators import actuators_section

    out_dir = Path(out_dir)
    sections = [segmentation_section(rec, out_dir), tracking_section(rec, out_dir, cfg), articulation_section(rec, out_dir),
                joints_section(out_dir), posterior_section(out_dir, cfg), actuators_section(rec, out_dir),
                forecast_section(rec, out_dir, cfg),
                model_section(out_dir), other_figures(out_dir)]
    settings = {}
    for p in sorted(out_dir.glob("*.json")):
        if p.name.endswith("config.json") or p.name == "settings.json":
            try:
                settings[p.name] = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError):
                pass
    head = (f"<p>recording <code>{html.escape(str(rec.path))}</code>: {rec.num_frames} frames at {rec.fps:g} fps, "
            f"{rec.camera.width}x{rec.camera.height}, depth {'yes' if rec.has_depth else 'no'}, "
            f"colour {'yes' if rec.has_color else 'no'}</p>")
    page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(cfg.title)}</title>"
            f"<link rel=\"icon\" href=\"data:,\"><style>{STYLE}</style></head><body><h1>{html.escape(cfg.title)}</h1>{head}\n"
            + "\n".join(s for s in sections if s) + "</body></html>\n")
    path = out_dir / REPORT_FILE
    write_text(path, page)
    log.info("report: wrote %s (%d kB)", path, len(page) // 1024)
    return path
