"""Instance segmentation of mechanism parts from depth (Heiden et al. 2022, §4.3.3.1).

- ``normals``: depth -> normal map by finite differences in pixel space (the network's
  input, shared by training and the segment stage); RGB-only pseudo-depth.
- ``network``: Mask R-CNN (torchvision) with a MobileNetV3-Large FPN backbone, small
  enough to train from scratch on a CPU; no pretrained weights.
- ``model``: checkpoint I/O (half precision, ``segmenter.pt`` beside this file) and
  ``Segmenter.predict``.
- ``train``: the training loop and ``train_segmenter`` (fine-tuning on a user's labelled
  frames; ``vid2sim train-segmenter --images DIR --masks DIR``).
- ``geometric``: the training-free baseline (discontinuities, normal clustering,
  primitive fitting).
- ``refine``: the learned detections as the segment stage uses them, checked and
  completed with the depth (snapping, depth-confirmed low-score detections, class by
  ``class_head``: network scores + ``shape_net`` + geometric cues, fitted on the training
  stream).
- ``reconcile``: a learned mask over several parts split into the geometric
  segmenter's parts where the depth is unambiguous about them.
- ``shape_net``: a small CNN on full-resolution end crops and a whole crop of an
  instance's depth and normals plus rod-fit cues (capsule vs cylinder), trained on
  training-stream ground-truth instances, then fine-tuned on the refined detector's.

The shipped checkpoint is reproduced by ``scripts/train_segmenter.py`` (command in its
docstring) and measured by ``scripts/bench_segment.py``.
"""
