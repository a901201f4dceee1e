"""The identify stage's settings (``vid2sim identify --help`` shows each field's comment), in
nested groups (``pipeline/config.py``): inference (the method and its budget), shooting (the
clip's windows and the simulator rate), noise (the joints observation), video (the pixel-space
observation), bounds (the prior box of the parameters), contact (the floor of a floating root)
and augmentation (the neural joint force). Each group checks its own choices and ranges when
the settings are read, naming the setting by its full path (``identify.inference.method``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from vid2sim.models.inference import METHODS


def _one_of(path: str, value, allowed: tuple) -> None:
    """ValueError naming ``path`` unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{path} must be one of {', '.join(allowed)}; got {value!r}")


def _at_least_one(path: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{path} must be >= 1; got {value}")


def _fraction(path: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{path} must be in [0, 1]; got {value}")


@dataclass(frozen=True)
class IdentifyInference:
    """The inference method (models/inference) and its budget."""

    method: str = "csvgd"          # csvgd | cmaes | adam | svgd | mcmc (models/inference/methods.py); csvgd's
                                   # particles are a posterior sample; cmaes's are its final population
    particles: int = 16            # particles (CSVGD/SVGD), starts (Adam), population (CMA-ES), walkers (MCMC)
    iterations: int = 200          # budget: particles x iterations rollouts of the observed clip
    push_iterations: int = 15      # iterations instead of ``iterations`` with a known pusher (actuation.npz): each
                                   # rollout then costs ~10x a contact-free one (480 Hz, hundreds of contact points)
    lr: float = 0.05               # Adam step in normalised parameter units (gradient methods), decays 10x
    cmaes_polish: float = 0.1      # cmaes, in [0, 1): budget fraction for a last Levenberg-Marquardt refinement
                                   # of the best individual (methods.cmaes); 0: off
    precondition: str = "gauss-newton"  # csvgd's polish steps: gauss-newton (svgd_newton.py) | none (Adam)
    stop_tol: float = 0.05         # csvgd's Gauss-Newton steps end once, over 10 steps, the best particle rose less
                                   # than this (nats) and no particle joined the converged set (0: the whole budget)

    def __post_init__(self):
        if self.stop_tol < 0:
            raise ValueError(f"identify.inference.stop_tol must be >= 0; got {self.stop_tol}")
        _one_of("identify.inference.method", self.method, tuple(METHODS))
        _one_of("identify.inference.precondition", self.precondition, ("gauss-newton", "none"))
        _at_least_one("identify.inference.particles", self.particles)
        _at_least_one("identify.inference.iterations", self.iterations)
        _fraction("identify.inference.cmaes_polish", self.cmaes_polish)


@dataclass(frozen=True)
class IdentifyShooting:
    """How the clip is split into shooting windows, and the simulator's steps per frame."""

    windows: int = 4               # csvgd: shooting windows the clip is split into (1 = single shooting), at least
    window_s: float = 1.2          # csvgd: a longer clip is cut into more windows, none longer than this (s; 0: off)
    polish: float = 0.7            # csvgd with windows > 1, in [0, 1]: fraction of the iterations spent last on
                                   # single shooting from each particle's first-window state (methods.csvgd); the
                                   # phase whose particles score higher on the windows is kept (chaotic clips:
                                   # multiple shooting); 0: multiple shooting throughout
    substeps: int = 0              # simulator steps per video frame (semi-implicit Euler), >= 0;
                                   # 0: ceil(960 Hz / fps), the rate forecast runs the twin at

    def __post_init__(self):
        _at_least_one("identify.shooting.windows", self.windows)
        if self.window_s < 0:
            raise ValueError(f"identify.shooting.window_s must be >= 0; got {self.window_s}")
        _fraction("identify.shooting.polish", self.polish)


@dataclass(frozen=True)
class IdentifyNoise:
    """The observation noise of the tracked joint positions (observation=joints)."""

    sigma: float = 0.0             # observation noise std in joint units (rad or m), the same for every joint;
                                   # 0: estimated per joint from the tracks (track_noise)
    sigma_floor: float = 1e-4      # sigma=0: lower bound of each joint's estimate, also once the fit's residuals correct it


@dataclass(frozen=True)
class IdentifyVideo:
    """The pixel-space observation (observation=video, identify_video.py)."""

    pixel_sigma: float = 0.02      # observation=video: depth noise std (m) per pixel
    pixels: int = 1000             # observation=video: pixels compared per frame (drawn around the mechanism)
    pixel_margin: int = 6          # observation=video: px added around the parts' silhouettes
    render_dtype: str = "float32"  # observation=video: ray casting precision (float32 | float64)

    def __post_init__(self):
        _one_of("identify.video.render_dtype", self.render_dtype, ("float32", "float64"))


@dataclass(frozen=True)
class IdentifyBounds:
    """The prior box: mass limits from shape volumes x densities, damping and friction limits."""

    density_min: float = 100.0     # kg/m^3, lower end of plausible part densities
    density_max: float = 3000.0    # kg/m^3, upper end
    density_anchor: float = 500.0  # kg/m^3: without `masses`, the anchor body's mass (the scale, not observable
                                   # from free motion; the first moving body, or a floating root) = volume x this
                                   # (export's default density); the fit runs with every mass free and the
                                   # posterior is rescaled to it afterwards (identifiability.to_anchor)
    masses: dict = field(default_factory=dict)  # known body masses (kg), e.g. {"cart": 1.0}: fix the
                                   # scale free motion leaves open (only mass ratios and damping/mass are
                                   # observable), which control needs; one is imposed after the fit (as the
                                   # anchor); two or more are held within +-0.1 % during it, the damping/friction
                                   # limits scaled by the first one / (its volume x density_anchor)
    damping_max_revolute: float = 0.05   # N m s/rad
    damping_max_prismatic: float = 5.0   # N s/m (a 0.8-kg hollow drawer at 1 N s/m needs > 2: see decisions.md)
    estimate_friction: bool = False      # also estimate smoothed Coulomb friction per 1-dof joint
    friction_max_revolute: float = 0.05  # N m
    friction_max_prismatic: float = 1.0  # N


@dataclass(frozen=True)
class IdentifyContact:
    """The floor plane of a floating or planar root (identify_roots.py)."""

    floor: str = "auto"            # floating/planar roots: auto (a floor plane where the tracks show contact,
                                   # identify_roots.floor_plane) | on | off
    floor_tolerance: float = 0.005  # m: the bodies' lowest points within this of the floor level count as on it
    floor_height: float | None = None  # m, world z of the floor (known world frame) where one is seen or floor=on;
                                   # None: from the tracks (identify_roots.floor_plane)

    def __post_init__(self):
        _one_of("identify.contact.floor", self.floor, ("auto", "on", "off"))


@dataclass(frozen=True)
class IdentifyAugmentation:
    """The neural joint force fitted at the best particle (identify_augment.py; NeuralSim)."""

    augment: bool = False          # also fit a neural joint force (2x5 ELU on q, qd; sparse group lasso) at the
                                   # best particle, end to end through rollouts (identify_augment.py)
    augment_window: int = 10       # frames per training window
    augment_holdout: float = 0.25  # last fraction of the clip kept out of training (held-out error)
    augment_iterations: int = 200  # Adam steps (each for the analytical-only and the augmented fit)
    augment_lr: float = 0.02       # Adam learning rate of the augmented fit
    augment_lasso: float = 0.2     # group-lasso weight per input (proximal steps)
    augment_hidden: int = 5        # units per hidden layer (TDS: 5)


@dataclass(frozen=True)
class IdentifyConfig:
    """Settings of the identify stage, in groups (``pipeline/config.py``)."""

    observation: str = "joints"    # joints: tracked joint positions; video: rendered vs observed depth (identify_video.py)
    frames: int = 0                # use the first `frames` frames (0: all)
    refit: bool = True             # with frames held back (forecast.holdout): after the fit on the first part,
                                   # fit again on every frame for params.json / the exported twin (params_train.json
                                   # keeps the first fit, which forecast validates)
    warm_refit: bool = True        # csvgd: the refit starts from the first fit's particles on single shooting
                                   # (where the first fit kept its single-shooting particles)
    seed: int = 0                  # Sobol scrambling / sampler seed
    plots: bool = True             # write posterior_pairs.png and trajectories.png
    compile: bool | str = "auto"   # torch.compile the simulator step (same results): True | False | "auto";
                                   # compiling costs seconds per batch size, then each rollout is faster;
                                   # auto: on when a rollout's steps x iterations >= COMPILE_STEPS
    inference: IdentifyInference = field(default_factory=IdentifyInference)  # the inference method and its budget
    # shooting windows and simulator steps per frame
    shooting: IdentifyShooting = field(default_factory=IdentifyShooting)
    noise: IdentifyNoise = field(default_factory=IdentifyNoise)  # observation noise of the tracked joint positions
    video: IdentifyVideo = field(default_factory=IdentifyVideo)  # the pixel-space observation (observation=video)
    # the prior box: densities, known masses, damping and friction limits
    bounds: IdentifyBounds = field(default_factory=IdentifyBounds)
    contact: IdentifyContact = field(default_factory=IdentifyContact)  # the floor plane of a floating or planar root
    # the neural joint force (NeuralSim)
    augmentation: IdentifyAugmentation = field(default_factory=IdentifyAugmentation)

    def __post_init__(self):
        """Choices and ranges, checked when the settings are read (a typo in ``--set`` stops the
        run before segment and track spend minutes, not at identify); each group checks its own."""
        _one_of("identify.observation", self.observation, ("joints", "video"))
        if self.compile not in (True, False, "auto"):
            raise ValueError(f"identify.compile must be true, false or \"auto\"; got {self.compile!r}")
