"""Posterior inference over simulation parameters from observed trajectories.

What it is for: given a differentiable simulator ``simulate(params (N, P), start (N, S),
steps) -> (N, steps, S)`` and observed trajectories, estimate a particle posterior over
the parameters (and the initial states) with Constrained SVGD (dissertation ch. 4.1,
Alg. 5: SVGD + multiple shooting + modified differential method of multipliers), or a
baseline (Adam, plain SVGD, CMA-ES, emcee) under the same simulator budget; and score
estimates (NMAE) and trajectory sets (KNN KL, MMD).

What it deliberately does not do: build simulators or parameter sets from a
mechanism (that is ``vid2sim.pipeline.identify``), or read files.

    from vid2sim.models.inference import Problem, infer
    prob = Problem(names, lower, upper, simulate, observations=[y], state_guess=[x_guess])
    res = infer("csvgd", prob, particles=16, iterations=500, windows=8)
    res.theta, res.log_likelihood, res.estimate
"""
from vid2sim.models.inference.methods import (METHODS, InferenceResult, adam, cmaes, csvgd, infer, least_squares, mcmc,
                                              sobol_unit, svgd)
from vid2sim.models.inference.metrics import knn_kl, mmd, nmae, trajectory_metrics
from vid2sim.models.inference.problem import Problem, Shooting
from vid2sim.models.inference.svgd import rbf_kernel, run_svgd, svgd_direction

__all__ = ["METHODS", "InferenceResult", "Problem", "Shooting", "adam", "cmaes", "csvgd", "infer", "knn_kl", "least_squares", "mcmc",
           "mmd", "nmae", "rbf_kernel", "run_svgd", "sobol_unit", "svgd", "svgd_direction", "trajectory_metrics"]
