"""The forecast's posterior predictive band in joint coordinates (pipeline/forecast_band.py)."""
import numpy as np
import pytest

from vid2sim.datasets.synthetic import simulate
from vid2sim.pipeline.artifacts import Articulation, PoseTracks, Posterior
from vid2sim.pipeline.forecast_band import coordinates, joint_band, pick_particles, plot_band, posterior_parameters

FRAMES, AT = 40, 24


def _tracks(st) -> tuple[Articulation, PoseTracks]:
    return Articulation.from_truth(st.truth), PoseTracks.from_truth(st.truth, st.world_from_body, 30.0)


@pytest.fixture(scope="module")
def clips():
    """The cartpole of seed 0 at slider damping 0.1 ... 0.5 N s/m (truth: 0.3), same start."""
    return {d: simulate("cartpole", seed=0, frames=FRAMES, params={"slider.damping": d})
            for d in (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5)}


def test_coordinates_are_pybullets_joint_positions(clips):
    st = clips[0.3]
    art, tracks = _tracks(st)
    names, q = coordinates(art, tracks)
    ref = np.asarray(st.q)[:, [list(st.joint_names).index(n) for n in names]]
    assert names == ["slider", "hinge"]
    assert np.abs(q - (ref - ref[0])).max() < 1e-6     # rad, m: PyBullet's joint states


def test_band_of_neighbouring_dampings_holds_the_truth_and_a_shifted_one_does_not(clips):
    art, tracks = _tracks(clips[0.3])
    runs = [_tracks(st)[1].world_from_body[AT + 1:] for st in clips.values()]
    band = joint_band(art, tracks, AT, runs)
    assert band["frames"] == list(range(AT + 1, FRAMES)) and band["particles"] == 9
    assert band["inside_fraction"] == 1.0
    # the median of 9 runs is the middle one, which is the truth itself
    assert np.allclose(band["median"], band["observed"], atol=1e-9)
    low = joint_band(art, tracks, AT, runs[5:])        # damping 0.35 ... 0.5 only: the cart stops sooner
    assert low["inside_per_coordinate"]["slider"] < 0.2, low["inside_per_coordinate"]
    fig = plot_band(band)
    assert len(fig.axes) == 2


def test_stragglers_are_not_simulated():
    names = ["a.mass"]
    ll = [10.0, 9.0, -500.0, 8.0, 9.5]
    post = Posterior(names, {"a.mass": (0.0, 1.0)}, {"a.mass": 0.5}, np.linspace(0.1, 0.5, 5)[:, None], "csvgd", 10.0,
                     {"particle_log_likelihood": ll, "start_state": [0.0, 0.0]})
    assert pick_particles(post, 8).tolist() == [0, 1, 3, 4]
    assert pick_particles(post, 2).tolist() == [0, 4]
    assert pick_particles(post, 0).tolist() == []


def test_kernel_density_draws_when_the_method_has_one():
    names = ["a.mass", "b.damping"]
    X = np.array([[0.5, 0.1], [0.52, 0.12], [0.9, 0.9]])
    extra = {"particle_log_likelihood": [10.0, 9.0, -500.0], "start_state": [0.0, 0.0],
             "kernel_covariance": [[1e-4, 0.0], [0.0, 1e-4]]}
    post = Posterior(names, {"a.mass": (0.0, 1.0), "b.damping": (0.0, 1.0)}, {"a.mass": 0.5, "b.damping": 0.1}, X,
                     "csvgd", 10.0, extra)
    Y = posterior_parameters(post, 200)
    assert Y.shape == (200, 2) and np.abs(Y - [0.51, 0.11]).max() < 0.06     # the straggler at 0.9 is not drawn
    assert 0.007 < Y[:, 0].std() < 0.016                                     # kernel sd 0.01, centres 0.01 apart
    del extra["kernel_covariance"]
    assert posterior_parameters(post, 8).tolist() == X[:2].tolist()


def test_track_noise_widens_the_band_by_its_normal_quantiles(clips):
    """One forecast (the truth itself) plus track noise sigma: the band is the forecast +- 1.645 sigma
    (the 5 % and 95 % of 256 quantiles of the noise: 1 % narrow)."""
    art, tracks = _tracks(clips[0.3])
    run = tracks.world_from_body[AT + 1:]
    band = joint_band(art, tracks, AT, [run], sigma={"slider": 0.001, "hinge": 0.003})
    half = (np.asarray(band["upper"]) - np.asarray(band["lower"])) / 2
    assert half[:, 0] == pytest.approx(1.645 * 0.001, rel=0.03) and half[:, 1] == pytest.approx(1.645 * 0.003, rel=0.03)
    assert band["inside_fraction"] == 1.0 and band["noise"] == {"slider": 0.001, "hinge": 0.003}
    assert joint_band(art, tracks, AT, [run])["noise"] == {"slider": 0.0, "hinge": 0.0}
