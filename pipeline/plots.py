"""Plot helpers shared by the stages that draw (identify's figures, the report)."""
from __future__ import annotations

import numpy as np


def limit_bins(limits, n: int):
    """``n`` histogram bins over a parameter's whole ``limits`` (lo, hi), so a tight posterior
    shows as one bar at its place within them, never as a bar too thin to see; ``n`` itself
    (automatic bins) when the limits are one point."""
    lo, hi = (float(v) for v in limits)
    return np.linspace(lo, hi, n + 1) if hi > lo else n
