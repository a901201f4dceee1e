"""Are the learned segmenter's capsule <-> cylinder errors rods whose ends cannot be seen?

    OMP_NUM_THREADS=1 python scripts/analyse_rod_errors.py --frames 200 --out runs/rod_errors.json

On the frames of ``scripts/bench_segment.py`` (held-out samples ``0..N-1``, its frame
generation, its learned segmenter and its Hungarian matching), for every ground-truth
capsule or cylinder matched at IoU >= 0.5, each of its two ends is judged visible or
hidden from the ground truth alone by ``datasets.synthetic.rod_ends.end_visibility``
(``--min-visible`` of the end's region seen in the image and the instance's mask; else
hidden by the ``border``, ``occluded`` or ``self``).

Prints a table of errors vs correct decisions by the number of visible ends (also split
by the rod's radius in pixels) and, per error with a visible end, ``shape_net``'s and the
class head's probabilities. It changes nothing and measures no new metric:
bench_segment's class accuracy stays the number of record.

With ``shape_net`` weights trained with ``--end-weight`` it also scores their end head on
each matched rod's two end crops (``end_head`` in the JSON; the shipped weights' end head
is untrained and is skipped). What it found is in docs/decisions.md ("Settings and their
measured reasons", segment: rods with hidden ends).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_segment import frame_depth, learned_detections, match_instances  # noqa: E402

from vid2sim.datasets.synthetic.primitives import CLASSES, HELD_OUT_SEED, make_sample  # noqa: E402
from vid2sim.datasets.synthetic.rod_ends import MIN_PIXELS, MIN_VISIBLE, end_visibility  # noqa: E402
from vid2sim.models.segmenter import refine  # noqa: E402
from vid2sim.models.segmenter.geometric import frame_geometry  # noqa: E402
from vid2sim.models.segmenter.model import Segmenter  # noqa: E402
from vid2sim.models.segmenter.shape_net import END_LABELS, end_labels, instance_inputs  # noqa: E402

RADIUS_BINS = ((0, 4), (4, 8), (8, 1000))  # rod radius in pixels: a 2-3 px end barely has a shape


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--noise", default="none", help="none | realistic (bench_segment's settings)")
    ap.add_argument("--min-pixels", type=int, default=MIN_PIXELS, help="solo-render pixels below which an end is self-hidden")
    ap.add_argument("--min-visible", type=float, default=MIN_VISIBLE, help="visible share of an end's region")
    ap.add_argument("--out", type=Path, default=None, help="per-instance records and the table as JSON")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    end_head = bool(refine._default_shape_net().meta.get("end_weight"))  # trained with end labels: score its end head
    records = _collect(args, end_head)
    table, by_radius, reasons, ends_table = _tables(records, end_head)
    _print_tables(records, table, by_radius, reasons, ends_table)
    summary = {"frames": args.frames, "noise": args.noise, "min_pixels": args.min_pixels,
               "min_visible": args.min_visible, "by_visible_ends": table, "end_reasons": reasons,
               "by_radius_px_and_visible_ends": by_radius, "end_head": ends_table}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**summary, "records": records}, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


def _recording_refine() -> dict[str, list]:
    """Record what refine's classifier sees ({"shape": [(mask, probabilities)], "net": [(mask,
    class scores)]}), without changing what it does."""
    seen: dict[str, list] = {"shape": [], "net": []}
    shape_probabilities, instance_features = refine.shape_probabilities, refine.instance_features

    def rec_shape(masks, *a, **k):
        p = shape_probabilities(masks, *a, **k)
        seen["shape"] += [(m, q) for m, q in zip(masks, p)]
        return p

    def rec_features(mask, cs, *a, **k):
        seen["net"].append((mask, np.asarray(cs, float)))
        return instance_features(mask, cs, *a, **k)

    refine.shape_probabilities, refine.instance_features = rec_shape, rec_features
    return seen


def _lookup(seen: dict[str, list], key: str, mask: np.ndarray):
    for m, q in seen[key]:
        if m is mask:
            return q
    return None


def _collect(args, end_head: bool) -> list[dict]:
    """One record per matched rod of the held-out frames: truth, decision, ends, scores."""
    seg = Segmenter()
    seen = _recording_refine()
    clf = refine._default_shape_net()
    rng = np.random.default_rng(0)
    records = []
    for k in range(args.frames):
        s = make_sample(k, HELD_OUT_SEED, noise="none")
        ends = end_visibility(s, args.min_pixels, args.min_visible)
        seen["shape"].clear()
        seen["net"].clear()
        depth = frame_depth(s, k, args.noise)
        dets, _ = learned_detections(seg, depth, s.K)
        M, match = match_instances(s.masks, dets)
        P, N = frame_geometry(depth, s.K) if ends and end_head else (None, None)
        for g, (e, radius_px) in ends.items():
            j = match[g]
            if j < 0 or M[g, j] < 0.5:
                continue
            d = dets[j]
            sp, net = _lookup(seen, "shape", d.mask), _lookup(seen, "net", d.mask)
            records.append({
                "frame": k, "instance": g, "truth": CLASSES[s.labels[g]], "decision": CLASSES[d.label],
                "iou": round(float(M[g, j]), 3), "radius_px": round(radius_px, 2), "ends": e, "visible_ends": sum(x["visible"] for x in e),
                "shape_net": None if sp is None else [round(float(x), 3) for x in sp],
                "head": [round(float(x), 3) for x in d.class_scores / d.class_scores.sum()],
                "net": None if net is None else [round(float(x), 3) for x in net]})
            x = instance_inputs(d.mask, P, N, depth, s.K, rng) if end_head else None
            if x is not None:  # what each end crop shows, by the truth and by shape_net's end head
                records[-1]["end_truth"] = [END_LABELS[i] if i >= 0 else None for i in end_labels(s, g, e, d.mask, N)]
                q = clf.end_probabilities(*(a[None] for a in x))[0]
                records[-1]["end_head"] = [END_LABELS[i] for i in q.argmax(1)]
        if (k + 1) % 20 == 0:
            logging.info("%d/%d frames, %d matched rods", k + 1, args.frames, len(records))
    return records


def _tables(records: list[dict], end_head: bool) -> tuple[dict, dict, dict, dict | None]:
    """Accuracy by visible ends, by radius and visible ends, end reasons, and the end head's confusion."""
    table = {}
    for nv in (0, 1, 2):
        rs = [r for r in records if r["visible_ends"] == nv]
        err = [r for r in rs if r["truth"] != r["decision"]]
        table[str(nv)] = {"rods": len(rs), "errors": len(err), "correct": len(rs) - len(err),
                          "accuracy": round(1 - len(err) / max(1, len(rs)), 4),
                          "errors_by_truth": {c: sum(r["truth"] == c for r in err) for c in ("capsule", "cylinder")}}
    by_radius = {}
    for lo, hi in RADIUS_BINS:
        for nv in (0, 1, 2):
            rs = [r for r in records if lo <= r["radius_px"] < hi and r["visible_ends"] == nv]
            err = sum(r["truth"] != r["decision"] for r in rs)
            by_radius[f"{lo}-{hi} px, {nv} visible"] = {"rods": len(rs), "errors": err,
                                                       "accuracy": round(1 - err / max(1, len(rs)), 4)}
    reasons: dict[str, dict[str, int]] = {}
    for r in records:
        for e in r["ends"]:
            cell = reasons.setdefault(e["reason"], {"ends_of_errors": 0, "ends_of_correct": 0})
            cell["ends_of_errors" if r["truth"] != r["decision"] else "ends_of_correct"] += 1
    ends_table = None
    if end_head:
        pairs = [(tr, hd) for r in records for tr, hd in zip(r.get("end_truth", ()), r.get("end_head", ())) if tr]
        ends_table = {"end_crops": len(pairs), "accuracy": round(float(np.mean([a == b for a, b in pairs])), 4) if pairs else None,
                      "confusion": {tr: {hd: sum(a == tr and b == hd for a, b in pairs) for hd in END_LABELS}
                                    for tr in END_LABELS}}
    return table, by_radius, reasons, ends_table


def _print_tables(records: list[dict], table: dict, by_radius: dict, reasons: dict, ends_table: dict | None) -> None:
    if ends_table is not None:
        print("shape_net's end head, truth -> predicted per end crop:", json.dumps(ends_table))
    print(f"{'visible ends':>12} {'rods':>5} {'errors':>6} {'correct':>7} {'accuracy':>8}  errors (capsule/cylinder truth)")
    for nv, t in table.items():
        print(f"{nv:>12} {t['rods']:>5} {t['errors']:>6} {t['correct']:>7} {t['accuracy']:>8.3f}  "
              f"{t['errors_by_truth']['capsule']}/{t['errors_by_truth']['cylinder']}")
    print("end reasons:", json.dumps(reasons))
    print("by radius (px at the rod's centre depth) and visible ends:")
    for key, t in by_radius.items():
        print(f"  {key:>22}: {t['errors']:3d} errors of {t['rods']:3d} rods (accuracy {t['accuracy']:.3f})")
    print("errors with a visible end (frame, instance, truth -> decision, ends, shape_net, head, net):")
    for r in records:
        if r["truth"] != r["decision"] and r["visible_ends"] > 0:
            print(f"  {r['frame']:3d} {r['instance']} {r['truth']:>8} -> {r['decision']:<8} "
                  f"{[e['reason'][:3] + ':' + str(e['fraction']) for e in r['ends']]} "
                  f"shape {r['shape_net']} head {r['head']} net {r['net']}")


if __name__ == "__main__":
    sys.exit(main())
