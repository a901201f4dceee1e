"""A joint resting on its end stop in the forecast's restart window (the pushed linkage of seed 2:
hinge_3 pressed into its -1 rad stop by the pusher from frame 75 on): export finds the stop
from the tracks, and the restart's state fit keeps that limit."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from vid2sim.pipeline import export, export_stops, forecast

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

FIT, STEPS = 90, 30
SHOOT = forecast.shoot_state


@pytest.fixture(scope="module")
def pressed(tmp_path_factory):
    from bench_forecast import truth_inputs
    from vid2sim.datasets.synthetic import recording_shapes, simulate

    st = simulate("pushed", seed=2, frames=FIT + STEPS, fps=30.0)
    art, poses, jp, post = truth_inputs(st, 30.0)
    shapes = recording_shapes(st)
    urdf = export.run(export.ExportConfig(), art, post, shapes, poses.head(FIT), tmp_path_factory.mktemp("twin"))
    return st, art, poses, jp, post, shapes, urdf


def _restart(pressed, monkeypatch) -> tuple[float, float, float]:
    """The twin restarted at the last fitted frame (its state fitted over frames 80-89): the largest
    body-centre distance (m) from the truth over the 30 frames after it; the rms of the state fit's own
    residual at its solution (``forecast.pose_residual`` over the window, with the limits as the fit
    had them; m, rotations at 0.1 m/rad); hinge_3's fitted q (rad) minus its exported lower limit."""
    st, art, poses, jp, post, shapes, urdf = pressed
    fits = []

    def recorded(residual, x0, n):
        x = SHOOT(residual, x0, n)
        fits.append((x, float(np.sqrt(np.mean(residual(x, n) ** 2)))))
        return x

    monkeypatch.setattr(forecast, "shoot_state", recorded)
    W = forecast.simulate_twin(urdf, art, poses.head(FIT), FIT - 1, STEPS, 30.0, floor=forecast.default_floor(art, post),
                               tip=forecast.Tip.from_truth(st), jp=jp, shapes=shapes)
    order = [poses.body_names.index(b) for b in art.bodies]
    true = st.world_from_body[FIT:FIT + STEPS][:, order]
    j3 = list(jp.names).index("hinge_3")
    (x, rms), = fits
    return float(np.linalg.norm(W[:, :, :3, 3] - true[:, :, :3, 3], axis=-1).max()), rms, x[j3] - jp.q[:FIT, j3].min()


def test_export_limits_the_hinge_at_the_stop_it_rests_on(pressed):
    """hinge_3 arrives at its stop at speed and stays (its coordinate flat to 1 mrad over the
    last 15 fitted frames): export limits that side at the observed extreme; hinge_1, which never
    reaches a stop in these frames, stays continuous."""
    st, art, poses, jp, post, shapes, urdf = pressed
    q3 = jp.q[:FIT, jp.names.index("hinge_3")]
    assert np.ptp(q3[-15:]) < 1e-3 and q3[0] - q3[-1] > 0.9          # swung 0.9+ rad, then flat
    lo, hi, continuous = export_stops.limits(q3, True, export.ExportConfig())
    assert not continuous and lo == pytest.approx(q3.min(), abs=1e-9)
    assert hi - lo == pytest.approx(2 * np.pi, abs=1e-6)             # one turn: the same stop from the other side
    assert export_stops.limits(jp.q[:FIT, jp.names.index("hinge_1")], True, export.ExportConfig())[2]


def test_the_restart_keeps_the_stop_a_joint_rests_on(pressed, monkeypatch):
    """Restarted from the true frames 80-89 with the stop kept during the state fit, the fit explains
    the window (0.004 mm rms), its hinge_3 no more than 1 mrad beyond the stop (0.17 mrad inside it),
    and the twin (true masses and friction) follows the truth within 1 mm for 1 s. With every limit off
    during that fit (forecast.at_stop finding none), no start state explains a hinge pressed against
    nothing yet resting: 1.8 mm rms (1.8-2.7 with other least-squares settings). Where that state
    goes after the fit is the optimiser's: 8 mrad beyond the stop here, its replay 11 mm off within
    the window but 0.97 mm after it on this install (6.5 mm measured on 2026-12-01), so not asserted."""
    error, rms, q3 = _restart(pressed, monkeypatch)
    assert error < 1e-3 and rms < 1e-4 and q3 > -1e-3
    monkeypatch.setattr(forecast, "at_stop", lambda twin, names, Q: ())
    assert _restart(pressed, monkeypatch)[1] > 1e-3


# The pipeline's tracked coordinate of seed 2's hinge link2_to_link3 (bench_push --cases pushed --seed 2,
# frames 55-89, rad): it swings in at 0.02-0.04 rad a frame, slowing, and rests from frame 75 on, jittering
# by up to 14 mrad; the true stop is at -1.1002 in these coordinates.
TRACKED_Q3 = np.array([
    -0.3756, -0.4225, -0.4661, -0.5065, -0.5473, -0.5854, -0.627, -0.6666, -0.7045, -0.7417, -0.7789, -0.8196,
    -0.8515, -0.8904, -0.9217, -0.9562, -0.9939, -1.0177, -1.0435, -1.0738, -1.0963, -1.0978, -1.0982, -1.1011,
    -1.1013, -1.1016, -1.1038, -1.1029, -1.1163, -1.1044, -1.1138, -1.1037, -1.1015, -1.1072, -1.1015])

# The same for seed 1's hinge link3_to_link1 (frames 30-89): it swings in at 0.03-0.05 rad a frame and rests
# from frame 52 on its stop (the truth: +1 rad, 0.551 in these coordinates), with a 2-frame glitch to
# 0.593 at frames 70-71 and a 6-mrad drift of the tracked level over the rest.
TRACKED_Q1 = np.array([
    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0200, 0.0731, 0.1248, 0.1769, 0.2297, 0.2717, 0.3156, 0.3616,
    0.4046, 0.4472, 0.4893, 0.5220, 0.5496, 0.5512, 0.5494, 0.5447, 0.5496, 0.5491, 0.5565, 0.5509, 0.5505, 0.5552,
    0.5492, 0.5518, 0.5519, 0.5506, 0.5622, 0.5495, 0.5483, 0.5628, 0.5928, 0.5809, 0.5519, 0.5523, 0.5532, 0.5557,
    0.5534, 0.5564, 0.5534, 0.5533, 0.5546, 0.5579, 0.5536, 0.5562, 0.5535, 0.5576, 0.5564, 0.5577, 0.5535, 0.5590])


def _carried(n: int, speed: float = 0.003) -> np.ndarray:
    """(n, 3): a neighbour's point moving along x at ``speed`` m a frame."""
    return np.c_[speed * np.arange(n), np.zeros(n), np.zeros(n)]


def test_a_hinge_resting_on_its_stop_while_pushed_is_found_through_the_track_jitter():
    """On the tracked hinge (TRACKED_Q3) the impact rule scores 0.64 (a stop is above 1): the joint
    brakes on the way in. Resting there for 15 frames while its neighbours move is a stop
    (dwell_score > 1.5), at its resting level, within 3 mrad of the true stop; with neighbours that
    rest too (the whole mechanism at rest) it is none."""
    q = TRACKED_Q3
    assert export_stops.stop_score(q, -1) < 1.0
    score, level = export_stops.dwell_score(q, -1, _carried(len(q)))
    assert score > 1.5 and abs(level - (-1.1002)) < 3e-3
    lo, hi, continuous = export_stops.limits(q, True, export.ExportConfig(), _carried(len(q)))
    assert not continuous and lo == level and hi == pytest.approx(lo + 2 * np.pi)
    assert export_stops.dwell_score(q, -1, np.zeros((len(q), 3)))[0] == 0.0
    assert export_stops.limits(q, True, export.ExportConfig(), np.zeros((len(q), 3)))[2]   # continuous
    assert export_stops.dwell_score(q, +1, _carried(len(q)))[0] < 1.0


def test_the_rest_rule_survives_noise_where_the_impact_rule_does_not(pressed):
    """The true hinge_3 of seed 2 (frames 0-89) with white noise on q, 20 draws each: the impact
    rule finds the stop at most 12 times in 20 at 3 mrad (9 measured); the rest under load (the true
    neighbourhood's motion) at least 18 in 20 at 3 mrad and 12 in 20 at 6 mrad (the tracker's jitter on
    these links: 2-9 mrad), its level within 5 mrad of the true stop."""
    st, art, poses, jp, post, shapes, urdf = pressed
    names, q = export.joint_coordinates(art, poses.head(FIT))
    x = q[:, names.index("hinge_3")]
    moved = export_stops.neighbourhood_points(art, poses.head(FIT), next(j for j in art.joints if j.name == "hinge_3"))
    assert np.ptp(moved[75:], axis=0).max() > 0.02   # the pushed linkage moves on around the resting hinge
    rng = np.random.default_rng(0)
    impact = sum(export_stops.hits_stop(x + 0.003 * rng.standard_normal(len(x)), -1) for _ in range(20))
    assert impact <= 12
    for sigma, least in ((0.003, 18), (0.006, 12)):
        found = [export_stops.dwell_score(x + sigma * rng.standard_normal(len(x)), -1, moved) for _ in range(20)]
        assert sum(s > 1 for s, _ in found) >= least, sigma
        assert max(abs(lv - x.min()) for s, lv in found if s > 1) < 5e-3


def test_no_rest_is_read_into_a_turning_point_a_braked_stop_or_a_start_at_rest():
    """With neighbours moving all along, 3 mrad noise, 50 draws each: a pendulum's turning points (0.8 rad,
    periods 0.67-3 s), a damped creep to its extreme and a joint resting at its extreme from the start,
    then leaving, never show a rest under load (dwell_score <= 1); a joint braked to rest by constant
    friction (0.03 rad a frame shed in 10 frames, resting at its extreme) at most 4 times in 50 (3
    measured: the noise hides where its braking ends; 6 in 200); a joint running into a wall at the same
    speed and resting does at least 48 times in 50."""
    t = np.arange(90, dtype=float)
    rng = np.random.default_rng(5)
    moved = _carried(90)
    v0, a = 0.03, 0.003
    braked = np.where(t < 40, v0 * t, v0 * 40 + np.where(t < 50, v0 * (t - 40) - 0.5 * a * (t - 40) ** 2, 0.15))
    wall = np.minimum(v0 * t, v0 * 50)
    cases = {"braked": braked, "creep": 1 - np.exp(-t / 15), "kicked": np.where(t < 30, 0.0, -0.02 * (t - 30))}
    for period in (20.0, 45.0, 90.0):
        cases[f"pendulum {period}"] = 0.8 * np.cos(2 * np.pi * t / period + 0.3)

    def scores(q: np.ndarray) -> list[float]:
        return [max(export_stops.dwell_score(q + 0.003 * rng.standard_normal(90), s, moved)[0] for s in (-1, 1))
                for _ in range(50)]

    for name, q in cases.items():
        found = sum(s > 1.0 for s in scores(q))
        assert found <= (4 if name == "braked" else 0), (name, found)
    assert sum(s > 1.0 for s in scores(wall)) >= 48   # 199 in 200 measured


def test_a_rest_survives_a_glitch_and_a_drift_of_the_track():
    """Seed 1's tracked hinge (TRACKED_Q1): the impact rule sees no stop (0.38); the rest rule finds
    the rest from frame 52 (frame 22 of the array) and limits the hinge within 6 mrad of the true stop,
    though two glitch frames lie 40 mrad beyond it; a joint that goes on past the rest for more than 5 %
    of the frames has none there."""
    q = TRACKED_Q1
    assert export_stops.stop_score(q, +1) < 1.0
    score, level, first = export_stops._best_rest(q, +1, _carried(len(q)))
    assert score > 3 and first == 22 and abs(level - 0.5513) < 6e-3
    lo, hi, continuous = export_stops.limits(q, True, export.ExportConfig(), _carried(len(q)))
    assert not continuous and hi == level and lo == pytest.approx(hi - 2 * np.pi)
    beyond = q.copy()
    beyond[-8:] += 0.05   # it leaves the rest outwards for 8 of 60 frames: no stop there
    assert export_stops.dwell_score(beyond, +1, _carried(len(q)))[0] <= 1.0
