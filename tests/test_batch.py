"""`vid2sim batch` on a local Ray cluster: one run folder per recording, a summary
table, and a failed recording that does not stop the others."""
import csv
import shutil

import pytest

from vid2sim.datasets.synthetic import make_recording
from vid2sim.pipeline.batch import run_batch

pytestmark = pytest.mark.slow  # starts a local Ray cluster


def test_batch_on_local_ray_with_one_bad_recording(tmp_path):
    a = make_recording("cabinet", tmp_path / "recs" / "cabinet_a", seed=0, frames=12, noise="none")
    b = make_recording("cabinet", tmp_path / "recs" / "cabinet_b", seed=1, frames=12, noise="none")
    bad = tmp_path / "recs" / "broken"
    shutil.copytree(a, bad)
    (bad / "camera.json").unlink()
    rows = run_batch([a, bad, b], tmp_path / "out", stages=["segment", "track", "articulate"], num_cpus=2)
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]
    assert "camera.json" in rows[1]["error"] and "missing" in rows[1]["error"]
    for name in ("cabinet_a", "cabinet_b"):
        assert (tmp_path / "out" / name / "articulation.json").exists()
    assert rows[0]["frames"] == 12 and rows[0]["bodies"] == 3
    with open(tmp_path / "out" / "summary.csv") as f:
        table = list(csv.DictReader(f))
    assert [t["recording"] for t in table] == [str(a), str(bad), str(b)]
    html = (tmp_path / "out" / "summary.html").read_text()
    assert "2 of 3 recordings ok" in html and "broken" in html
