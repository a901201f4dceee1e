"""Neural augmentation fitted through the identify stage (NeuralSim; dissertation §4.2).

After the posterior over the analytical parameters, a small MLP (2 x 5 ELU, TDS's size)
at the simulator's ``joint_force`` insertion point reads the joint positions and
velocities and adds a generalized force; it is trained end to end through rollouts of
the twin, together with the analytical parameters (started at the best particle, kept
within their limits), on short windows of the tracked joint trajectory (simulated by
identify's own ``TwinSimulator.simulate``), with the sparse group lasso on its input
weights (proximal Adam steps, ``vid2sim.models.dynamics.augment``) so that inputs the
missing force does not depend on are switched off. The last ``augment_holdout`` of the clip is never trained on: the
prediction error there, with and without the network, says whether it generalises.

Written by hand because no library trains a network inside an articulated-body
rollout on the CPU; the pieces (MLP, lasso, proximal step) are the simulator's.

Only the best particle is augmented (one network, not one per particle), and the
network is not part of ``model.urdf``: URDF has no place for it. ``params.json``
carries its weights and the per-input group norms under ``extra["augmentation"]``.
"""
from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from vid2sim.datasets.atomic import write_bytes

log = logging.getLogger(__name__)


def _windows(q: np.ndarray, qd: np.ndarray, lo: int, hi: int, length: int, stride: int):
    """Start states and targets of every window of ``length`` frames inside frames [lo, hi)."""
    starts = list(range(lo, hi - length, stride))   # non-empty: fit_augmentation checks the lengths
    x0 = torch.as_tensor(np.stack([np.r_[q[k], qd[k]] for k in starts]))
    target = torch.as_tensor(np.stack([q[k + 1:k + 1 + length] for k in starts]))   # (W, length, nv)
    return x0, target


def fit_augmentation(cfg, sim, q: np.ndarray, fps: float, theta: np.ndarray, out_dir: Path | None) -> dict:
    """Train the ``joint_force`` network on the first (1 - holdout) of ``q`` (T, nv) at the
    physical parameters ``theta`` (P,); returns the record stored in params.json."""
    from vid2sim.models.dynamics import adam_group_lasso_step, add_augmentation, augmentation_penalty, group_lasso_prox

    T, nv = q.shape
    length = int(cfg.augmentation.augment_window)
    split = int(round(T * (1.0 - cfg.augmentation.augment_holdout)))
    if split < length + 2 or T - split < length + 1:
        raise ValueError(f"identify: augmentation needs at least {length + 2} training and {length + 1} held-out "
                         f"frames (window {length}, holdout {cfg.augmentation.augment_holdout}); the clip has {T}")
    qd = np.gradient(q, 1.0 / fps, axis=0, edge_order=2)
    train = _windows(q, qd, 0, split, length, max(1, length // 2))
    held = _windows(q, qd, split - 1, T, length, max(1, length // 2))
    lo = torch.as_tensor(sim.lower, dtype=torch.float64)
    span = torch.as_tensor(sim.upper - sim.lower, dtype=torch.float64).clamp(min=1e-12)
    u0 = ((torch.as_tensor(theta, dtype=torch.float64) - lo) / span).clamp(1e-3, 1 - 1e-3)
    dofs = list(sim.dof_names)
    inputs = [f"q/{d}" for d in dofs] + [f"qd/{d}" for d in dofs]

    def error(z, nets, x0, target):
        th = (lo + span * torch.sigmoid(z))[None].expand(x0.shape[0], -1)
        pred = sim.simulate(th, x0, length + 1, nets)[:, 1:, :nv]    # (W, length, nv)
        return (pred - target).pow(2).mean()

    z0 = torch.logit(u0)
    with torch.no_grad():
        train_posterior = error(z0, (), *train).item()
        held_posterior = error(z0, (), *held).item()
    scale = 1.0 / max(train_posterior, 1e-12)        # loss 1 = the posterior estimate's error
    lr = cfg.augmentation.augment_lr

    def fit(with_net: bool):
        """Adam on the parameters (within their limits) and, with_net, the network, same budget."""
        z = z0.clone().requires_grad_()
        model = sim.model_for((lo + span * torch.sigmoid(z0))[None])  # holds the network (structure only)
        if with_net:
            model = add_augmentation(model, "joint_force", inputs, hidden=cfg.augmentation.augment_hidden, layers=2,
                                     seed=cfg.seed)
        nets = model.nets
        opt = torch.optim.Adam([z, *(w for n in nets for w in n.weights)], lr=lr)
        curve = []
        for _ in tqdm(range(cfg.augmentation.augment_iterations),
                      desc=f"identify: {'augmented' if with_net else 'analytical'} fit",
                      leave=False, disable=None):
            opt.zero_grad()
            loss = error(z, nets, *train) * scale + augmentation_penalty(model, lasso=0.0, l2=1e-5)
            loss.backward()
            opt.step()
            if with_net:
                group_lasso_prox(model, adam_group_lasso_step(nets[0], opt, lr, cfg.augmentation.augment_lasso))
            curve.append(float(loss.item()))
        with torch.no_grad():
            return z.detach(), model, curve, error(z, nets, *train).item(), error(z, nets, *held).item()

    z_a, _, curve_a, train_analytic, held_analytic = fit(False)
    z_n, model, curve, train_aug, held_aug = fit(True)
    net = model.nets[0]
    norms = net.input_norms().detach().numpy()
    stride = max(1, cfg.augmentation.augment_iterations // 100)
    record = {
        "point": "joint_force", "inputs": inputs, "hidden": [cfg.augmentation.augment_hidden] * 2, "activation": "elu",
        "input_norms": {n: float(v) for n, v in zip(inputs, norms)},
        "weights": [w.detach()[0].tolist() for w in net.weights],
        "train_mse": {"posterior": train_posterior, "analytic": train_analytic, "augmented": train_aug},
        "heldout_mse": {"posterior": held_posterior, "analytic": held_analytic, "augmented": held_aug},
        "theta_analytic": dict(zip(sim.names, (lo + span * torch.sigmoid(z_a)).tolist())),
        "theta_augmented": dict(zip(sim.names, (lo + span * torch.sigmoid(z_n)).tolist())),
        "window_frames": length, "train_frames": split, "heldout_frames": T - split,
        "iterations": cfg.augmentation.augment_iterations, "lasso": cfg.augmentation.augment_lasso,
        "loss_curve_stride": stride, "loss_curve": curve[::stride], "loss_curve_analytic": curve_a[::stride],
    }
    log.info("identify: augmentation held-out MSE %.3g (analytical %.3g); input norms %s", held_aug, held_analytic,
             {n: round(float(v), 3) for n, v in zip(inputs, norms)})
    if out_dir is not None and cfg.plots:
        plot_augmentation(record, Path(out_dir) / "augmentation.png")
    return record


def plot_augmentation(rec: dict, path: Path) -> None:
    """Input group norms (what the lasso kept) and train / held-out error with and without the network."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(11, 3.2))
    names = list(rec["input_norms"])
    a.bar(range(len(names)), [rec["input_norms"][n] for n in names], color="tab:purple")
    a.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=7)
    a.set_title("input weight norms (group lasso)", fontsize=9)
    x = np.arange(2)
    keys = (("posterior", "posterior best"), ("analytic", "analytical, refined"), ("augmented", "augmented"))
    for k, (key, label) in enumerate(keys):
        b.bar(x + 0.27 * k, [rec["train_mse"][key], rec["heldout_mse"][key]], 0.27, label=label)
    b.set_xticks(x + 0.27, ["train", "held out"])
    b.set_yscale("log")
    b.set_title(f"{rec['window_frames']}-frame prediction MSE", fontsize=9)
    b.legend(fontsize=7)
    k = rec["loss_curve_stride"]
    c.plot(np.arange(len(rec["loss_curve_analytic"])) * k, rec["loss_curve_analytic"], color="tab:orange", label="analytical")
    c.plot(np.arange(len(rec["loss_curve"])) * k, rec["loss_curve"], color="tab:green", label="augmented")
    c.set_xlabel("Adam step", fontsize=8)
    c.set_yscale("log")
    c.set_title("training loss (1 = posterior best)", fontsize=9)
    c.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    write_bytes(path, buf.getvalue())
    plt.close(fig)
