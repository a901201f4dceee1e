"""A damped oscillator written in torch, the known-parameter problem of the inference tests."""
import torch

DT = 0.05                                                  # s, the integration step
TRUTH = torch.tensor([4.0, 0.3], dtype=torch.float64)      # stiffness (1/s^2), damping (1/s)


def oscillator(theta, x0, steps):
    """Semi-implicit Euler: theta (B, 2) = (k, b); x0 (B, 2) = (x, v) -> (B, steps, 2)."""
    k, b = theta[:, 0], theta[:, 1]
    x, v = x0[:, 0], x0[:, 1]
    out = [x0]
    for _ in range(steps - 1):
        v = v + DT * (-k * x - b * v)
        x = x + DT * v
        out.append(torch.stack([x, v], 1))
    return torch.stack(out, 1)
