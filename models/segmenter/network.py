"""Mask R-CNN with a MobileNetV3-Large FPN backbone, sized for CPU training from scratch.

He et al. 2017 (Mask R-CNN) as implemented by torchvision (the architecture Detectron2
implements). Changes from torchvision's defaults, all for a small CPU budget and small
images: BatchNorm instead of frozen BatchNorm (no pretrained statistics exist), FPN on
strides 8/16/32 with 96 channels, small anchors with elongated aspect ratios (poles),
a 256-wide box head and a 2-conv mask head. No pretrained weights are used anywhere.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn
from torchvision.models import mobilenet_v3_large
from torchvision.models.detection import MaskRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.backbone_utils import BackboneWithFPN
from torchvision.models.detection.faster_rcnn import TwoMLPHead, FastRCNNPredictor
from torchvision.models.detection.mask_rcnn import MaskRCNNPredictor
from torchvision.ops import MultiScaleRoIAlign
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool

from vid2sim.datasets.shapes import CLASSES

# Network input size (W, H): recordings are resized to this (aspect kept by the transform).
INPUT_SIZE = (320, 240)
FPN_CHANNELS = 96


def build_model(num_classes: int = len(CLASSES) + 1, in_channels: int = 3) -> MaskRCNN:
    """Untrained detector; ``num_classes`` includes background (label 0)."""
    features = mobilenet_v3_large(weights=None, norm_layer=nn.BatchNorm2d).features
    if in_channels != 3:
        c0 = features[0][0]
        features[0][0] = nn.Conv2d(in_channels, c0.out_channels, 3, 2, 1, bias=False)
    # Outputs of blocks 6 (stride 8, 40 ch), 12 (stride 16, 112 ch), 16 (stride 32, 960 ch).
    return_layers = {"6": "0", "12": "1", "16": "2"}
    backbone = BackboneWithFPN(features, return_layers, [40, 112, 960], FPN_CHANNELS,
                               extra_blocks=LastLevelMaxPool())
    ratios = (0.25, 0.5, 1.0, 2.0, 4.0)
    anchors = AnchorGenerator(((16, 24), (32, 48), (64, 96), (128, 192)), (ratios,) * 4)
    box_pool = MultiScaleRoIAlign(["0", "1", "2"], 7, 2)
    mask_pool = MultiScaleRoIAlign(["0", "1", "2"], 14, 2)
    rep = 256
    mask_head = nn.Sequential(OrderedDict([
        ("mask_fcn1", nn.Conv2d(FPN_CHANNELS, 128, 3, padding=1)), ("relu1", nn.ReLU(inplace=True)),
        ("mask_fcn2", nn.Conv2d(128, 128, 3, padding=1)), ("relu2", nn.ReLU(inplace=True)),
    ]))
    w, h = INPUT_SIZE
    model = MaskRCNN(
        backbone, num_classes=None, min_size=h, max_size=w,
        image_mean=[0.5] * in_channels, image_std=[0.5] * in_channels,
        rpn_anchor_generator=anchors,
        rpn_pre_nms_top_n_train=1000, rpn_post_nms_top_n_train=500,
        rpn_pre_nms_top_n_test=500, rpn_post_nms_top_n_test=200,
        rpn_batch_size_per_image=128,
        box_roi_pool=box_pool, box_head=TwoMLPHead(FPN_CHANNELS * 49, rep),
        box_predictor=FastRCNNPredictor(rep, num_classes),
        box_batch_size_per_image=64, box_detections_per_img=30,
        mask_roi_pool=mask_pool, mask_head=mask_head,
        mask_predictor=MaskRCNNPredictor(128, 128, num_classes),
    )
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _smoke() -> None:  # pragma: no cover - manual timing helper
    import time

    torch.set_num_threads(1)
    m = build_model()
    print("params", count_parameters(m))
    x = [torch.rand(3, 240, 320) for _ in range(2)]
    t = [{"boxes": torch.tensor([[10., 10, 100, 80]]), "labels": torch.tensor([1]),
          "masks": torch.zeros(1, 240, 320, dtype=torch.uint8)} for _ in range(2)]
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    m.train()
    for _ in range(3):
        t0 = time.time()
        loss = sum(m(x, t).values())
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("train iter", time.time() - t0)
    m.eval()
    with torch.no_grad():
        t0 = time.time()
        m(x[:1])
        print("infer", time.time() - t0)


if __name__ == "__main__":
    _smoke()
