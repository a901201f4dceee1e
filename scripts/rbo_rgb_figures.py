"""A small PNG of an RGB-only run: the motion segmentation and four frames of the planar
tracks side by side, scaled down and reduced to a 64-colour palette (docs/figures/).

Usage: python scripts/rbo_rgb_figures.py RUN_DIR OUT_PNG [SCALE]   (SCALE: default 1/3)
"""
import sys

import cv2
import numpy as np
from PIL import Image

run, out = sys.argv[1], sys.argv[2]
scale = float(sys.argv[3]) if len(sys.argv) > 3 else 1 / 3
seg = cv2.imread(f"{run}/segmentation_overlay.png")
strip = cv2.imread(f"{run}/track_overlay.png")  # six frames, each as wide as seg
h, w = seg.shape[:2]
size = (int(round(w * scale)), int(round(h * scale)))
tiles = [seg] + [strip[:, k * w:(k + 1) * w] for k in (1, 2, 3, 4)]
img = np.concatenate([cv2.resize(t, size, interpolation=cv2.INTER_AREA) for t in tiles], 1)
Image.fromarray(cv2.cvtColor(img, cv2.COLOR_BGR2RGB)).quantize(64).save(out, optimize=True)
print(out, img.shape)
