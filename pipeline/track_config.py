"""The track stage's settings (``vid2sim track --help`` shows each field's comment), in
nested groups: steps (the Gauss-Newton solve), gates (which rays count), noise (depth and
colour noise), prior (the motion prior) and lost (lost bodies)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TrackSteps:
    """How the Gauss-Newton steps of one frame run."""

    search_iterations: int = 4  # extra steps allowed while some body widens its gate
    travel_iterations: int = 8  # extra steps allowed while some body still moves more than travel_step per step
    travel_step: float = 1e-3  # m or rad: per-step motion above which travel_iterations extend a frame
    damping: float = 1e-3  # Levenberg-Marquardt damping, relative to the normal matrix's diagonal
    keep_best: bool = True  # end a frame at the lowest-cost pose its steps visited, not the last one
    relax: float = 1.0  # step fraction in (0, 1] applied from step relax_after on (< 1 damps two-pose cycles)
    relax_after: int = 2  # first step of a frame (0-based) that relax applies to
    converged_step: float = 2e-5  # m or rad: a frame stops when no pose parameter moves more than this
    # a frame stops after this many steps in a row that found no pose of lower cost than the best so far
    # (the steps then cycle between poses near the optimum; keep_best returns the best); 0: off
    patience: int = 2
    freeze_converged: bool = True  # a body whose step falls below converged_step is not re-solved for the rest of the frame
    # an elongated body (longest side >= 2x the next) is also tried this many gate_final_m steps along its
    # long axis each way after a frame's steps, kept where the frame's cost falls (0: off)
    axis_search: int = 4


@dataclass(frozen=True)
class TrackGates:
    """Which depth points and rays a body's residuals use."""

    gate_m: float = 0.03  # m: on the first step of a frame, depth points farther than this from every body are not used
    gate_final_m: float = 0.012  # m: the gate shrinks linearly from gate_m to this by the frame's last step
    gate_max_m: float = 0.15  # m: a body that finds too few points widens its gate up to this
    reach_m: float = 0.05  # m: rays/points farther than this from the predicted bodies are dropped
    roi_pad_px: int = 10  # px: region of interest = projected bounding sphere plus this margin
    stride: int = 1  # use every stride-th pixel (in u and v) of the region of interest
    max_rays: int = 20000  # rays per frame at most: a larger region of interest is sampled more coarsely
    # rays per Gauss-Newton step at most (0: all of max_rays): a weighted sample of the region's rays, up to
    # edge_share of it within edge_band_px of a depth edge (silhouettes), the rest spread over the interiors
    ray_budget: int = 0
    edge_share: float = 0.5  # in [0, 1]: fraction of ray_budget reserved for rays near depth edges
    edge_band_px: int = 4  # px: a ray this close to a depth discontinuity (or a missing reading) is an edge ray
    background_tol_m: float = 0.02  # m: depth within this of the background depth is background


@dataclass(frozen=True)
class TrackNoise:
    """The depth noise model sigma = k z^2 and the residuals' weights and scales."""

    # Depth noise model sigma = k z^2 (Keselman et al. 2017; RealSense D4xx about 0.004), used for the
    # residual weights, gates and "seen through" tests; None: k measured from the recording's static
    # pixels (datasets/noise.py)
    depth_noise_k: float | None = None
    depth_noise_floor_m: float = 0.001  # m: lower bound of the depth noise sigma (quantisation)
    start_noise_k: float = 0.004  # depth noise k below which the first frame also starts from a coarse pass at this k
    huber_m: float = 0.004  # m: Huber residual scale where no depth noise applies (RGB silhouettes)
    freespace_tol_m: float = 0.02  # m: an observation this far behind a rendered surface is "seen through it"
    w_depth: float = 1.0  # weight of the point-to-surface (depth) residuals, >= 0
    w_silhouette: float = 1.0  # weight of the silhouette (free-space) residuals, >= 0
    w_color: float = 1.0  # weight of the colour silhouettes (chromaticity labels); 0: colour ignored
    color_tol: float = 0.06  # chromaticity distance within which a pixel takes a body's label
    # in [0, 1]: colour silhouettes are used only where, in the segmentation frame, at least this share of every
    # part's mask pixels takes that part's label (else a part's shading or colour noise would push it off them)
    color_min_recall: float = 0.5


@dataclass(frozen=True)
class TrackPrior:
    """The motion model (``track_motion.py``): each frame's start and weak prior."""

    velocity_smoothing: float = 0.0  # in [0, 1): velocity = this * previous velocity + (1 - this) * last frame's motion
    # >= 0: the prediction adds this times the change between the last two frames' motions (1: constant
    # acceleration, 0: constant velocity)
    acceleration: float = 1.0
    # m: std of the prediction's position error per frame (0: no motion prior); at most the motion's own
    # deviation from constant velocity, acceleration x dt^2
    prior_m: float = 0.03
    prior_rad: float = 0.03  # rad: the same for the rotation (a pendulum at 27 rad/s^2, 30 fps: 0.03)
    # m per frame: a body predicted to move faster than this is also tried at rest, and kept there if
    # that explains the frame better (a part landing and stopping within a frame or two); 0: off. A body
    # moving no faster than this and stop_check_rad starts from constant velocity (track_motion.py)
    stop_check_m: float = 0.01
    stop_check_rad: float = 0.1  # rad per frame: the same test for rotation; 0: off
    # m: the frames next to the segmentation frame (no velocity yet) also start from each part moved as its
    # image patch moved, searched within this distance (track_shift.py); 0: they start at rest only
    first_reach_m: float = 0.2


@dataclass(frozen=True)
class TrackLost:
    """When a body counts as lost, and how it is found again."""

    inlier_m: float = 0.01  # m: a depth point this close to its body supports it
    # >= 0: ... or this many depth noise sigmas (k z^2 at the body's start depth), where that is farther; 0: inlier_m only
    inlier_sigmas: float = 0.0
    lost_min_pixels: int = 20  # a body with fewer visible rendered pixels than this is lost
    lost_min_support: float = 0.3  # a body whose supporting points are fewer than this fraction of its pixels is lost
    reacquire: bool = True  # look for a lost body among unexplained depth points near its last pose
    reacquire_reach: float = 2.5  # reacquire searches within this many bounding radii of the last pose
    # in [0, 1): a body with more than this share of its volume inside another body's (parts that did not overlap at
    # the start) is lost (track_overlap.py); 0: off
    inside_max: float = 0.5
    # > 1: a found body whose residual (rms distance of its depth points to its surface, in depth noise sigmas at its
    # distance) exceeds this many times the median of its last frames' (and that by recheck_floor) is aligned again
    # from more starts (track_recheck.py); 0: off
    recheck_ratio: float = 1.5
    recheck_floor: float = 0.5  # depth noise sigmas: ... and exceeds it by at least this
    recheck_pixels: float = 0.6  # in [0, 1): ... or one seen on fewer than this share of its last frames' pixels


@dataclass(frozen=True)
class TrackRGB:
    """Planar tracking of RGB-only recordings (``pipeline/track_planar.py``)."""

    # m: the bodies' distance from the camera, which fixes the metric scale of planar tracks;
    # 0 = the distance at which the first body's library shape looks as long as its silhouette
    distance_m: float = 0.0
    scale: bool = False  # also track each silhouette's apparent size (read as motion along the optical axis)
    pyramid: int = 3  # image pyramid levels of each registration (coarse to fine), >= 1
    ecc_iterations: int = 60  # ECC iterations per pyramid level
    min_features: int = 10  # corners a body needs to be followed by them; fewer: ECC registration of its silhouette
    fb_px: float = 0.5  # px: a corner is kept while tracking it back lands within this of where it was
    grow_px: int = 2  # px: the silhouette is grown by this much for ECC registration (its outline counts; < 0 shrinks it)
    # in (0, 1]: a registration against the segmentation frame correlating at least this much replaces
    # the frame-to-frame one (no drift)
    key_correlation: float = 0.9
    lost_correlation: float = 0.5  # in [0, 1): a body whose registration correlates less is lost in that frame

    def __post_init__(self):
        if self.pyramid < 1 or self.ecc_iterations < 1 or self.distance_m < 0:
            raise ValueError("track.rgb: pyramid and ecc_iterations must be >= 1, distance_m >= 0")


@dataclass(frozen=True)
class TrackConfig:
    """Settings of the track stage (lengths in metres), in groups (``pipeline/config.py``)."""

    iterations: int = 6  # Gauss-Newton steps per frame (fewer once converged), >= 1
    init_iterations: int = 25  # Gauss-Newton steps per initial orientation hypothesis (segmentation frame)
    start_alternatives: int = 4  # other fits of each mask judged in the whole frame at the start; 0 = best fit only
    start_ratio: float = 2.0  # those other fits: fit cost within this factor of the best fit's
    # depth recordings: "on" = (x, z, yaw) per body, "off" or "auto" = 6-D; RGB-only recordings are
    # always tracked in the image plane (track.rgb), "off" refuses them
    planar: str = "auto"
    overlay: bool = True  # write the side-by-side overlay video
    max_overlay_frames: int = 600  # frames rendered into the overlay video at most
    check_names: bool = True  # two rods of one kind, different lengths: names exchanged where the other's shape fits better (track_names.py)
    steps: TrackSteps = field(default_factory=TrackSteps)  # the Gauss-Newton steps of a frame
    gates: TrackGates = field(default_factory=TrackGates)  # which depth points and rays each body uses
    noise: TrackNoise = field(default_factory=TrackNoise)  # depth noise model, residual weights and scales
    prior: TrackPrior = field(default_factory=TrackPrior)  # motion model (constant acceleration) and its prior
    lost: TrackLost = field(default_factory=TrackLost)  # lost bodies and their reacquisition
    rgb: TrackRGB = field(default_factory=TrackRGB)  # planar tracking of RGB-only recordings

    def __post_init__(self):
        if self.planar not in ("on", "off", "auto"):
            raise ValueError(f"track.planar must be one of on, off, auto; got {self.planar!r}")
