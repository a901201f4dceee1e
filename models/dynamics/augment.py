"""Neural augmentation (Heiden et al., NeuralSim, ICRA 2021; dissertation ch. 4.2).

A small MLP (ELU, ``layers`` hidden layers of ``hidden`` units; TDS uses 2 x 5) whose
output is added to a named quantity of the analytical simulator, with its inputs
chosen by name from other quantities. Insertion points:

- ``"joint_force"``: output (B, nv) added to the generalized force; inputs
  "q/<dof>" (revolute, prismatic, planar dofs) and "qd/<dof>" (``Model.dof_names``).
- ``"contact_friction"``: one output per contact point added to the friction force
  magnitude mu*f_n; inputs "contact/depth", "contact/rate", "contact/normal_force",
  "contact/slip", evaluated per point (the same network for all points).

Sparse group lasso (Eq. 4.10): one group per input = that input's row of outgoing
first-layer weights, penalised by its L2 norm (plus an optional plain L1 term), so
whole inputs switch off; L2 on all other weights. ``group_lasso_prox`` applies the
group soft-threshold after a gradient step (proximal gradient), which gives exact
zeros rather than small oscillating values.

Weights have a leading dimension 1 (shared by all particles) or B (one network per
particle).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .model import JOINT_NQ, JOINT_NV

POINTS = ("joint_force", "contact_friction")
CONTACT_INPUTS = ("contact/depth", "contact/rate", "contact/normal_force", "contact/slip")


@dataclass(frozen=True)
class NeuralAugmentation:
    point: str
    inputs: tuple[str, ...]
    weights: tuple[torch.Tensor, ...]   # W0 (Bn, in, h), b0 (Bn, h), ..., W_out (Bn, h, out), b_out (Bn, out)

    def parameters(self) -> list[torch.Tensor]:
        return list(self.weights)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, K, in) -> (B, K, out)."""
        W = self.weights
        h = x
        for layer in range(0, len(W), 2):
            h = h @ W[layer] + W[layer + 1][:, None, :]
            if layer + 2 < len(W):
                h = torch.nn.functional.elu(h)
        return h

    def select(self, rows) -> "NeuralAugmentation":
        if self.weights[0].shape[0] == 1:
            return self
        return dataclasses.replace(self, weights=tuple(w[rows] for w in self.weights))

    def to(self, dtype) -> "NeuralAugmentation":
        return dataclasses.replace(self, weights=tuple(w.to(dtype) for w in self.weights))

    def input_norms(self) -> torch.Tensor:
        """(in,) L2 norm of each input's first-layer weights (over particles too)."""
        # + tiny: the norm of a group the lasso has zeroed must not give a NaN gradient
        return (self.weights[0].pow(2).sum((0, 2)) + 1e-30).sqrt()


def add_augmentation(model, point: str, inputs, hidden: int = 5, layers: int = 2, seed: int = 0,
                     per_particle: bool = False, init_scale: float = 0.5):
    """A new Model with an MLP added at ``point``; weights are fresh leaf tensors (requires_grad).

    The output layer starts at zero so the augmented model starts as the analytical one.
    """
    if point not in POINTS:
        raise ValueError(f"unknown insertion point {point!r} (one of {POINTS})")
    inputs = tuple(inputs)
    valid = _valid_inputs(model, point)
    bad = [n for n in inputs if n not in valid]
    if bad:
        raise ValueError(f"inputs {bad} not available at {point!r}; valid: {sorted(valid)}")
    out = model.nv if point == "joint_force" else 1
    g = torch.Generator().manual_seed(seed)
    Bn = model.batch if per_particle else 1
    sizes = [len(inputs)] + [hidden] * layers + [out]
    weights = []
    for li, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = li == len(sizes) - 2
        W = torch.zeros(Bn, a, b, dtype=model.dtype) if last else \
            torch.randn(Bn, a, b, generator=g, dtype=model.dtype) * init_scale / a ** 0.5
        weights += [W.requires_grad_(), torch.zeros(Bn, b, dtype=model.dtype).requires_grad_()]
    net = NeuralAugmentation(point, inputs, tuple(weights))
    return model.replace(nets=tuple(model.nets) + (net,))


def _valid_inputs(model, point: str) -> set[str]:
    if point == "contact_friction":
        return set(CONTACT_INPUTS)
    dofs = model.dof_names
    mask = model.spring_mask
    return {f"q/{d}" for d, ok in zip(dofs, mask) if ok} | {f"qd/{d}" for d in dofs}


def joint_features(model, q: torch.Tensor, qd: torch.Tensor) -> dict:
    """Named (B,) joint quantities for "joint_force" networks."""
    feats = {}
    qi = 0
    vi = 0
    names = model.dof_names
    for t in model.joint_types:
        if t != "free":
            for k in range(JOINT_NV[t]):
                feats[f"q/{names[vi + k]}"] = q[:, qi + k]
        for k in range(JOINT_NV[t]):
            feats[f"qd/{names[vi + k]}"] = qd[:, vi + k]
        qi += JOINT_NQ[t]
        vi += JOINT_NV[t]
    return feats


def joint_force(model, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor | None:
    """Sum of all "joint_force" network outputs (B, nv), or None."""
    nets = [n for n in model.nets if n.point == "joint_force"]
    if not nets:
        return None
    feats = joint_features(model, q, qd)
    total = None
    for net in nets:
        x = torch.stack([feats[n] for n in net.inputs], -1)[:, None, :]
        y = net(x)[:, 0, :]
        total = y if total is None else total + y
    return total


def generalized_force(model, q: torch.Tensor, qd: torch.Tensor, control, spring_index, spring_mask) -> torch.Tensor:
    """tau (B, nv) of every force acting in joint space: damping, smoothed Coulomb friction,
    springs (``spring_index``: q index per dof, ``spring_mask``: 0 for free dofs), the
    control's ``tau`` and the ``joint_force`` augmentation. Shared by both algorithms."""
    m = model
    tau = -m.damping * qd - m.friction * torch.tanh(qd / m.friction_velocity) \
        - m.stiffness * (q[:, spring_index] - m.rest) * spring_mask
    if control is not None and control.tau is not None:
        tau = tau + control.tau
    if m.nets:
        extra = joint_force(m, q, qd)
        if extra is not None:
            tau = tau + extra
    return tau


def friction_function(model):
    """A callable feats -> (B, P) summing "contact_friction" networks, or None."""
    nets = [n for n in model.nets if n.point == "contact_friction"]
    if not nets:
        return None

    def f(feats):
        total = 0.0
        for net in nets:
            x = torch.stack([feats[n] for n in net.inputs], -1)
            total = total + net(x)[..., 0]
        return total
    return f


def augmentation_penalty(model, lasso: float = 1e-3, l2: float = 1e-4, l1: float = 0.0) -> torch.Tensor:
    """Sparse group lasso on first-layer weights (per input) + L2 on the other weights."""
    total = torch.zeros((), dtype=model.dtype)
    for net in model.nets:
        W0 = net.weights[0]
        if lasso:
            total = total + lasso * net.input_norms().sum()
        if l1:
            total = total + l1 * W0.abs().sum()
        total = total + l2 * sum(w.pow(2).sum() for w in net.weights[1:])
    return total


@torch.no_grad()
def group_lasso_prox(model, step) -> None:
    """In place: scale each input's first-layer weight row by max(0, 1 - step / norm).

    step: lr * lasso for plain gradient descent; a float or an (in,) tensor per input (for
    a preconditioned optimiser such as Adam, lr * lasso / the group's mean preconditioner).
    With several networks, a tensor step applies to each (they must have as many inputs).
    """
    for net in model.nets:
        W0 = net.weights[0]
        norms = W0.pow(2).sum((0, 2)).sqrt()
        scale = (1.0 - torch.as_tensor(step, dtype=W0.dtype) / norms.clamp(min=1e-30)).clamp(min=0.0)
        W0.mul_(scale[None, :, None])


def adam_group_lasso_step(net: NeuralAugmentation, optimizer, lr: float, lasso: float) -> torch.Tensor:
    """Per-input prox step for ``group_lasso_prox`` after an Adam step: lr * lasso / mean(sqrt(v_hat) + eps).

    Adam rescales every coordinate's step to about lr, so a fixed threshold either kills all
    groups or none; measuring the threshold in Adam's metric (diagonal preconditioner,
    averaged over the group) keeps the proximal step consistent with the update.
    """
    W0 = net.weights[0]
    st = optimizer.state.get(W0)
    if not st:
        return torch.full((W0.shape[1],), lr * lasso, dtype=W0.dtype)
    beta2 = optimizer.param_groups[0]["betas"][1]
    eps = optimizer.param_groups[0]["eps"]
    t = float(st["step"])
    v_hat = st["exp_avg_sq"] / (1 - beta2 ** t)
    return lr * lasso / (v_hat.sqrt() + eps).mean((0, 2))
