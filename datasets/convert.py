"""Any recording (RealSense file, video, folder) -> the folder form of docs/formats.md.

Frames are streamed through ``RecordingWriter`` one at a time, so converting a long
recording needs memory for one frame; the destination folder appears only when the
conversion is complete (an error or Ctrl-C leaves nothing behind). Depth is written
in the source's ``depth_scale`` units, so a RealSense depth image comes out
bit-identical. A folder source keeps its other files (truth.json, truth_poses.npz,
meshes); a file source keeps its sidecar ``<file>.shapes.json``.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from tqdm import tqdm

from vid2sim.datasets.recording import FolderRecording, Recording, RecordingWriter, open_recording

log = logging.getLogger(__name__)

# Written by RecordingWriter itself, never copied from a folder source.
_OWN = {"camera.json", "shapes.json", "depth", "color"}


def convert(src: str | Path | Recording, dst: str | Path, overwrite: bool = False,
            progress: bool = True) -> Path:
    """Write ``src`` as a recording folder at ``dst`` and return ``dst``.

    Raises FileExistsError if ``dst`` exists and ``overwrite`` is False, and
    RecordingError if ``src`` is not a readable recording.
    """
    rec = src if isinstance(src, Recording) else open_recording(src)
    dst = Path(dst)
    if dst.resolve() == Path(rec.path).resolve():
        raise ValueError(f"{dst}: destination is the source recording")
    extra: dict[str, bytes] = {}
    if isinstance(rec, FolderRecording):
        for f in sorted(Path(rec.path).rglob("*")):
            rel = f.relative_to(rec.path)
            if f.is_file() and rel.parts[0] not in _OWN and not rel.name.startswith("."):
                extra[rel.as_posix()] = f.read_bytes()
    with RecordingWriter(dst, rec.camera, rec.shapes, overwrite=overwrite) as writer:
        frames = tqdm(rec.frames(), total=rec.num_frames, desc=f"convert {Path(rec.path).name}", unit="frame",
                      file=sys.stderr, disable=not progress, leave=False)
        for _, depth_m, rgb in frames:
            writer.add(depth_m, rgb)
        for name, data in extra.items():
            writer.add_file(name, data)
    log.info("%s -> %s: %d frames (%s%s)", rec.path, dst, rec.num_frames,
             "depth" if rec.has_depth else "", " + colour" if rec.has_color and rec.has_depth else "colour" if rec.has_color else "")
    return dst
