"""Report: a self-contained report.html that tolerates missing stages and renders in
headless Chromium without console errors."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from vid2sim.datasets.recording import open_recording  # noqa: E402
from vid2sim.datasets.synthetic import make_recording, simulate  # noqa: E402
from vid2sim.pipeline import export, forecast, report  # noqa: E402
from vid2sim.pipeline.artifacts import Segmentation  # noqa: E402


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def full_run(truth_inputs, tmp_path_factory):
    """A cartpole run folder with every stage file (truth poses/joints/params stand in for
    track/articulate/identify; the segmentation is the truth masks of frame 0)."""
    tmp = tmp_path_factory.mktemp("report")
    rec = open_recording(make_recording("cartpole", tmp / "rec", frames=40, size=(160, 120)))
    st = simulate("cartpole", frames=40)
    art, poses, jp, post = truth_inputs(st)
    run = tmp / "run"
    run.mkdir()
    import cv2

    ids = cv2.imread(str(tmp / "rec" / "truth_masks" / "000000.png"), cv2.IMREAD_UNCHANGED)
    Segmentation(np.stack([(ids == k + 1).astype(np.uint8) for k in range(2)]), 0, ["cart", "pole"],
                 np.array([0.9, 0.8])).save(run / "segmentation.npz")
    import dataclasses
    dataclasses.replace(poses, depth_noise_k=0.004).save(run / "poses.npz")  # as the track stage records it
    art.save(run / "articulation.json")
    jp.save(run / "joint_positions.npz")
    post.save(run / "params.json")
    export.run(export.ExportConfig(), art, post, rec.shapes, poses, run)
    forecast.run(forecast.ForecastConfig(particles=1), rec, poses, art, jp, post, run).save(run)
    return rec, run


def test_report_is_self_contained_and_complete(full_run):
    rec, run = full_run
    path = report.run(report.ReportConfig(), rec, run)
    page = path.read_text()
    assert "stage not run" not in page
    for title in ("Segmentation", "Tracking", "Kinematic tree", "Joint positions", "Posterior",
                  "Validation: predicting held-back frames", "Model"):
        assert f"<h2>{title}" in page
    assert "Twin validation score (silhouette IoU over the held-back frames)" in page
    assert "Identify fitted frames [0, 29]" in page  # 40 frames, the last 25 % held back
    assert 'href="model.urdf"' in page
    assert "depth noise used: sigma = 0.00400 z&sup2;" in page
    # every image is embedded; nothing is fetched but the local model/video links
    srcs = re.findall(r'src="([^"]+)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "<script" not in page


def test_report_tolerates_missing_stages(tmp_path):
    rec = open_recording(make_recording("cabinet", tmp_path / "rec", frames=5, size=(80, 60)))
    run = tmp_path / "run"
    run.mkdir()
    (run / "params.json").write_text("{not json")
    page = report.run(report.ReportConfig(), rec, run).read_text()
    assert page.count("stage not run") == 7  # segmentation ... model, params.json unreadable
    assert "params.json unreadable" in page


@pytest.mark.slow  # headless Chromium in a subprocess
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")
def test_report_renders_in_chromium_without_console_errors(full_run, tmp_path):
    rec, run = full_run
    path = report.run(report.ReportConfig(), rec, run)
    shot = tmp_path / "report.png"
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", "--no-first-run", f"--screenshot={shot}",
                           "--window-size=1280,3000", "--enable-logging=stderr", "--v=0", path.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
    assert shot.exists() and shot.stat().st_size > 10_000


def test_posterior_section_says_what_is_identifiable_and_what_ends_at_a_limit(tmp_path):
    """params.json's ``identifiable``: the scale note, the ratio table with its intervals, the
    flagged limit with its reason, and the warning when the particles are one point."""
    from vid2sim.pipeline.artifacts import Posterior
    from vid2sim.pipeline.identifiability import SCALE_NOTE, summarise

    names = ["cart.mass", "pole.mass", "slider.damping"]
    limits = {"cart.mass": (2.3976, 2.4024), "pole.mass": (0.12, 3.7), "slider.damping": (0.0, 2.0)}
    X = np.array([[2.4, 0.48, 1.999]] * 16)
    est = dict(zip(names, X[0]))
    anchor = {"body": "cart", "mass": 2.4, "known": False, "source": "volume x identify.bounds.density_anchor"}
    Posterior(names, limits, est, X, "cmaes", 1.0, {}, summarise(names, limits, est, X, anchor)).save(
        tmp_path / "params.json")
    page = report.posterior_section(tmp_path, report.ReportConfig())
    assert SCALE_NOTE in page
    assert "<td>pole.mass/cart.mass</td><td>0.2</td>" in page          # 0.48 / 2.4
    assert "<b>slider.damping</b> ends at its upper limit 2" in page and "damping_max" in page
    assert "The 16 particles are one point" in page


def test_report_of_a_pushed_run_shows_the_pusher_path_contacts_and_fit(tmp_path):
    """A pushed recording's report: the tip's recorded path drawn where the camera projects it,
    contacts.json's model and coefficients, and the identified floor / tip friction with the
    particles' 5-95 % range."""
    from vid2sim.pipeline import identify_push, report_actuators
    from vid2sim.pipeline.artifacts import Posterior

    rec = open_recording(make_recording("pushed_box", tmp_path / "rec", frames=30, size=(160, 120)))
    act = rec.actuation
    run = tmp_path / "run"
    run.mkdir()
    names = ["part.mass", "floor.friction", "tip.friction"]
    X = np.array([[0.3, 0.41, 0.33], [0.3, 0.45, 0.36], [0.3, 0.43, 0.30]])
    pusher = {"actuator": "pusher", "shape": "pusher_tip", "radius": 0.015, "length": 0.06, "axis": [0, 0, 1],
              "contact_points": 137, "tip_damping": 1.0}
    post = Posterior(names, {n: (0.0, 2.0) for n in names}, dict(zip(names, X[0])), X, "cmaes", 1.0,
                     {"pusher": pusher, "floor": {"height": 0.0}})
    post.save(run / "params.json")
    assert identify_push.write_side_file(post, run) == run / "contacts.json"
    page = report.run(report.ReportConfig(), rec, run).read_text()
    assert "Known actuators" in page and "pusher (pusher_tip)" in page
    lo, hi = np.percentile(X, [5, 95], axis=0)   # the particles' range, read from the file's particles
    assert f"<td>tip.friction</td><td>0.33</td><td>{lo[2]:.3g} .. {hi[2]:.3g} (3 particles)</td>" in page
    assert f"<td>floor.friction</td><td>0.41</td><td>{lo[1]:.3g} .. {hi[1]:.3g} (3 particles)</td>" in page
    assert abs(lo[2] - 0.303) < 1e-9 and abs(hi[2] - 0.357) < 1e-9
    assert "<td>pusher.contact_points</td><td>137</td>" in page and "Hunt-Crossley" in page
    # the path goes through each frame's projected tip centre (independent: Camera.project of the rows)
    img = report_actuators.path_image(rec, act, 15).astype(int)
    uv, _ = rec.camera.project(act.positions(0)[:30])
    hits = 0
    for u, v in np.round(uv).astype(int):
        patch = img[max(v - 1, 0):v + 2, max(u - 1, 0):u + 2].reshape(-1, 3)
        hits += bool((patch == report_actuators.PATH_COLOUR).all(1).any())
    assert hits == 30
    far = (img == report_actuators.PATH_COLOUR).all(-1)
    assert far.sum() < 0.05 * far.size   # a path, not a wash of colour
    # a tracking tile gets the path up to its own frame only
    tile = report_actuators.draw_paths(np.zeros_like(img, dtype=np.uint8), rec, act, 10, upto=10)
    on = (tile == report_actuators.PATH_COLOUR).all(-1)
    px = np.round(uv).astype(int)
    assert all(on[v, u] for u, v in px[:10])
    later = [(u, v) for u, v in px[20:] if np.abs(px[:11] - (u, v)).max(1).min() > 1]
    assert later and not any(on[v, u] for u, v in later)
