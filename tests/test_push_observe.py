"""The pushed linkage's floor friction on error-free tracks (scripts/bench_push_observe.py): the
PyBullet twin of the true model with the floor mu held and the masses, joint damping and tip mu
refitted (identify_floor.refine_push(..., floor=mu)) follows the true poses best at the true mu, but
only by hundredths of a millimetre at 20 % off."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))


@pytest.mark.slow
def test_the_floor_mu_profile_is_shallow_on_a_steady_push():
    """Seed 1, 90 frames (measured: 0.004 mm at the true 0.5, 0.045 mm at 0.4, 0.39 mm at 0.1): the
    minimum is at the truth (under 0.02 mm), 20 % off costs under 0.1 mm (tracked poses are off by
    about 1 mm), 80 % off over 0.2 mm; the tip mu is refitted within 0.05 of its truth where the floor's
    is within 20 %."""
    from bench_push_observe import profile

    out = profile("pushed", 1, 90, [0.1, 0.4, 0.5], 0.1)
    rms = {mu: r for mu, r, _ in out["profile"]}
    assert out["best_mu"] == 0.5 and rms[0.5] < 0.02
    assert rms[0.4] < 0.1 and rms[0.1] > 0.2
    assert all(abs(tip - 0.3) < 0.05 for mu, _, tip in out["profile"] if mu >= 0.4)   # the tip mu refitted near its truth
