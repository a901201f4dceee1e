"""Atomic file writes: a stage's file is either complete or absent.

Everything goes to a temporary name in the destination folder and is renamed over
the target with ``os.replace`` (atomic on POSIX within one file system).
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np


class OutputError(RuntimeError):
    """An output location cannot be written."""


def ensure_writable_dir(folder: str | os.PathLike) -> Path:
    """Create ``folder`` if needed; OutputError naming it when it cannot be written."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{folder}: output folder cannot be created ({e.strerror or e})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{folder}: output folder is not writable")
    return folder


_check_writable = ensure_writable_dir


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    ``suffix`` keeps the extension some writers insist on (np.savez appends .npz).
    """
    path = Path(path)
    _check_writable(path.parent)
    suffix = path.suffix if suffix is None else suffix
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp" + suffix, dir=path.parent)
    except OSError as e:
        raise OutputError(f"{path.parent}: output folder is not writable ({e.strerror or e})") from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def write_npz(path: str | os.PathLike, **arrays: Any) -> None:
    """``np.savez_compressed``'s format (``np.load`` reads it), at deflate level 1: on forecast's
    (75, 480, 640) float32 depth stacks 1.5 CPU s and 61 MB against level 6's 8.7 s and 50 MB."""
    with atomic_path(path, suffix=".npz") as tmp:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            for key, value in arrays.items():
                with z.open(f"{key}.npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=True)
