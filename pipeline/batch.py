"""Many recordings at once on Ray: one run folder each and a summary table.

A local Ray cluster is started by default (``ray.init(num_cpus=...)``); pass an
address to use an existing cluster. Each recording is one Ray task running the whole
pipeline; a failure is caught in the task and becomes a row in the summary, so one
bad recording never stops the others. The summary is written as CSV and HTML.
"""
from __future__ import annotations

import csv
import html
import io
import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vid2sim.datasets.atomic import write_text

SUMMARY_COLUMNS = ("recording", "run", "status", "error", "seconds", "frames", "bodies", "joints", "mse", "ssim")


@dataclass
class BatchRow:
    recording: str
    run: str
    status: str = "failed"
    error: str = ""
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = {"recording": self.recording, "run": self.run, "status": self.status, "error": self.error,
             "seconds": round(self.seconds, 2)}
        d.update({k: self.figures.get(k, "") for k in SUMMARY_COLUMNS if k not in d})
        return d


def key_figures(run_dir: Path) -> dict[str, Any]:
    """What a reader of the summary wants per recording, read from the run's files."""
    out: dict[str, Any] = {}
    try:
        import numpy as np

        if (run_dir / "poses.npz").exists():
            with np.load(run_dir / "poses.npz") as z:
                out["frames"], out["bodies"] = z["world_from_body"].shape[:2]
        if (run_dir / "articulation.json").exists():
            art = json.loads((run_dir / "articulation.json").read_text())
            out["joints"] = " ".join(f"{j['child']}:{j['type']}" for j in art["joints"])
        if (run_dir / "forecast.json").exists():
            fc = json.loads((run_dir / "forecast.json").read_text())
            twin = fc.get("twin", fc)
            out["mse"], out["ssim"] = twin.get("mse", ""), twin.get("ssim", "")
    except Exception as e:  # a damaged file must not hide the row
        out["error"] = f"summary: {e}"
    return out


def process_one(recording: str, run_dir: str, overrides: dict | None, stages: list[str] | None) -> dict[str, Any]:
    """Run the pipeline on one recording; never raises (the error goes into the row)."""
    from vid2sim.pipeline import run as runner

    row = BatchRow(recording=recording, run=run_dir)
    t0 = time.perf_counter()
    try:
        configs = runner.resolve_configs(overrides)
        status = runner.run_pipeline(recording, run_dir, configs, stages=stages)
        row.status = "ok" if "not available" not in status.values() else "partial"
    except Exception as e:
        row.status, row.error = "failed", f"{type(e).__name__}: {e}"
        (Path(run_dir)).mkdir(parents=True, exist_ok=True)
        write_text(Path(run_dir) / "error.txt", traceback.format_exc())
    row.seconds = time.perf_counter() - t0
    row.figures = key_figures(Path(run_dir))
    return row.as_dict()


def _unique_run_names(recordings: list[Path]) -> list[str]:
    names, seen = [], {}
    for r in recordings:
        base = r.stem if r.is_file() else r.name
        n = seen.get(base, 0)
        seen[base] = n + 1
        names.append(base if n == 0 else f"{base}_{n}")
    return names


def run_batch(recordings: list[str | Path], out_dir: str | Path, ray_address: str | None = None,
              overrides: dict | None = None, stages: list[str] | None = None, num_cpus: int | None = None) -> list[dict]:
    """Process every recording on Ray; writes OUT/summary.csv and OUT/summary.html."""
    import ray
    from tqdm import tqdm

    recordings = [Path(r) for r in recordings]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [str(out_dir / n) for n in _unique_run_names(recordings)]
    started_here = not ray.is_initialized()
    if started_here:
        if ray_address:
            ray.init(address=ray_address, log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(process_one)
        refs = {task.remote(str(r), run, overrides, stages): i for i, (r, run) in enumerate(zip(recordings, runs))}
        rows: list[dict | None] = [None] * len(recordings)
        pending = list(refs)
        with tqdm(total=len(pending), desc="recordings", unit="rec") as bar:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    i = refs[ref]
                    try:
                        rows[i] = ray.get(ref)
                    except Exception as e:  # the worker itself died
                        rows[i] = BatchRow(str(recordings[i]), runs[i], error=f"worker died: {e}").as_dict()
                    bar.update(1)
    finally:
        if started_here:
            ray.shutdown()
    write_summary(out_dir, rows)  # type: ignore[arg-type]
    return rows  # type: ignore[return-value]


def write_summary(out_dir: Path, rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(SUMMARY_COLUMNS))
    w.writeheader()
    w.writerows(rows)
    write_text(out_dir / "summary.csv", buf.getvalue())
    colour = {"ok": "#d4f7d4", "partial": "#fff3c4", "failed": "#f7d4d4"}
    head = "".join(f"<th>{c}</th>" for c in SUMMARY_COLUMNS)
    body = "".join(
        f"<tr style='background:{colour.get(r['status'], '#fff')}'>" + "".join(
            f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in SUMMARY_COLUMNS) + "</tr>" for r in rows)
    n_ok = sum(r["status"] == "ok" for r in rows)
    write_text(out_dir / "summary.html", f"""<!doctype html><html><head><meta charset="utf-8"><title>vid2sim batch</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #999;padding:4px 8px;font-size:13px}}</style>
</head><body><h1>vid2sim batch</h1><p>{n_ok} of {len(rows)} recordings ok.</p><table><tr>{head}</tr>{body}</table></body></html>
""")
