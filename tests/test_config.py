"""Grouped stage settings (pipeline/config.py): paths, old names, settings files, cache keys."""
from __future__ import annotations

import json

import pytest

from vid2sim.pipeline import run as runner
from vid2sim.pipeline.cli import parse_sets
from vid2sim.pipeline.config import ConfigError, config_to_json, flat_settings, leaf_paths
from vid2sim.pipeline.track import TrackConfig

# TrackConfig's settings and defaults before they were grouped (settings.json of earlier runs)
UNGROUPED_TRACK = {
    "iterations": 6, "init_iterations": 25, "gate_m": 0.03, "gate_final_m": 0.012, "gate_max_m": 0.15,
    "search_iterations": 4, "travel_iterations": 8, "travel_step": 1e-3, "huber_m": 0.004, "depth_noise_k": None,
    "depth_noise_floor_m": 0.001, "start_noise_k": 0.004, "freespace_tol_m": 0.02, "w_depth": 1.0,
    "w_silhouette": 1.0, "w_color": 1.0, "color_tol": 0.06, "damping": 1e-3, "keep_best": True, "relax": 1.0,
    "relax_after": 2, "converged_step": 2e-5, "planar": "auto", "velocity_smoothing": 0.0, "prior_m": 0.03,
    "prior_rad": 0.03, "roi_pad_px": 10, "stride": 1, "max_rays": 20000, "reach_m": 0.05, "background_tol_m": 0.02,
    "inlier_m": 0.01, "lost_min_pixels": 20, "lost_min_support": 0.3, "stop_check_m": 0.01, "stop_check_rad": 0.1,
    "reacquire": True, "reacquire_reach": 2.5, "overlay": True, "max_overlay_frames": 600,
    "ray_budget": 0, "edge_share": 0.5, "edge_band_px": 4, "freeze_converged": True,
    # track.rgb (planar tracking of RGB-only recordings), added after the grouping
    "distance_m": 0.0, "scale": False, "pyramid": 3, "ecc_iterations": 60, "min_features": 10, "fb_px": 0.5,
    "grow_px": 2, "key_correlation": 0.9, "lost_correlation": 0.5,
    # track speed (issue 31): the constant-acceleration prediction, stopping a frame's steps on no progress
    "acceleration": 1.0, "patience": 2,
    # the search along an elongated part's long axis (issue 27)
    "axis_search": 4,
    # the first step from the segmentation frame, the colour check, parts inside parts (issue 25)
    "first_reach_m": 0.2, "color_min_recall": 0.5, "inside_max": 0.5,
    # a mask's other fits tried in the whole frame at the start (issue 25)
    "start_alternatives": 4, "start_ratio": 2.0,
    # a second look at a body whose fit turned much worse than in its last frames (issue 25)
    "recheck_ratio": 1.5, "recheck_floor": 0.5, "recheck_pixels": 0.6,
    # look-alike rods' names judged over the whole track (track_names)
    "check_names": True,
    # a depth point's support tolerance in noise sigmas at the body's depth (track_support; 0: inlier_m alone)
    "inlier_sigmas": 0.0}


def test_cache_key_settings_are_the_ungrouped_ones():
    """The cache key hashes settings by leaf name: grouping kept every earlier track run cached."""
    assert flat_settings(TrackConfig()) == UNGROUPED_TRACK
    assert json.dumps(flat_settings(TrackConfig()), sort_keys=True) == json.dumps(UNGROUPED_TRACK, sort_keys=True)


def test_a_setting_is_set_by_its_path_and_saved_nested():
    cfg = runner.resolve_configs(parse_sets(["track.gates.gate_m=0.02", "track.noise.depth_noise_k=0.004",
                                             "track.iterations=3"]))["track"]
    assert (cfg.gates.gate_m, cfg.noise.depth_noise_k, cfg.iterations) == (0.02, 0.004, 3)
    assert cfg.gates.gate_final_m == 0.012  # the rest of the group keeps its defaults
    saved = config_to_json(cfg)
    assert saved["gates"]["gate_m"] == 0.02 and saved["iterations"] == 3 and "gate_m" not in saved


def test_settings_file_round_trip(tmp_path):
    cfg = runner.resolve_configs(parse_sets(["track.prior.prior_rad=0.0", "track.lost.reacquire=false"]))
    f = tmp_path / "settings.json"
    f.write_text(json.dumps({k: config_to_json(c) for k, c in cfg.items()}))
    again = runner.resolve_configs(settings_file=f)["track"]
    assert again == cfg["track"] and again.prior.prior_rad == 0.0 and again.lost.reacquire is False
    # an override of one setting of a group keeps the file's other settings of that group
    mixed = runner.resolve_configs(parse_sets(["track.prior.prior_m=0.01"]), settings_file=f)["track"]
    assert (mixed.prior.prior_m, mixed.prior.prior_rad) == (0.01, 0.0)


@pytest.mark.parametrize("sets, needle", [
    (["track.gate_m=0.02"], "settings: setting track.gate_m is now track.gates.gate_m"),
    (["track.gates=0.02"], "track.gates is a group of settings"),
    (["track.gates.nope=1"], "unknown setting(s) track.gates.nope for TrackGates"),
    (["track.gates.gate_m=abc"], "setting track.gates.gate_m='abc' of TrackGates must be float"),
])
def test_wrong_paths_are_one_clear_line(sets, needle):
    with pytest.raises(ConfigError) as e:
        runner.resolve_configs(parse_sets(sets))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_an_old_ungrouped_settings_file_names_the_new_path(tmp_path):
    f = tmp_path / "settings.json"
    f.write_text(json.dumps({"track": {"prior_m": 0.01}}))
    with pytest.raises(ConfigError, match=r"track.prior_m is now track.prior.prior_m"):
        runner.resolve_configs(settings_file=f)


@pytest.mark.parametrize("spec", [s for s in runner.STAGES if s.available()], ids=lambda s: s.name)
def test_leaf_names_are_unique_in_every_stage(spec):
    paths = leaf_paths(getattr(spec.module(), spec.config_class))  # raises when a name is used twice
    assert len(paths) == len(flat_settings(spec.default_config()))


def test_stage_options_reach_the_grouped_settings(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from vid2sim.pipeline import cli

    seen = {}
    monkeypatch.setattr(cli.runner, "run_pipeline", lambda rec, out, configs, **kw: seen.update(configs))
    res = CliRunner().invoke(cli.app, ["track", str(tmp_path), "--out", str(tmp_path / "run"), "--gates.gate-m", "0.02",
                                       "--lost.no-reacquire", "--no-overlay", "--iterations", "3",
                                       "--set", "track.noise.depth_noise_k=0.004"])
    assert res.exit_code == 0, res.output
    cfg = seen["track"]
    assert (cfg.gates.gate_m, cfg.lost.reacquire, cfg.overlay, cfg.iterations, cfg.noise.depth_noise_k) == \
        (0.02, False, False, 3, 0.004)
    assert cfg.gates.gate_final_m == 0.012 and cfg.lost.reacquire_reach == 2.5 and cfg.steps.keep_best is True


# IdentifyConfig's settings and defaults before they were grouped, and those added since (last line)
UNGROUPED_IDENTIFY = {
    "method": "csvgd", "particles": 16, "iterations": 200, "windows": 4, "polish": 0.7, "precondition": "gauss-newton",
    "cmaes_polish": 0.1, "seed": 0, "observation": "joints", "sigma": 0.0, "sigma_floor": 1e-4, "pixel_sigma": 0.02,
    "pixels": 1000, "pixel_margin": 6, "render_dtype": "float32", "frames": 0, "refit": True, "substeps": 0,
    "density_min": 100.0, "density_max": 3000.0, "density_anchor": 500.0, "floor": "auto", "floor_tolerance": 0.005,
    "floor_height": None, "masses": {}, "damping_max_revolute": 0.05, "damping_max_prismatic": 5.0,
    "estimate_friction": False, "friction_max_revolute": 0.05, "friction_max_prismatic": 1.0, "lr": 0.05,
    "plots": True, "augment": False, "augment_window": 10, "augment_holdout": 0.25, "augment_iterations": 200,
    "augment_lr": 0.02, "augment_lasso": 0.2, "augment_hidden": 5, "push_iterations": 15, "compile": "auto",
    "stop_tol": 0.05, "window_s": 1.2, "warm_refit": True}


def test_identify_cache_key_settings_are_the_ungrouped_ones():
    from vid2sim.pipeline.identify import IdentifyConfig

    assert flat_settings(IdentifyConfig()) == UNGROUPED_IDENTIFY
    assert json.dumps(flat_settings(IdentifyConfig()), sort_keys=True) == json.dumps(UNGROUPED_IDENTIFY,
                                                                                     sort_keys=True)


def test_identify_settings_by_path():
    cfg = runner.resolve_configs(parse_sets(["identify.inference.method=cmaes", 'identify.bounds.masses={"cart": 1.0}',
                                             "identify.shooting.substeps=8", "identify.frames=30"]))["identify"]
    assert (cfg.inference.method, cfg.bounds.masses, cfg.shooting.substeps, cfg.frames) == \
        ("cmaes", {"cart": 1.0}, 8, 30)
    assert (cfg.inference.particles, cfg.shooting.windows, cfg.bounds.density_anchor) == (16, 4, 500.0)


@pytest.mark.parametrize("sets, needle", [
    (["identify.method=cmaes"], "settings: setting identify.method is now identify.inference.method"),
    (["identify.augment=true"], "setting identify.augment is now identify.augmentation.augment"),
    (["identify.floor=on"], "setting identify.floor is now identify.contact.floor"),
    (["identify.push_iterations=5"], "setting identify.push_iterations is now identify.inference.push_iterations"),
    (["identify.inference.method=csvdg"], "identify.inference.method must be one of csvgd, svgd, adam, cmaes, mcmc; "
                                          "got 'csvdg'"),
    (["identify.inference.particles=0"], "identify.inference.particles must be >= 1; got 0"),
    (["identify.inference.cmaes_polish=1.5"], "identify.inference.cmaes_polish must be in [0, 1]; got 1.5"),
    (["identify.shooting.windows=0"], "identify.shooting.windows must be >= 1; got 0"),
    (["identify.shooting.polish=-0.1"], "identify.shooting.polish must be in [0, 1]; got -0.1"),
    (["identify.video.render_dtype=float16"], "identify.video.render_dtype must be one of float32, float64"),
    (["identify.contact.floor=maybe"], "identify.contact.floor must be one of auto, on, off; got 'maybe'"),
    (["identify.observation=pixels"], "identify.observation must be one of joints, video; got 'pixels'"),
    (["identify.compile=maybe"], "identify.compile must be true, false or \"auto\"; got 'maybe'"),
])
def test_identify_wrong_settings_are_one_clear_line(sets, needle):
    with pytest.raises(ConfigError) as e:
        runner.resolve_configs(parse_sets(sets))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_identify_options_reach_the_grouped_settings(monkeypatch, tmp_path):
    """Every identify setting is a command-line option, the non-scalar ones (a dict, bool or str) as JSON."""
    from typer.testing import CliRunner

    from vid2sim.pipeline import cli

    seen = {}
    monkeypatch.setattr(cli.runner, "run_pipeline", lambda rec, out, configs, **kw: seen.update(configs))
    res = CliRunner().invoke(cli.app, ["identify", str(tmp_path), "--out", str(tmp_path / "run"),
                                       "--inference.method", "cmaes", "--bounds.masses", '{"cart": 1.0}',
                                       "--compile", "false", "--augmentation.augment", "--contact.floor-height", "0.1"])
    assert res.exit_code == 0, res.output
    cfg = seen["identify"]
    assert (cfg.inference.method, cfg.bounds.masses, cfg.compile, cfg.augmentation.augment, cfg.contact.floor_height) \
        == ("cmaes", {"cart": 1.0}, False, True, 0.1)
    assert cfg.inference.iterations == 200 and cfg.bounds.density_min == 100.0
