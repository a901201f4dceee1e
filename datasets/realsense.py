"""RealSense recordings (``.db3`` / ``.bag``) read through pyrealsense2 playback.

pyrealsense2 >= 2.56 writes ROS2 ``.db3`` (SQLite) files, both from ``rs.recorder``
and from ``rs.config.enable_record_to_file``; its playback still reads ROS1 ``.bag``
files (older SDKs, the RealSense Viewer; tested with a hand-written bag in
librealsense's file format 3). Both go through ``rs.context().load_device(path)``,
so whatever librealsense reads, we read.

What a frame is. The file holds two independent streams, depth and colour, each in
its own sensor with its own frame counter. Frame i of the recording is the i-th
*pair* of a depth and a colour frame whose device timestamps are mutual nearest
neighbours and at most half a frame period apart (docs/formats.md: depth and
colour frame i are taken at the same instant). Unpaired frames (a stream that
starts early, a dropped frame) are skipped and counted in the log.

Geometry. Depth is aligned to colour with ``rs.align(rs.stream.color)``, so the
recording's ``camera`` is the colour stream's pinhole intrinsics (lens distortion
is ignored: D400 colour coefficients are near zero) and depth pixel (u, v) lies on
colour pixel (u, v). When depth and colour already share intrinsics and the
extrinsics are the identity (software-device recordings), depth is passed through
untouched: rs.align's pixel-footprint splatting is not exact even then.
``depth_scale`` comes from the depth sensor, ``fps`` from the colour profile.
``world_from_camera``, in this order: a sidecar ``<file>.camera.json``
(``rec.db3.camera.json`` or ``rec.camera.json``; only that key is used); else, when
the file has an accelerometer stream (D435i, D455), world z against the mean of its
first second of samples (the camera must be still then), world y along the optical
axis projected on the horizontal (``gravity_aligned_pose``); else
``T_WORLD_CAMERA_LEVEL`` (camera level, looking along world +y). The camera sits at
the world origin. A sidecar ``<file>.shapes.json`` is the recording's shape library.

Playback. Each stream is played by its own playback device (the file loaded once
per stream), with only that stream's sensor started: when two sensors of one
playback start, frames of the second that the reader meets before its start are
dropped, and ``playback.pause()/resume()`` (the usual cure) holds the GIL while it
waits for a reader that waits for our Python callback (10 s stalls, 2.59). Reading
never calls pause, resume, seek or a status callback for the same reason.

Cost. Opening plays each stream once without copying pixels, to count and pair
frames (about the time librealsense needs to decode every frame, ~1 ms per 320x240
frame pair; a minute of 640x480 at 30 fps takes seconds). Reading is streamed:
frames are decoded in file order a few frames ahead of the reader; reading forward
is cheap, reading an earlier frame than the last one re-opens the file and plays
forward from its start. Not thread-safe: one reader per thread.
"""
from __future__ import annotations

import atexit
import json
import logging
import queue
import threading
import time
import weakref
from pathlib import Path

import cv2
import numpy as np

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.recording import Camera, Recording
from vid2sim.datasets.video import T_WORLD_CAMERA_LEVEL, sidecar

log = logging.getLogger(__name__)

# Seconds without any frame before playback counts as stalled (a decoder error in
# librealsense's reader thread stops delivery without telling the caller).
STALL_TIMEOUT_S = 30.0
END_GRACE_S = 0.5   # s: wait_reference waits this long after the playback stopped for a colour frame in a dispatcher
FRAME_GRACE_S = 0.1  # s: next() waits this long after the playback stopped for a frame still in a dispatcher
DEPTH, COLOR = "depth", "color"


class _EndWatch:
    """How long a playback has been seen ended: ``over(grace)`` is True once ``ended()`` has held
    without a break for more than ``grace`` seconds (a frame may still be in a dispatcher when the
    status first says stopped)."""

    def __init__(self, ended):
        self.ended, self.since = ended, None

    def over(self, grace: float) -> bool:
        if not self.ended():
            self.since = None
            return False
        now = time.monotonic()
        if self.since is None:
            self.since = now
        return now - self.since > grace


def _rs():
    try:
        import pyrealsense2 as rs
    except ImportError as e:  # libusb-1.0-0 missing is the usual cause
        raise ImportError(f"pyrealsense2 does not import ({e}); on Debian/Ubuntu: apt-get install libusb-1.0-0") from e
    return rs


def _to_rgb(rs, fmt, data: np.ndarray) -> np.ndarray:
    """Colour frame data in the stream's format -> (H, W, 3) uint8 RGB (a copy)."""
    if fmt == rs.format.rgb8:
        return np.array(data, np.uint8, copy=True)
    conv = {rs.format.bgr8: cv2.COLOR_BGR2RGB, rs.format.rgba8: cv2.COLOR_RGBA2RGB,
            rs.format.bgra8: cv2.COLOR_BGRA2RGB, rs.format.yuyv: cv2.COLOR_YUV2RGB_YUYV,
            rs.format.uyvy: cv2.COLOR_YUV2RGB_UYVY}.get(fmt)
    if conv is None:
        raise ValueError(f"unsupported colour format {fmt}")
    return cv2.cvtColor(np.ascontiguousarray(data), conv)


def pair_by_timestamp(t_depth_ms: np.ndarray, t_color_ms: np.ndarray, tol_ms: float) -> list[tuple[int, int]]:
    """Mutual-nearest-neighbour pairs (k_depth, k_color) at most tol_ms apart.

    t_depth_ms: (Nd,), t_color_ms: (Nc,) non-decreasing timestamps. Mutual nearest
    neighbours of two sorted sequences are monotone, so pairs come in file order.
    """
    td, tc = np.asarray(t_depth_ms, float), np.asarray(t_color_ms, float)
    if td.size == 0 or tc.size == 0:
        return []

    def nearest(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        j = np.clip(np.searchsorted(b, a), 1, len(b) - 1) if len(b) > 1 else np.zeros(len(a), int)
        if len(b) > 1:
            j = np.where(np.abs(b[j - 1] - a) <= np.abs(b[j] - a), j - 1, j)
        return j

    d2c, c2d = nearest(td, tc), nearest(tc, td)
    return [(int(k), int(d2c[k])) for k in range(len(td))
            if c2d[d2c[k]] == k and abs(td[k] - tc[d2c[k]]) <= tol_ms]


class _StreamPlayback:
    """One pass through the file for one stream (``kind``), frames in file order.

    librealsense calls ``_on_frame`` from its dispatcher thread; in non-real-time
    mode it waits while the callback blocks, which gives back-pressure: the file is
    decoded only ``queue_size`` frames ahead of the consumer. But if a callback is
    still blocked when the reader reaches the end of the file, librealsense's
    end-of-file flush waits out a 10 s timeout, so the last ``tail`` frames (the
    count is known from the counting pass, ``total``) are queued without blocking.
    The counting pass (``total=None``) queues only timestamps and never blocks.

    ``with_reference`` also starts the colour stream and keeps its first frame:
    rs.align needs a colour frame of the same device for the geometry.
    """

    def __init__(self, rs, path: Path, kind: str, total: int | None = None,
                 with_reference: bool = False, queue_size: int = 4, tail: int = 16):
        self.rs, self.path, self.kind = rs, path, kind
        self._main_stream = rs.stream.depth if kind == DEPTH else rs.stream.color
        self._ctx, self.dev, self.profiles, self.depth_units = _load(rs, path)
        self._total, self._tail = total, tail
        self._queue: queue.Queue = queue.Queue()
        self._slots = threading.Semaphore(queue_size)
        self._stop = threading.Event()
        self._delivered = 0
        self.reference = None
        self._started: list = []
        kinds = [kind] + ([COLOR] if with_reference and kind != COLOR and COLOR in self.profiles else [])
        self._by_sensor: dict[int, tuple[object, list]] = {}
        for k in kinds:
            sensor = self.profiles[k][0]
            self._by_sensor.setdefault(id(sensor), (sensor, []))[1].append(self.profiles[k][1])
        self.needs_reference = len(kinds) > 1

    def _on_frame(self, frame) -> None:
        if frame.profile.stream_type() != self._main_stream:
            if self.reference is None:
                frame.keep()
                self.reference = frame
            return
        if self._total is None:
            self._queue.put((frame.get_timestamp(), False))
            return
        k = self._delivered
        self._delivered += 1
        frame.keep()
        # Before the reference colour frame has arrived the reader must run on to it.
        if k >= self._total - self._tail or (self.needs_reference and self.reference is None):
            self._queue.put((frame, False))
            return
        while not self._stop.is_set():  # never block for ever: close() must be able to stop us
            if self._slots.acquire(timeout=0.05):
                self._queue.put((frame, True))
                return

    def start(self) -> "_StreamPlayback":
        # The main stream's sensor first: frames of a later-started sensor may be lost.
        for sensor, profiles in self._by_sensor.values():
            sensor.open(profiles)
            sensor.start(self._on_frame)
            self._started.append(sensor)
        _LIVE.add(self)
        self._t_start = time.monotonic()
        return self

    def _ended(self) -> bool:
        if self.dev.as_playback().current_status() != self.rs.playback_status.stopped:
            return False
        # "stopped" is also the state before the reader thread starts playing.
        return self._delivered > 0 or time.monotonic() - self._t_start > 2.0

    def next(self):
        """The next rs.frame (a timestamp in ms in the counting pass), or None at the end."""
        t0 = time.monotonic()
        end = _EndWatch(self._ended)
        while True:
            try:
                item, slot = self._queue.get(timeout=0.02)
                if slot:
                    self._slots.release()
                if self._total is None:
                    self._delivered += 1
                return item
            except queue.Empty:
                if end.over(FRAME_GRACE_S):
                    return None
                if time.monotonic() - t0 > STALL_TIMEOUT_S:
                    raise RecordingError(self.path, f"playback stalled: no {self.kind} frame for {STALL_TIMEOUT_S:.0f} s (corrupt file?)")

    def wait_reference(self):
        """The reference colour frame (blocks until it has arrived, or until the playback has ended
        ``END_GRACE_S`` ago with none: a frame may still be in a dispatcher when the status says stopped)."""
        t0 = time.monotonic()
        end = _EndWatch(self._ended)
        while self.reference is None:
            if end.over(END_GRACE_S) or time.monotonic() - t0 > STALL_TIMEOUT_S:
                raise RecordingError(self.path, "playback gave no colour frame to align depth to")
            time.sleep(0.001)
        return self.reference

    def close(self) -> None:
        self._stop.set()
        _LIVE.discard(self)
        while True:  # release frames
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        for sensor in self._started:
            try:
                sensor.stop()  # releases the GIL while it waits for our callbacks
            except RuntimeError:
                pass
        for sensor in self._started:
            try:
                sensor.close()
            except RuntimeError:
                pass
        self._started = []
        self.reference = None
        try:
            self._ctx.unload_device(str(self.path))
        except RuntimeError:
            pass


# Playbacks still running. Closed at exit: a librealsense thread blocked in our
# callback while the interpreter finalises aborts the process.
_LIVE: "weakref.WeakSet[_StreamPlayback]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for pb in list(_LIVE):
        pb.close()


def _load(rs, path: Path):
    """(context, playback device, {kind: (sensor, video profile)}, depth units or None)."""
    ctx = rs.context()  # one per device: a context refuses to load the same file twice
    try:
        dev = ctx.load_device(str(path))
    except RuntimeError as e:
        hint = " (a ROS1 bag cut short has no index; 'rosbag reindex' may repair it)" if path.suffix.lower() == ".bag" else ""
        raise RecordingError(path, f"cannot be read as a RealSense recording (truncated or corrupt?): {e}{hint}") from None
    dev.as_playback().set_real_time(False)
    profiles, depth_units = {}, None
    for sensor in dev.query_sensors():
        for p in sensor.get_stream_profiles():
            kind = {rs.stream.depth: DEPTH, rs.stream.color: COLOR}.get(p.stream_type())
            if kind is not None and kind not in profiles and p.is_video_stream_profile():
                profiles[kind] = (sensor, p.as_video_stream_profile())
                if kind == DEPTH and sensor.supports(rs.option.depth_units):
                    depth_units = float(sensor.get_option(rs.option.depth_units))
    return ctx, dev, profiles, depth_units


def gravity_aligned_pose(up_cam: np.ndarray) -> np.ndarray:
    """(4, 4) world_from_camera with world z = up_cam (3,), the up direction in the
    camera frame, and world y = the optical axis projected on the horizontal plane
    (image up, if the camera looks straight down or up). A level camera gives
    ``T_WORLD_CAMERA_LEVEL``."""
    z_w = np.asarray(up_cam, float) / np.linalg.norm(up_cam)
    fwd = np.array([0.0, 0.0, 1.0])
    if np.linalg.norm(np.cross(fwd, z_w)) < 0.1:
        fwd = np.array([0.0, -1.0, 0.0])
    y_w = fwd - fwd.dot(z_w) * z_w
    y_w /= np.linalg.norm(y_w)
    T = np.eye(4)
    T[:3, :3] = np.stack([np.cross(y_w, z_w), y_w, z_w])  # rows: world axes in camera coordinates
    return T


def _accel_up(rs, path: Path, main_profile, seconds: float = 1.0) -> np.ndarray | None:
    """Up direction in the main camera frame from the accelerometer's first samples, or None.

    At rest an accelerometer reads +9.81 m/s^2 *up* (specific force). Without
    recorded IMU-to-camera extrinsics the IMU axes are taken as the camera's.
    """
    ctx = rs.context()
    try:
        dev = ctx.load_device(str(path))
    except RuntimeError:
        return None
    dev.as_playback().set_real_time(False)
    found = [(s, p) for s in dev.query_sensors() for p in s.get_stream_profiles() if p.stream_type() == rs.stream.accel]
    if not found:
        ctx.unload_device(str(path))
        return None
    sensor, profile = found[0]
    n = max(1, int(seconds * (profile.fps() or 100)))
    samples: list[tuple[float, float, float]] = []
    done = threading.Event()

    def on_frame(frame) -> None:
        if len(samples) < n:
            m = frame.as_motion_frame().get_motion_data()
            samples.append((m.x, m.y, m.z))
        else:
            done.set()

    sensor.open(profile)
    sensor.start(on_frame)
    t0 = time.monotonic()
    while not done.is_set() and time.monotonic() - t0 < 5.0:
        if dev.as_playback().current_status() == rs.playback_status.stopped and (samples or time.monotonic() - t0 > 2.0):
            break
        time.sleep(0.005)
    sensor.stop()
    sensor.close()
    try:
        R = np.reshape(profile.get_extrinsics_to(main_profile).rotation, (3, 3)).T  # rs: column-major
    except RuntimeError:
        R = np.eye(3)
    ctx.unload_device(str(path))
    a = np.asarray(samples, float)
    if len(a) == 0:
        return None
    mean = a.mean(0)
    g = np.linalg.norm(mean)
    if not 8.0 < g < 11.5 or np.linalg.norm(a.std(0)) > 1.0:
        log.warning("%s: accelerometer mean %.2f m/s^2 (spread %.2f) over the first %d samples: camera not still; "
                    "assuming a level camera", path, g, np.linalg.norm(a.std(0)), len(a))
        return None
    return R @ (mean / g)


class _StreamReader:
    """Random access to one stream's frames by ordinal, streamed forward."""

    def __init__(self, rec: "BagRecording", kind: str, total: int, stamps: list[float]):
        self.rec, self.kind, self.total, self.stamps = rec, kind, total, stamps
        self.pb: _StreamPlayback | None = None
        self.next_k = 0  # ordinal of the frame the playback delivers next
        self.align = None
        self.compose = None  # (processing block, its output queue) for this playback's reference

    def get(self, k: int):
        """rs.frame of ordinal k of this stream."""
        if self.pb is None or k < self.next_k:
            self.close()
            rs = self.rec._rs
            self.pb = _StreamPlayback(rs, self.rec.path, self.kind, self.total,
                                      with_reference=self.kind == DEPTH and self.rec._needs_align).start()
            self.next_k = 0
        while True:
            frame = self.pb.next()
            if frame is None:
                raise RecordingError(self.rec.path, f"{self.kind} frame {k} could not be read: playback ended early "
                                                    "(file changed since it was opened?)")
            j, self.next_k = self.next_k, self.next_k + 1
            if abs(frame.get_timestamp() - self.stamps[j]) > 1e-6:
                raise RecordingError(self.rec.path, f"{self.kind} frame {j} came back with timestamp "
                                                    f"{frame.get_timestamp()} ms, not {self.stamps[j]} ms (frames dropped in playback?)")
            if j == k:
                return frame

    def depth(self, k: int) -> np.ndarray:
        rs = self.rec._rs
        frame = self.get(k)
        if self.rec._needs_align:
            if self.align is None:
                self.align = rs.align(rs.stream.color)
            if self.compose is None:
                # rs.align takes a frameset: pair each depth frame with the reference colour frame.
                ref, out = self.pb.wait_reference(), rs.frame_queue(1, True)
                block = rs.processing_block(lambda f, src: src.frame_ready(src.allocate_composite_frame([f, ref])))
                block.start(out)
                self.compose = (block, out)
            block, out = self.compose
            block.invoke(frame)
            frame = self.align.process(out.wait_for_frame(5000).as_frameset()).get_depth_frame()
        return np.array(frame.get_data(), np.uint16, copy=True)

    def color(self, k: int) -> np.ndarray:
        frame = self.get(k)
        return _to_rgb(self.rec._rs, frame.profile.format(), np.asanyarray(frame.get_data()))

    def close(self) -> None:
        self.compose = None
        if self.pb is not None:
            self.pb.close()
            self.pb = None


class BagRecording(Recording):
    """A RealSense ``.db3``/``.bag`` file as a Recording (see the module docstring)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise RecordingError(self.path, "RealSense recording does not exist" if not self.path.exists() else "is not a file")
        self._rs = _rs()
        self._readers: dict[str, _StreamReader] = {}
        self._cached: tuple[int, np.ndarray | None, np.ndarray | None] | None = None
        ctx, dev, profiles, depth_units = _load(self._rs, self.path)
        try:
            self._setup({k: p for k, (_, p) in profiles.items()}, depth_units)
        finally:
            del dev
            ctx.unload_device(str(self.path))
        self._index()
        self.shapes = None
        shapes_path = sidecar(self.path, "shapes.json")
        if shapes_path is not None:
            from vid2sim.datasets.shapes import load_shapes

            self.shapes = load_shapes(shapes_path)

    # ---- opening -----------------------------------------------------------------
    def _setup(self, profiles: dict, depth_units: float | None) -> None:
        rs = self._rs
        if not profiles:
            raise RecordingError(self.path, "has neither a depth nor a colour video stream")
        self.has_depth, self.has_color = DEPTH in profiles, COLOR in profiles
        if self.has_depth and profiles[DEPTH].format() != rs.format.z16:
            raise RecordingError(self.path, f"depth stream format is {profiles[DEPTH].format()}, only z16 is supported")
        if self.has_color:
            fmt = profiles[COLOR].format()
            try:
                _to_rgb(rs, fmt, np.zeros((2, 2, 3), np.uint8) if fmt != rs.format.yuyv else np.zeros((2, 2, 2), np.uint8))
            except ValueError:
                raise RecordingError(self.path, f"colour stream format {fmt} is not supported (rgb8, bgr8, rgba8, bgra8, yuyv, uyvy)") from None
        main = profiles[COLOR if self.has_color else DEPTH]
        intr = main.get_intrinsics()
        if any(abs(c) > 1e-6 for c in intr.coeffs):
            log.warning("%s: %s stream has lens distortion %s %s; it is ignored (pinhole model)",
                        self.path, main.stream_type(), intr.model, list(intr.coeffs))
        self._needs_align = False
        if self.has_depth and self.has_color:
            di, ext = profiles[DEPTH].get_intrinsics(), profiles[DEPTH].get_extrinsics_to(profiles[COLOR])
            same_k = all(abs(getattr(di, a) - getattr(intr, a)) < 1e-6 for a in ("fx", "fy", "ppx", "ppy"))
            same_k = same_k and (di.width, di.height) == (intr.width, intr.height)
            ident = np.allclose(np.reshape(ext.rotation, (3, 3)), np.eye(3), atol=1e-7) and np.allclose(ext.translation, 0, atol=1e-7)
            self._needs_align = not (same_k and ident)
        if self.has_depth and depth_units is None:
            log.warning("%s: depth sensor has no depth_units option; assuming 0.001 m per unit", self.path)
        depth_scale = float(f"{depth_units:.7g}") if depth_units else 0.001  # the option is a float32
        fps = float(main.fps()) or 30.0
        T_world_camera = self._sidecar_pose()
        if T_world_camera is None:
            up_cam = _accel_up(self._rs, self.path, main)
            T_world_camera = gravity_aligned_pose(up_cam) if up_cam is not None else T_WORLD_CAMERA_LEVEL.copy()
        try:
            self.camera = Camera(width=intr.width, height=intr.height, fx=intr.fx, fy=intr.fy, cx=intr.ppx, cy=intr.ppy,
                                 depth_scale=depth_scale, fps=fps, world_from_camera=T_world_camera)
            Camera.from_json(self.camera.to_json(), self.path)  # same validation as camera.json
        except RecordingError as e:
            raise RecordingError(self.path, f"camera from the stream profile (and sidecar) is invalid: {e.problem}") from None

    def _sidecar_pose(self) -> np.ndarray | None:
        side = sidecar(self.path, "camera.json")
        if side is None:
            return None
        try:
            d = json.loads(side.read_text())
            T = np.asarray(d["world_from_camera"], float)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise RecordingError(side, f"needs a 'world_from_camera' 4x4 matrix ({type(e).__name__}: {e})") from None
        if T.shape != (4, 4) or not np.all(np.isfinite(T)):
            raise RecordingError(side, f"world_from_camera must be a finite 4x4 matrix, got shape {T.shape}")
        return T

    def _index(self) -> None:
        """Play each stream once (no pixel copies) and pair depth with colour frames."""
        stamps: dict[str, list[float]] = {}
        for kind, present in ((DEPTH, self.has_depth), (COLOR, self.has_color)):
            if present:
                pb = _StreamPlayback(self._rs, self.path, kind).start()
                try:
                    stamps[kind] = list(iter(pb.next, None))
                finally:
                    pb.close()
        nd, nc = len(stamps.get(DEPTH, ())), len(stamps.get(COLOR, ()))
        if self.has_depth and self.has_color:
            tol = 0.5 * 1000.0 / self.camera.fps
            self._pairs = pair_by_timestamp(np.array(stamps[DEPTH]), np.array(stamps[COLOR]), tol)
            skipped_d, skipped_c = nd - len(self._pairs), nc - len(self._pairs)
            if skipped_d or skipped_c:
                many = max(skipped_d, skipped_c) > max(2, 0.01 * max(nd, nc))
                log.log(logging.WARNING if many else logging.INFO,
                        "%s: %d depth and %d colour frames have no partner within %.1f ms and are skipped",
                        self.path, skipped_d, skipped_c, tol)
            if nd and nc and abs(stamps[DEPTH][-1] - stamps[COLOR][-1]) > 5 * 1000.0 / self.camera.fps:
                # librealsense stops a stream silently at a frame it cannot decode.
                log.warning("%s: the depth stream ends %.2f s and the colour stream %.2f s after the first depth "
                            "frame: the file may be damaged after that point", self.path,
                            (stamps[DEPTH][-1] - stamps[DEPTH][0]) / 1000.0, (stamps[COLOR][-1] - stamps[DEPTH][0]) / 1000.0)
            if not self._pairs:
                raise RecordingError(self.path, f"no depth frame within {tol:.1f} ms of a colour frame "
                                                f"({nd} depth, {nc} colour frames; empty or truncated recording?)")
        else:
            n = nd if self.has_depth else nc
            self._pairs = [(k, None) if self.has_depth else (None, k) for k in range(n)]
            if n == 0:
                raise RecordingError(self.path, "has no frames (empty or truncated recording?)")
        self.num_frames = len(self._pairs)
        self._readers = {kind: _StreamReader(self, kind, len(ts), ts) for kind, ts in stamps.items()}

    # ---- reading -----------------------------------------------------------------
    def _frame(self, i: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        self._check_index(i)
        if self._cached is None or self._cached[0] != i:
            kd, kc = self._pairs[i]
            d = self._readers[DEPTH].depth(kd) if kd is not None else None
            c = self._readers[COLOR].color(kc) if kc is not None else None
            self._cached = (i, d, c)
        return self._cached[1], self._cached[2]

    def depth_raw(self, i: int) -> np.ndarray:
        if not self.has_depth:
            raise RecordingError(self.path, "recording has no depth stream")
        return self._frame(i)[0].copy()

    def color(self, i: int) -> np.ndarray:
        if not self.has_color:
            raise RecordingError(self.path, "recording has no colour stream")
        return self._frame(i)[1].copy()

    def fingerprint(self) -> str:
        st = self.path.stat()
        return super().fingerprint() + f":{st.st_size}:{st.st_mtime_ns}"

    def close(self) -> None:
        """Stop playback (also done when the object is garbage-collected)."""
        for reader in getattr(self, "_readers", {}).values():
            reader.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
