"""Neural augmentation fitted end to end through the identify stage (dissertation Fig. 4.16).

Data: the synthetic double pendulum's articulation and shapes, its joint trajectory
simulated with Coulomb joint friction 0.05 N m that identify's analytical model lacks
(it estimates masses and viscous damping only). The augmented model must predict the
held-out last quarter of the clip better than the analytical one refined with the same
budget, and the group lasso must keep joint velocities and drop joint positions.
"""
import json

import numpy as np
import pytest
import torch

from vid2sim.datasets.synthetic import simulate
from vid2sim.models.dynamics import State, rollout
from vid2sim.pipeline import identify
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks, Posterior

FPS, T, FRICTION = 30.0, 120, 0.05


@pytest.fixture(scope="module")
def friction_data():
    s = simulate("double_pendulum", seed=0, frames=T, fps=FPS)
    tr = s.truth
    art, poses = Articulation.from_truth(tr), PoseTracks.from_truth(tr, s.world_from_body, FPS)
    cfg = identify.IdentifyConfig(shooting=identify.IdentifyShooting(substeps=4))
    sim = identify.build_simulator(cfg, art, poses, s.shapes, FPS)
    theta = torch.tensor([[tr["params"][n] for n in sim.names]], dtype=torch.float64)
    model = sim.model_for(theta)
    model = model.replace(friction=torch.full_like(model.friction, FRICTION))
    q_pb = np.asarray(s.q, float)
    qd0 = np.gradient(q_pb, 1.0 / FPS, axis=0)[0]
    with torch.no_grad():
        st = rollout(model, State(torch.zeros(1, 2, dtype=torch.float64), torch.tensor(qd0)[None]), (T - 1) * 4,
                     dt=1.0 / (4 * FPS))
    q = st.q[::4, 0].numpy() + q_pb[0]
    assert np.ptp(q, 0).min() > 1.0           # both joints swing (radians)
    return art, JointPositions(q, list(s.joint_names)), poses, s.shapes


@pytest.mark.slow  # over 10 s on the shared 2-core machine
def test_augmentation_beats_analytical_on_held_out_frames_and_keeps_only_velocities(friction_data, tmp_path):
    art, jp, poses, shapes = friction_data
    # noise-free tracks: the likelihood's noise is set (its calibration), not estimated from them.
    # csvgd's defaults (its Gauss-Newton phase: best particle ll -15795) and the default lasso 0.2:
    # held-out 0.00048 vs analytic 0.00435; q/shoulder 0.0, q/elbow 0.047, qd/shoulder 0.023,
    # qd/elbow 0.62. With lasso 0.4 the lasso switched every input off from that start (0.00438);
    # from the earlier Adam-only csvgd's particle (ll -38130) lasso 0.4 had worked (0.00082)
    cfg = identify.IdentifyConfig(inference=identify.IdentifyInference(method="csvgd", particles=8, iterations=10),
                                  shooting=identify.IdentifyShooting(substeps=4, windows=1),
                                  augmentation=identify.IdentifyAugmentation(augment=True),
                                  noise=identify.IdentifyNoise(sigma=0.01))
    post = identify.run(cfg, art, jp, poses, shapes, tmp_path)
    aug = post.extra["augmentation"]
    held, train = aug["heldout_mse"], aug["train_mse"]
    assert aug["train_frames"] + aug["heldout_frames"] == T
    # better than the analytical model given the same refinement, on frames it never saw
    assert held["augmented"] < 0.5 * held["analytic"], held
    assert train["augmented"] < train["analytic"] < train["posterior"], train
    n = aug["input_norms"]
    # the lasso singles out a velocity: positions shrunk to a small fraction of it
    # (with the capsule inertia corrected, 90 frames and lasso 0.2 no longer showed the effect:
    # held-out 0.00362 vs 0.00364; at 120 frames, lasso 0.4: q 0.007 / 0.024, qd/elbow 0.27)
    assert max(n["qd/shoulder"], n["qd/elbow"]) > 0.1, n
    assert max(n["q/shoulder"], n["q/elbow"]) < 0.2 * max(n["qd/shoulder"], n["qd/elbow"]), n
    assert (tmp_path / "augmentation.png").stat().st_size > 1000
    post.save(tmp_path / Posterior.FILE)
    back = json.loads((tmp_path / Posterior.FILE).read_text())
    assert back["extra"]["augmentation"]["inputs"] == ["q/shoulder", "q/elbow", "qd/shoulder", "qd/elbow"]


def test_augmentation_refuses_a_clip_too_short_to_hold_out(friction_data, tmp_path):
    art, jp, poses, shapes = friction_data
    short = JointPositions(jp.q[:20], jp.names)
    cfg = identify.IdentifyConfig(plots=False,
                                  inference=identify.IdentifyInference(particles=2, iterations=1),
                                  shooting=identify.IdentifyShooting(substeps=1),
                                  augmentation=identify.IdentifyAugmentation(augment=True))
    with pytest.raises(ValueError, match="held-out frames"):
        identify.run(cfg, art, short, poses, shapes, tmp_path)
