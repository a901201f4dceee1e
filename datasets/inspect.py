"""What is in a recording: numbers (``inspect``) and a picture (``contact_sheet``).

Both stream frames; ``inspect`` keeps a 65,536-bin histogram of raw depth units, so
its depth percentiles are exact (to one depth unit) with memory independent of the
recording's length. Neither judges whether a recording is good for a stage; they
show what a person needs to judge it (range, holes, dark frames).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from vid2sim.datasets.recording import Recording, open_recording
from vid2sim.datasets.atomic import atomic_path

PERCENTILES = (1, 5, 50, 95, 99)
DARK_MEAN = 10.0  # a colour frame whose mean grey level is below this is called dark


def _as_recording(rec: Recording | str | Path) -> Recording:
    return rec if isinstance(rec, Recording) else open_recording(rec)


def _percentiles_from_hist(hist: np.ndarray, qs: tuple[float, ...]) -> list[int]:
    """hist: (65536,) counts of raw units 1..65535 (bin 0 ignored) -> raw-unit percentiles."""
    c = np.cumsum(hist[1:])
    total = c[-1]
    return [int(np.searchsorted(c, q / 100.0 * total) + 1) for q in qs]


def inspect(rec: Recording | str | Path, stride: int = 1, progress: bool = True) -> dict:
    """Summary of a recording as a JSON-ready dict.

    stride: look at every stride-th frame (1 = all). Keys: path, kind, num_frames,
    width, height, fps, duration_s, has_depth, has_color, camera, shapes,
    frames_inspected, and where present ``depth`` (min/max/percentiles in metres
    over valid pixels; hole_fraction per frame: mean, median, min, max, worst_frame;
    frames_without_depth) and ``color`` (mean grey level per frame: min, max;
    dark_frames).
    """
    rec = _as_recording(rec)
    cam = rec.camera
    idx = range(0, rec.num_frames, max(1, int(stride)))
    hist = np.zeros(65536, np.int64)
    holes, grey = [], []
    for i in tqdm(idx, desc=f"inspect {Path(rec.path).name}", unit="frame", file=sys.stderr,
                  disable=not progress, leave=False):
        if rec.has_depth:
            raw = rec.depth_raw(i)
            hist += np.bincount(raw.ravel(), minlength=65536)
            holes.append(float(np.count_nonzero(raw == 0)) / raw.size)
        if rec.has_color:
            grey.append(float(rec.color(i).mean()))
    out: dict = {
        "path": str(rec.path), "kind": type(rec).__name__, "num_frames": rec.num_frames,
        "width": cam.width, "height": cam.height, "fps": cam.fps,
        "duration_s": rec.num_frames / cam.fps, "has_depth": rec.has_depth, "has_color": rec.has_color,
        "camera": cam.to_json(), "shapes": sorted(rec.shapes) if rec.shapes else None,
        "frames_inspected": len(idx),
    }
    if rec.has_depth:
        h = np.asarray(holes)
        d: dict = {"depth_scale": cam.depth_scale, "valid_pixels": int(hist[1:].sum())}
        if d["valid_pixels"]:
            nz = np.flatnonzero(hist[1:]) + 1
            d["min_m"], d["max_m"] = float(nz[0] * cam.depth_scale), float(nz[-1] * cam.depth_scale)
            for q, v in zip(PERCENTILES, _percentiles_from_hist(hist, PERCENTILES)):
                d[f"p{q}_m"] = float(v * cam.depth_scale)
        d["hole_fraction"] = {"mean": float(h.mean()), "median": float(np.median(h)), "min": float(h.min()),
                              "max": float(h.max()), "worst_frame": int(idx[int(h.argmax())])}
        d["frames_without_depth"] = int(np.count_nonzero(h == 1.0))
        out["depth"] = d
    if rec.has_color:
        g = np.asarray(grey)
        out["color"] = {"mean_grey_min": float(g.min()), "mean_grey_max": float(g.max()),
                        "dark_frames": int(np.count_nonzero(g < DARK_MEAN))}
    return out


def format_summary(info: dict) -> str:
    """A few human-readable lines of an ``inspect`` dict (for the CLI)."""
    lines = [f"{info['path']} ({info['kind']}): {info['num_frames']} frames, {info['width']}x{info['height']}, "
             f"{info['fps']:g} fps, {info['duration_s']:.1f} s",
             f"  camera fx={info['camera']['fx']:.1f} fy={info['camera']['fy']:.1f} "
             f"cx={info['camera']['cx']:.1f} cy={info['camera']['cy']:.1f}"]
    d = info.get("depth")
    if d:
        if "min_m" in d:
            lines.append(f"  depth {d['min_m']:.3f}-{d['max_m']:.3f} m (p1 {d['p1_m']:.3f}, median {d['p50_m']:.3f}, "
                         f"p99 {d['p99_m']:.3f})")
        hf = d["hole_fraction"]
        lines.append(f"  holes {100 * hf['mean']:.1f}% of pixels on average (max {100 * hf['max']:.1f}% in frame "
                     f"{hf['worst_frame']}); {d['frames_without_depth']} frames without depth")
    c = info.get("color")
    if c:
        lines.append(f"  colour mean grey {c['mean_grey_min']:.0f}-{c['mean_grey_max']:.0f}; {c['dark_frames']} dark frames")
    if info.get("shapes"):
        lines.append(f"  shapes: {', '.join(info['shapes'])}")
    return "\n".join(lines)


def colorize_depth(depth_m: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """(H, W) metres -> (H, W, 3) uint8 RGB, turbo from lo (blue) to hi (red); holes black."""
    t = np.clip((depth_m - lo) / max(hi - lo, 1e-6), 0.0, 1.0)
    rgb = cv2.cvtColor(cv2.applyColorMap((t * 255).astype(np.uint8), cv2.COLORMAP_TURBO), cv2.COLOR_BGR2RGB)
    rgb[depth_m <= 0] = 0
    return rgb


def _label(img: np.ndarray, text: str) -> None:
    (w, h), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.45, 1)
    img[: h + 8, : w + 8] = (img[: h + 8, : w + 8] * 0.35).astype(np.uint8)  # dark box behind the text
    cv2.putText(img, text, (4, h + 3), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)


def contact_sheet(rec: Recording | str | Path, out_png: str | Path, n: int = 12, thumb_width: int = 240) -> Path:
    """Grid of n evenly spaced frames: colour and colour-mapped depth side by side.

    The depth colour range is the 1st-99th percentile of the chosen frames' valid
    depth, the same for all thumbnails, and printed under the grid. Written
    atomically; returns ``out_png``.
    """
    rec = _as_recording(rec)
    out_png = Path(out_png)
    n = max(1, min(int(n), rec.num_frames))
    picks = np.unique(np.linspace(0, rec.num_frames - 1, n).round().astype(int))
    frames = [(int(i), rec.depth(int(i)) if rec.has_depth else None, rec.color(int(i)) if rec.has_color else None)
              for i in picks]
    lo = hi = 0.0
    if rec.has_depth:
        valid = np.concatenate([d[d > 0][:: max(1, d.size // 20000)] for _, d, _ in frames])
        lo, hi = (float(np.percentile(valid, 1)), float(np.percentile(valid, 99))) if valid.size else (0.0, 1.0)
    tw = int(thumb_width)
    th = max(1, round(tw * rec.camera.height / rec.camera.width))
    tiles = []
    for i, d, rgb in frames:
        parts = []
        if rgb is not None:
            parts.append(cv2.resize(rgb, (tw, th), interpolation=cv2.INTER_AREA))
        if d is not None:
            parts.append(cv2.resize(colorize_depth(d, lo, hi), (tw, th), interpolation=cv2.INTER_NEAREST))
        tile = np.concatenate(parts, axis=1)
        _label(tile, f"#{i}  t={i / rec.fps:.2f}s")
        tiles.append(np.pad(tile, ((2, 2), (2, 2), (0, 0)), constant_values=255))
    tile_h, tile_w = tiles[0].shape[:2]
    cols = max(1, min(len(tiles), round(math.sqrt(len(tiles) * tile_h / tile_w * 16 / 9))))  # about 16:9
    rows = math.ceil(len(tiles) / cols)
    blank = np.full_like(tiles[0], 255)
    grid = np.concatenate([np.concatenate([tiles[r * cols + c] if r * cols + c < len(tiles) else blank
                                           for c in range(cols)], axis=1) for r in range(rows)], axis=0)
    footer = np.full((48 if rec.has_depth else 26, grid.shape[1], 3), 255, np.uint8)
    text = f"{Path(rec.path).name}: {rec.num_frames} frames, {rec.camera.width}x{rec.camera.height} @ {rec.fps:g} fps"
    put = dict(fontFace=cv2.FONT_HERSHEY_SIMPLEX, fontScale=0.45, color=(0, 0, 0), thickness=1, lineType=cv2.LINE_AA)
    cv2.putText(footer, text, (6, 18), **put)
    if rec.has_depth:
        cv2.putText(footer, f"depth {lo:.2f} m", (6, 40), **put)
        footer[30:42, 100:260] = colorize_depth(np.tile(np.linspace(lo, hi, 160), (12, 1)), lo, hi)
        cv2.putText(footer, f"{hi:.2f} m   (black: no reading)", (266, 40), **put)
    sheet = np.concatenate([grid, footer], axis=0)
    with atomic_path(out_png) as tmp:
        if not cv2.imwrite(str(tmp), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR)):
            raise OSError(f"{out_png}: could not write the PNG")
    return out_png
