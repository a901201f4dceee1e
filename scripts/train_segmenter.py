"""Train the segmenter on a synthetic stream (primitives, or the randomised clutter stream).

The shipped checkpoint ``models/segmenter/segmenter.pt`` was made in four runs: two on the
primitive stream on the 2 shared cores of the development machine (the learning-rate
schedule follows wall-clock time, so the iteration count reached depends on the load;
curves in ``models/segmenter/train_curve.json``):

    OMP_NUM_THREADS=1 python scripts/train_segmenter.py --minutes 95 --batch 4 \
        --out runs/segmenter/segmenter.pt --log runs/segmenter/train_log.jsonl     # 2150 iterations
    OMP_NUM_THREADS=1 python scripts/train_segmenter.py --init runs/segmenter/segmenter.pt \
        --skip-samples 20000 --minutes 100 --batch 4 --lr 5e-4 --warmup 100 \
        --out runs/segmenter2/segmenter.pt --log runs/segmenter2/train_log.jsonl  # + 5717 iterations

The second is a warm restart (fresh AdamW and cosine schedule, new samples): the first
run's schedule had decayed to 2e-5 with the loss flat at 0.89; the restart brought it to
0.54 (mean of the last 50 iterations) and the held-out mean IoU from 0.56 to 0.78.

``--stream randomised`` trains on ``vid2sim.datasets.synthetic.clutter`` instead (clutter that
is background, tables, far framing, touching parts, RealSense- and Kinect-like sensors),
rendered by the analytic ray caster, so it needs no Open3D and suits a GPU machine whose
CPU cores render the samples. The last two runs fine-tuned the primitive-stream checkpoint
on it, on one H100 with 16 cores (docs/results.md, 2026-11-29); the second's output is the
shipped checkpoint:

    python scripts/train_segmenter.py --stream randomised --device cuda --init runs/segmenter2/segmenter.pt \
        --minutes 7.3 --batch 16 --lr 6e-4 --warmup 100 --workers 14 --threads 2 --save-every-s 60 \
        --state none --out runs/gpu1/segmenter.pt --log runs/gpu1/train_log.jsonl           # 2708 iterations
    python scripts/train_segmenter.py --stream randomised --device cuda --init runs/gpu1/segmenter.pt \
        --skip-samples 2000000 --minutes 4.2 --batch 16 --lr 3e-4 --warmup 50 --workers 14 --threads 2 \
        --save-every-s 60 --state none --out runs/gpu2/segmenter.pt --log runs/gpu2/train_log.jsonl  # + 1393

Samples ``0, 1, 2, ...`` of stream ``TRAIN_SEED`` (clean or realistic depth noise, 1/2
each) are rendered by ``--workers`` background processes (worker k of n takes samples
k, k + n, ...) while the main process trains, so training never sees the benchmark's
held-out stream. ``--resume`` continues a killed run from the
optimizer state saved beside the checkpoint.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from vid2sim.datasets.synthetic.primitives import TRAIN_SEED
from vid2sim.models.segmenter.model import load_checkpoint, to_input
from vid2sim.models.segmenter.network import INPUT_SIZE, build_model
from vid2sim.models.segmenter.normals import depth_to_normal_image
from vid2sim.models.segmenter.train import fit, make_target


class PrimitiveStream(IterableDataset):
    """Infinite stream of (input, target) from sample ``start`` on; with several loader
    workers, worker k of n takes samples start + k, start + k + n, ...

    stream: "primitives" (``primitives.make_sample``, Open3D rendering, clean or
    realistic 1/2 each) or "randomised" (``clutter.make_clutter_sample``: clutter,
    tables, far framing, touching parts, RealSense- and Kinect-like sensors; analytic
    rendering, no Open3D).
    """

    def __init__(self, start: int = 0, seed: int = TRAIN_SEED, size=INPUT_SIZE, noise: str = "mixed",
                 stream: str = "primitives"):
        self.start, self.seed, self.size, self.noise, self.stream = start, seed, size, noise, stream

    def __iter__(self):
        info = get_worker_info()
        k, n = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is not None:
            torch.set_num_threads(1)
        if self.stream == "randomised":
            from vid2sim.datasets.synthetic.clutter import make_clutter_sample as sample
        else:
            from vid2sim.datasets.synthetic.primitives import make_sample as sample
        i = self.start + k
        while True:
            try:
                s = sample(i, self.seed, self.size, self.noise)
            except (ValueError, FloatingPointError, np.linalg.LinAlgError) as e:  # a degenerate draw: skip it
                logging.warning("sample %d of stream %s skipped: %s", i, self.stream, e)
                i += n
                continue
            yield to_input(depth_to_normal_image(s.depth, s.K)), make_target(s.masks, s.labels)
            i += n


def _collate(items):
    return [x for x, _ in items], [t for _, t in items]


def batches(start: int, batch: int, workers: int, stream: str = "primitives"):
    loader = DataLoader(PrimitiveStream(start, stream=stream), batch_size=batch, num_workers=workers,
                        collate_fn=_collate, pin_memory=torch.cuda.is_available(),
                        prefetch_factor=4 if workers else None, persistent_workers=workers > 0)
    return iter(loader)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=100000)
    ap.add_argument("--minutes", type=float, default=None,
                    help="wall-clock budget: the cosine schedule follows time and training stops when it is spent")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--workers", type=int, default=1, help="sample-rendering processes")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the training process")
    ap.add_argument("--out", type=Path, default=Path("models/segmenter/segmenter.pt"))
    ap.add_argument("--log", type=Path, default=Path("runs/segmenter/train_log.jsonl"))
    ap.add_argument("--save-every", type=int, default=100)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init", type=Path, default=None,
                    help="start from this checkpoint's weights with a fresh optimizer and schedule "
                         "(a warm restart); samples continue after --skip-samples")
    ap.add_argument("--skip-samples", type=int, default=0,
                    help="first stream sample to train on (so a warm restart sees new samples)")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--stream", choices=("primitives", "randomised"), default="primitives",
                    help="training samples: primitives (Open3D) or randomised (clutter, sensors; no Open3D)")
    ap.add_argument("--device", default="cpu", help="where the network trains: cpu or cuda")
    ap.add_argument("--state", type=Path, default=None,
                    help="optimizer state file for --resume (default: beside --out, .state.pt); 'none' = not saved")
    ap.add_argument("--save-every-s", type=float, default=None, help="also save the checkpoint every this many seconds")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    state_path = args.out.with_suffix(".state.pt") if args.state is None else args.state
    if str(state_path) == "none":
        state_path = None
    start, opt_state = 0, None
    if args.resume and args.out.exists() and state_path is not None and state_path.exists():
        model, meta = load_checkpoint(args.out)
        st = torch.load(state_path, map_location="cpu", weights_only=True)
        start, opt_state = int(st["iter"]), st["optimizer"]
        logging.info("resuming at iteration %d", start)
    elif args.init is not None:
        model, _ = load_checkpoint(args.init)
        logging.info("warm restart from %s", args.init)
        if args.log.exists():
            args.log.unlink()
    else:
        model = build_model()
        if args.log.exists():
            args.log.unlink()
    meta = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv), "batch": args.batch,
            "stream": args.stream,
            "input": "normal map from depth (models/segmenter/normals.py)", "input_size": list(INPUT_SIZE)}
    fit(model, batches(args.skip_samples + start * args.batch, args.batch, args.workers, args.stream), args.iters,
        lr=args.lr, device=args.device, save_every_s=args.save_every_s,
        warmup=args.warmup,
        log_path=args.log, checkpoint=args.out, save_every=args.save_every, start_iter=start,
        meta=meta, optimizer_state=opt_state, state_path=state_path,
        time_budget_s=args.minutes * 60 if args.minutes else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
