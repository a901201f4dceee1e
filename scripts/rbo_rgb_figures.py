"""docs/figures/rbo_<video>.png from a run folder of an RBO video: the motion segmentation and
four frames of the planar tracks side by side, at a third of the size.

Usage: python scripts/rbo_rgb_figures.py RUN_DIR OUT_PNG
"""
import sys

import cv2
import numpy as np

run, out = sys.argv[1], sys.argv[2]
seg = cv2.imread(f"{run}/segmentation_overlay.png")
strip = cv2.imread(f"{run}/track_overlay.png")  # six frames, each as wide as seg
w = seg.shape[1]
tiles = [seg] + [strip[:, k * w:(k + 1) * w] for k in (1, 2, 3, 4)]
img = np.concatenate([cv2.resize(t, (w // 3, seg.shape[0] // 3), interpolation=cv2.INTER_AREA) for t in tiles], 1)
cv2.imwrite(out, img, [cv2.IMWRITE_PNG_COMPRESSION, 9])
print(out, img.shape)
