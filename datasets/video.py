"""RGB-only recordings from an ordinary video file (.mp4, .avi, ...), via cv2.VideoCapture.

A video carries no intrinsics, so unless a sidecar camera file exists the camera is
a documented guess: ``fx = fy = width`` (a horizontal field of view of 53 degrees,
typical of phones and webcams) and the principal point at the image centre
``((width - 1) / 2, (height - 1) / 2)``. The sidecar is ``<video>.camera.json``
(``clip.mp4.camera.json``, or ``clip.camera.json``) with the keys of camera.json
(docs/formats.md); ``depth_scale``, ``fps`` and ``world_from_camera`` may be left
out (defaults: 0.001, the video's fps, ``T_WORLD_CAMERA_LEVEL``). A sidecar
``<video>.shapes.json`` is read as the recording's shape library.

Frames are counted exactly at open by grabbing every frame once (the container's
frame count is only an estimate for many codecs); this costs one decode pass, about
1 ms per 640x480 frame. Reading is streamed: one frame is decoded at a time;
reading forward grabs forward, reading backwards re-opens the file and grabs
forward from the start (exact, unlike CAP_PROP_POS_FRAMES seeking). This module
does not estimate intrinsics or depth.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import cv2
import numpy as np

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.recording import Camera, Recording

log = logging.getLogger(__name__)

# The camera frame (x right, y down, z forward) of a level camera looking along
# world +y, with world z up: x_world = x_cam, y_world = z_cam, z_world = -y_cam.
# Used when a recording does not say how its camera is posed.
T_WORLD_CAMERA_LEVEL = np.array([[1.0, 0.0, 0.0, 0.0],
                                 [0.0, 0.0, 1.0, 0.0],
                                 [0.0, -1.0, 0.0, 0.0],
                                 [0.0, 0.0, 0.0, 1.0]])
DEFAULT_FPS = 30.0


def sidecar(path: Path, what: str) -> Path | None:
    """``clip.mp4.<what>`` or ``clip.<what>`` beside ``path``, whichever exists first."""
    for p in (path.with_name(path.name + "." + what), path.with_name(path.stem + "." + what)):
        if p.exists():
            return p
    return None


def default_camera(width: int, height: int, fps: float) -> Camera:
    """The guessed pinhole camera of a video with no sidecar (see module docstring)."""
    return Camera(width=width, height=height, fx=float(width), fy=float(width),
                  cx=(width - 1) / 2.0, cy=(height - 1) / 2.0, depth_scale=0.001, fps=fps,
                  world_from_camera=T_WORLD_CAMERA_LEVEL.copy())


def load_sidecar_camera(side: Path, width: int, height: int, fps: float) -> Camera:
    """Camera from a sidecar file; optional keys get the video's values/defaults."""
    try:
        d = json.loads(side.read_text())
    except json.JSONDecodeError as e:
        raise RecordingError(side, f"not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise RecordingError(side, "must be a JSON object")
    d = {"depth_scale": 0.001, "fps": fps, "world_from_camera": T_WORLD_CAMERA_LEVEL.tolist(), **d}
    cam = Camera.from_json(d, side)
    if (cam.width, cam.height) != (width, height):
        raise RecordingError(side, f"says {cam.width}x{cam.height} but the video is {width}x{height}")
    return cam


class VideoRecording(Recording):
    """An RGB video file as a Recording with ``has_depth = False``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise RecordingError(self.path, "video does not exist" if not self.path.exists() else "is not a file")
        cap = self._open()
        try:
            ok, first = cap.read()
            if not ok or first is None:
                raise RecordingError(self.path, "video has no frames (empty, truncated or an unsupported codec)")
            n = 1
            while cap.grab():
                n += 1
            fps = cap.get(cv2.CAP_PROP_FPS)
            reported = cap.get(cv2.CAP_PROP_FRAME_COUNT)
        finally:
            cap.release()
        if reported > 0 and int(reported) != n:
            log.info("%s: container says %d frames, %d decode", self.path, int(reported), n)
        if not (fps and math.isfinite(fps) and 0 < fps < 1000):
            log.warning("%s: video has no usable frame rate (%r); assuming %g fps", self.path, fps, DEFAULT_FPS)
            fps = DEFAULT_FPS
        self.num_frames = n
        self.has_depth, self.has_color = False, True
        h, w = first.shape[:2]
        side = sidecar(self.path, "camera.json")
        self.camera = load_sidecar_camera(side, w, h, float(fps)) if side else default_camera(w, h, float(fps))
        if side is None:
            log.info("%s: no camera sidecar; guessing fx = fy = %d px, principal point at the centre", self.path, w)
        shapes = sidecar(self.path, "shapes.json")
        if shapes is not None:
            from vid2sim.datasets.shapes import load_shapes

            self.shapes = load_shapes(shapes)
        else:
            self.shapes = None
        self._cap: cv2.VideoCapture | None = None
        self._next = 0  # index of the frame the open capture decodes next
        self._cached: tuple[int, np.ndarray] = (0, cv2.cvtColor(first, cv2.COLOR_BGR2RGB))

    def _open(self) -> cv2.VideoCapture:
        cap = cv2.VideoCapture(str(self.path))
        if not cap.isOpened():
            cap.release()
            raise RecordingError(self.path, "cannot be opened as a video (corrupt file or unsupported format)")
        return cap

    def color(self, i: int) -> np.ndarray:
        self._check_index(i)
        if self._cached[0] != i:
            if self._cap is None or i < self._next:
                self.close()
                self._cap, self._next = self._open(), 0
            while self._next < i:
                if not self._cap.grab():
                    raise RecordingError(self.path, f"frame {self._next} could not be read (file changed since it was opened?)")
                self._next += 1
            ok, bgr = self._cap.read()
            if not ok:
                raise RecordingError(self.path, f"frame {i} could not be decoded")
            self._next += 1
            h, w = bgr.shape[:2]
            if (w, h) != (self.camera.width, self.camera.height):
                raise RecordingError(self.path, f"frame {i} is {w}x{h} but the video started at {self.camera.width}x{self.camera.height}")
            self._cached = (i, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
        return self._cached[1].copy()

    def depth_raw(self, i: int) -> np.ndarray:
        raise RecordingError(self.path, "a video has no depth (has_depth is False)")

    def fingerprint(self) -> str:
        st = self.path.stat()
        return super().fingerprint() + f":{st.st_size}:{st.st_mtime_ns}"

    def close(self) -> None:
        """Release the decoder (also done when the object is garbage-collected)."""
        if self._cap is not None:
            self._cap.release()
            self._cap = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
