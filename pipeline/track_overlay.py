"""Track's overlay video: each frame beside the same frame with the tracked parts drawn in."""
from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from pathlib import Path

import cv2
import numpy as np

from vid2sim.datasets.recording import Recording
from vid2sim.datasets.atomic import atomic_path, write_bytes

log = logging.getLogger("vid2sim.pipeline.track")   # the stage's logger: its messages are the track stage's
OVERLAY_FILE = "track_overlay.mp4"


def overlay_frame(rec: Recording, i: int, depth: np.ndarray | None, flat: np.ndarray, visible: np.ndarray,
                  lost: np.ndarray, names: list[str], colors: np.ndarray, rgb: np.ndarray | None = None) -> np.ndarray:
    """Frame i (colour, or depth in false colour) beside itself with the rendered parts
    blended in (``visible``: part index per ray ``flat``, -1 none) and lost parts named;
    ``rgb``: frame i's colour (H, W, 3) if already read, else it is read from ``rec``."""
    if rec.has_color:
        img = rec.color(i) if rgb is None else rgb
    else:
        d = np.clip(depth / max(float(depth.max()), 1e-6) * 255, 0, 255).astype(np.uint8)
        img = cv2.cvtColor(cv2.applyColorMap(d, cv2.COLORMAP_VIRIDIS), cv2.COLOR_BGR2RGB)
    over = img.copy().reshape(-1, 3)
    hit = visible >= 0
    over[flat[hit]] = (0.4 * over[flat[hit]] + 0.6 * colors[visible[hit]] * 255).astype(np.uint8)
    over = over.reshape(img.shape)
    y = 14
    for m, name in enumerate(names):
        if lost[m]:
            cv2.putText(over, f"{name}: lost", (4, y), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 0, 0), 1)
            y += 14
    return np.concatenate([img, over], 1)


class _NoVideoCodec(RuntimeError):
    pass


def write_overlay(frames: Iterable[np.ndarray], fps: float, out_dir: Path) -> Path:
    """mp4 through cv2.VideoWriter; a PNG strip of up to 8 frames if no mp4 codec is available.
    ``frames`` (each (H, W, 3) RGB) may be a generator: each is encoded as it comes."""
    frames = iter(frames)
    first = next(frames)
    h, w = first.shape[:2]
    path = out_dir / OVERLAY_FILE
    try:
        with atomic_path(path) as tmp:
            vw = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
            ok = vw.isOpened()
            for f in itertools.chain([first], frames) if ok else []:
                vw.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
            vw.release()
            if not ok or tmp.stat().st_size == 0:
                raise _NoVideoCodec  # atomic_path then drops the temporary file
        return path
    except _NoVideoCodec:
        log.warning("track: no mp4 codec in OpenCV; writing a PNG strip instead of %s", OVERLAY_FILE)
    path = out_dir / "track_overlay.png"
    frames = [first, *frames]
    picks = frames[:: max(1, len(frames) // 8)][:8]
    _, buf = cv2.imencode(".png", cv2.cvtColor(np.concatenate(picks, 0), cv2.COLOR_RGB2BGR))
    write_bytes(path, buf.tobytes())
    return path


def write_overlays(rec: Recording, render_cache: dict[int, tuple], lost: np.ndarray, names: list[str],
                   out_dir: Path) -> None:
    """The tracked bodies drawn over the cached frames (one colour per body) into ``out_dir``;
    ``render_cache`` {frame: (flat, visible, rgb or None)} is emptied as the frames are written."""
    M = lost.shape[1]
    colors = np.array([[0.9, 0.2, 0.2], [0.2, 0.5, 0.9], [0.95, 0.8, 0.1], [0.3, 0.8, 0.3], [0.7, 0.3, 0.8],
                       [1.0, 0.5, 0.1], [0.2, 0.8, 0.8]])[np.arange(M) % 7]

    def frames():
        for i in sorted(render_cache):
            flat, visible, rgb = render_cache.pop(i)
            yield overlay_frame(rec, i, None if rec.has_color else rec.depth(i), flat, visible, lost[i], names, colors,
                                rgb=rgb)

    write_overlay(frames(), rec.fps, out_dir)
