"""Benchmark segment, track and articulate over scene-randomised synthetic recordings.

For every mechanism and seed 0..N-1 (a cell): ``vid2sim synth NAME --scene random
--seed S`` writes a recording whose size, framing, background, distractors, colours,
light, sensor and renderer the seed draws (datasets/synthetic/scene.py), then the
stages run one by one as subprocesses (``vid2sim --threads 1 STAGE REC --out RUN``)
until one fails. Per cell it records:

- per stage: exit code, seconds, whether stderr holds a Python traceback
  ("Traceback (most recent call last)"), and the error's last line. A clean one-line
  error (exit code 2) is a failure but not a traceback;
- segmentation: right body count, right shapes (sorted ``shape_names`` of
  segmentation.npz against truth.json bodies' shapes), right masks (each over a truth body
  of its shape's geometry in the segmentation frame's truth_masks: a distractor taken for
  a leg has the right shape names and the wrong mask); per library part (``seg_parts``, by truth
  body name) its mask IoU against its truth body's mask, strictly by name (``iou``) and with
  parts of identical library geometry matched one-to-one by IoU (``iou_alike``: a chain of
  identical links cannot be named from shapes.json alone), and what limits it (width in
  pixels, the IoU of a mask one pixel off, the share of its pixels without depth);
  ``seg_parts_ok`` / ``seg_parts_ok_alike``: every part's IoU >= ``PART_IOU`` (0.8, issue 28),
  ``seg_parts_ok_resolvable``: every part whose one-pixel-off mask reaches 0.8 does;
- tracking: median over matched bodies and frames of the position error of poses.npz
  against truth_poses.npz (bodies matched one-to-one by least mean distance, so the
  error does not depend on naming), divided by the camera's distance to the mechanism
  (truth.json ``scene.distance_m``); truth bodies left without a track are counted; the
  worst-tracked body (``track_worst_body``, the truth's name) and its own median error
  (``track_err_worst_m``, ``track_err_worst_rel``): one part off in most frames hides in the
  median over all parts;
- topology: ``models.joints.evaluate.compare`` of articulation.json against the tree
  the clip shows must give both ``tree_ok`` and ``types_ok`` (same parent/child tree,
  same joint types; the run's body names come from shape names, and a name the truth
  does not know is a wrong topology; bodies whose shapes have the same geometry are
  named after the truth body they track, ``same_shape_names``). The tree the clip shows is truth.json's, except
  that a joint whose child moves relative to its parent by less than ``STILL_SHARE``
  (0.3 %, the tracking target) of the camera distance over the run's frames is
  ``fixed``: a part at rest shows no joint (the pushed linkage before the pusher
  reaches it); a still joint reported as its true type counts as right as well (the
  pushed linkage's root is planar by its known pusher before it moves). The row's
  ``joints_still`` names those joints.

A mechanism driven by a pusher (the pushed linkage) gets a clip of at least ``PUSH_FRAMES``
(90) frames whatever ``--frames`` says (``clip_frames``; the row's ``clip_frames``): its pusher
meets it 1.1-1.8 s in, so a shorter clip would show three boxes at rest.

Cells go to ``OUT/cells.jsonl`` as they finish (a rerun skips cells already there,
so a long run resumes); recordings and runs of cells where every stage succeeded are
deleted unless ``--keep``. Progress goes to stderr; the last stdout line is JSON:

    {"cells": N, "segment_ok": f, "track_ok": f, "articulate_ok": f, "seg_count_ok": f,
     "seg_shapes_ok": f, "seg_masks_ok": f, "parts_ok": f, "parts_ok_alike": f, "parts_ok_resolvable": f,
     "track_err_rel_median": x, "topology_ok": f, "tracebacks": n,
     "by_factor": {factor: {value: {"cells", "segment_ok", "seg_masks_ok", "parts_ok", "parts_ok_alike",
                                    "parts_ok_resolvable", "track_ok", "topology_ok", "tracebacks",
                                    "track_err_rel_median"}}}}

    python scripts/bench_scenes.py --seeds 3 --mechanisms cartpole cabinet --frames 30 --out /tmp/bench_scenes

``--reuse DIR`` (a folder written with ``--keep``) takes each cell's recording and the
artifacts of the stages before ``--from`` (default ``articulate``) from DIR and runs only
the stages from there on: the same scenes, segmentation and tracks, scored again after a
change to a later stage. ``--seeds 4-7`` runs seeds 4..7 (held out from seeds 0-3).

    python scripts/bench_scenes.py --seeds 0-3 --noise none --reuse /tmp/bench_keep --out /tmp/bench_rescore
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
from scipy.optimize import linear_sum_assignment

from vid2sim.datasets.recording import open_recording
from vid2sim.datasets.synthetic import MECHANISMS, mechanism
from vid2sim.datasets.shapes import load_shapes
from vid2sim.models import geometry as se3
from vid2sim.models.joints.evaluate import compare

STAGES = ("segment", "track", "articulate")
TRACEBACK = "Traceback (most recent call last)"
STILL_SHARE = 0.003  # a truth joint moving less than this share of the camera distance is scored as fixed
# frames a clip of a pushed mechanism needs at least: its pusher meets the linkage 1.1-1.8 s in (frames 32-53
# at 30 fps), so a 40-frame clip would show three boxes at rest; 90 frames show 1-2 s of the push
PUSH_FRAMES = 90
PART_IOU = 0.8  # issue 28: every library part's mask IoU against its truth body's mask at least this
PART_KEYS = ("parts_ok", "parts_ok_alike", "parts_ok_resolvable")  # summary keys, each the share of cells
FACTORS = ("renderer", "framing", "background", "sensor", "size", "distractors", "mechanism")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "vid2sim.pipeline.cli", *args]


def _run(cmd: list[str], timeout: float) -> dict:
    """Run ``cmd``; exit code, seconds, traceback flag and the error's last line."""
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, err = None, (e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")) + "\ntimeout"
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    msg = next((ln for ln in reversed(lines) if ln.startswith("error:")), lines[-1] if lines else "")
    return {"rc": rc, "seconds": round(time.time() - t0, 2), "traceback": TRACEBACK in err,
            "error": "" if rc == 0 else msg[:500]}


def _segmentation_scores(run: Path, truth: dict, rec: Path | None = None) -> dict:
    """seg_count_ok / seg_shapes_ok: the number and sorted shape names of segmentation.npz's
    parts against truth.json's bodies. With ``rec``: seg_masks_ok, whether under each mask
    most pixels belong to a truth body whose library shape has the mask's shape's geometry
    (the segmentation frame's truth_masks; two parts of the same geometry may swap names),
    and seg_masks_wrong, "shape<-what its mask covers" for each mask that fails it."""
    z = np.load(run / "segmentation.npz")
    found = sorted(str(s) for s in z["shape_names"])
    want = sorted(b["shape"] for b in truth["bodies"])
    out = {"seg_count_ok": len(found) == len(want), "seg_shapes_ok": found == want, "seg_shapes": found}
    if rec is None or "masks" not in z.files or "frame" not in z.files:
        return out
    tm = cv2.imread(str(rec / "truth_masks" / f"{int(z['frame']):06d}.png"), cv2.IMREAD_UNCHANGED)
    if tm is None:
        return out
    geometry = {n: (s.type, s.size, s.radius, s.length) for n, s in load_shapes(rec / "shapes.json").items()}
    wrong = []
    for m, name in zip(z["masks"], z["shape_names"]):
        ids, cnt = np.unique(tm[m > 0], return_counts=True)
        top = int(ids[np.argmax(cnt)]) if len(ids) else 0
        body = truth["bodies"][top - 1]["shape"] if 0 < top <= len(truth["bodies"]) else None
        if body is None or geometry.get(body) != geometry.get(str(name)):
            wrong.append(f"{name}<-{body or {0: 'background', 254: 'distractor'}.get(top, f'id {top}')}")
    out = dict(out, seg_masks_ok=out["seg_shapes_ok"] and not wrong, seg_masks_wrong=wrong)
    depth = open_recording(rec).depth(int(z["frame"]))
    return dict(out, **part_mask_scores(z["masks"], [str(n) for n in z["shape_names"]], tm, truth,
                                        load_shapes(rec / "shapes.json"), depth))


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    u = np.count_nonzero(a | b)
    return float(np.count_nonzero(a & b) / u) if u else 0.0


def _resolution(truth_mask: np.ndarray, depth: np.ndarray | None) -> dict:
    """What limits a mask of one truth body (truth_mask: (H, W) bool): width_px, its widest
    inscribed disc's diameter in pixels (2 d - 1 for the largest distance d to a pixel outside);
    iou_eroded_1px / iou_dilated_1px, the IoU of the truth with itself one pixel smaller / larger
    on the whole boundary (4-neighbour erosion / dilation), what a mask one pixel off reaches;
    no_depth, the share of its pixels whose depth is 0 (a hole) in ``depth`` (H, W)."""
    m = truth_mask.astype(np.uint8)
    cross = cv2.getStructuringElement(cv2.MORPH_CROSS, (3, 3))
    n = max(int(m.sum()), 1)
    d = cv2.distanceTransform(np.pad(m, 1), cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
    return {"pixels": int(m.sum()), "width_px": round(max(2.0 * float(d.max()) - 1.0, 0.0), 2),
            "iou_eroded_1px": round(float(cv2.erode(m, cross).sum()) / n, 4),
            "iou_dilated_1px": round(n / max(float(cv2.dilate(m, cross).sum()), 1.0), 4),
            "no_depth": None if depth is None or depth.shape != m.shape
            else round(float(np.count_nonzero(m.astype(bool) & (depth == 0))) / n, 4)}


def part_mask_scores(masks: np.ndarray, shape_names: list[str], tm: np.ndarray, truth: dict, shapes: dict,
                     depth: np.ndarray | None = None) -> dict:
    """Each library part's mask IoU at the segmentation frame (issue 28: IoU >= ``PART_IOU`` for every
    part, with the right label). masks: (K, H, W) segmentation.npz's masks, shape_names: their K
    library names; tm: (H, W) truth_masks (truth body k is id k + 1); shapes: the library by name.
    seg_parts: truth body name -> {iou: the run's masks named with its shape against its truth mask
    (None for a part hidden in that frame, which the criterion then leaves out),
    iou_alike: the same after parts of identical library geometry are matched one-to-one by IoU
    (linear_sum_assignment; a chain of identical links cannot be named from shapes.json alone), and
    ``_resolution``'s numbers}. seg_parts_ok / seg_parts_ok_alike: every part reaches PART_IOU;
    seg_parts_ok_resolvable: every part whose one-pixel-off mask still reaches PART_IOU does
    (min of iou_eroded_1px and iou_dilated_1px), by iou_alike."""
    def geometry(name: str):
        sh = shapes.get(name)
        return name if sh is None or sh.type == "mesh" else (sh.type, sh.size, sh.radius, sh.length)

    bodies = truth["bodies"]
    truth_m = [tm == k + 1 for k in range(len(bodies))]
    run_m = [np.asarray(m) > 0 for m in masks]
    parts = {}
    for k, b in enumerate(bodies):
        mine = [m for m, n in zip(run_m, shape_names) if n == b["shape"]]
        strict = (_iou(np.logical_or.reduce(mine), truth_m[k]) if mine else 0.0) if truth_m[k].any() else None
        parts[b["name"]] = {"iou": strict and round(strict, 4), "iou_alike": strict and round(strict, 4),
                            **_resolution(truth_m[k], depth)}
    for g in {geometry(b["shape"]) for b in bodies}:
        theirs = [k for k, b in enumerate(bodies) if geometry(b["shape"]) == g and truth_m[k].any()]
        mine = [i for i, n in enumerate(shape_names) if geometry(n) == g]
        if len(theirs) < 2 or not mine:
            continue
        iou = np.array([[_iou(run_m[i], truth_m[k]) for k in theirs] for i in mine])
        for k in theirs:
            parts[bodies[k]["name"]]["iou_alike"] = 0.0
        for r, c in zip(*linear_sum_assignment(-iou)):
            parts[bodies[theirs[c]]["name"]]["iou_alike"] = round(float(iou[r, c]), 4)
    seen = {n: p for n, p in parts.items() if p["iou"] is not None}
    return {"seg_parts": parts,
            "seg_parts_ok": all(p["iou"] >= PART_IOU for p in seen.values()),
            "seg_parts_ok_alike": all(p["iou_alike"] >= PART_IOU for p in seen.values()),
            "seg_parts_ok_resolvable": all(p["iou_alike"] >= PART_IOU for p in seen.values()
                                           if min(p["iou_eroded_1px"], p["iou_dilated_1px"]) >= PART_IOU)}


def _tracking_scores(rec: Path, run: Path, truth: dict) -> dict:
    """Position error of poses.npz against the truth (one-to-one matched bodies), absolute and per metre of
    distance: the median over bodies and frames, and the largest of the bodies' own medians (which truth body)."""
    z = np.load(run / "poses.npz")
    P = z["world_from_body"][..., :3, 3]  # (T, M', 3)
    Q = np.load(rec / "truth_poses.npz")["world_from_body"][..., :3, 3]  # (T, M, 3)
    T = min(len(P), len(Q))
    P, Q = P[:T], Q[:T]
    cost = np.linalg.norm(P[:, :, None] - Q[:, None, :], axis=-1).mean(0)  # (M', M)
    r, c = linear_sum_assignment(cost)
    err = np.linalg.norm(P[:, r] - Q[:, c], axis=-1)
    med = float(np.median(err)) if err.size else None
    per_body = np.median(err, axis=0) if err.size else np.zeros(0)
    worst = int(np.argmax(per_body)) if per_body.size else None
    dist = truth["scene"]["distance_m"]
    lost = float(np.asarray(z["lost"]).mean()) if "lost" in z else None
    return {"track_err_m": med, "track_err_rel": med / dist if med is not None else None,
            "track_err_worst_m": float(per_body[worst]) if worst is not None else None,
            "track_err_worst_rel": float(per_body[worst]) / dist if worst is not None else None,
            "track_worst_body": truth["bodies"][int(c[worst])]["name"] if worst is not None else None,
            "bodies_missing": int(Q.shape[1] - len(c)), "lost_share": lost}


def joint_motion_m(truth: dict, world_from_body: np.ndarray, shapes: dict) -> dict[str, float]:
    """Truth joint name -> how far its child moves relative to its parent over the frames
    (m): max over frames of the child origin's displacement plus its rotation angle times
    the child shape's bounding radius (half its extents' diagonal). world_from_body: (T, M,
    4, 4) true poses, bodies in truth.json order; shapes: recording library by name."""
    names = [b["name"] for b in truth["bodies"]]
    W = np.asarray(world_from_body, float)
    out = {}
    for j in truth["joints"]:
        c = names.index(j["child"])
        X = W[:, c] if j["parent"] == "world" else se3.inv(W[:, names.index(j["parent"])]) @ W[:, c]
        r = 0.5 * float(np.linalg.norm(shapes[truth["bodies"][c]["shape"]].extents()))
        turn = se3.rotation_angle(np.swapaxes(X[:1, :3, :3], 1, 2) @ X[:, :3, :3])
        out[j["name"]] = float(np.max(np.linalg.norm(X[:, :3, 3] - X[0, :3, 3], axis=1) + turn * r))
    return out


def observable_truth(truth: dict, motion: dict[str, float]) -> dict:
    """The tree the clip can show: truth.json's joints, each one whose child moves relative
    to its parent by less than ``STILL_SHARE`` of the camera distance (``joint_motion_m``)
    turned ``fixed`` (a part that never moves in the clip is no evidence of a joint: the
    pushed linkage before the pusher reaches it is three boxes at rest on the floor)."""
    still = STILL_SHARE * truth["scene"]["distance_m"]
    joints = [dict(j, type="fixed") if j["type"] != "fixed" and motion[j["name"]] < still else j
              for j in truth["joints"]]
    return dict(truth, joints=joints)


def with_true_types(want: dict, truth: dict, found: list[dict]) -> dict:
    """``want`` (``observable_truth``) with each joint it turned fixed given back its true type
    where the run (``found``: articulation.json's joints, truth names) has a joint of that type
    between the same rigid groups (bodies welded by the run's fixed joints): a still joint
    reported as what it is is right too (the pushed linkage's root is planar by its known
    pusher before it moves, and may hang from any of the welded links)."""
    group: dict[str, str] = {}

    def root(b: str) -> str:
        while group.get(b, b) != b:
            b = group[b]
        return b

    for j in found:
        if j["type"] == "fixed" and j["parent"] != "world":
            group[root(j["child"])] = root(j["parent"])
    run_type = {(root(j["parent"]), root(j["child"])): j["type"] for j in found}
    return dict(want, joints=[dict(w, type=t["type"]) if w["type"] != t["type"]
                              and run_type.get((root(t["parent"]), root(t["child"]))) == t["type"] else w
                              for w, t in zip(want["joints"], truth["joints"])])


def same_shape_names(poses, world_from_body: np.ndarray, truth: dict, shapes: dict) -> dict[str, str]:
    """Run body name -> the truth body it tracks, among bodies whose library shapes have the same
    geometry. Such parts look alike (double_pendulum's links: two capsules 0.35 m x 0.025 m,
    listed as 'link1' and 'link2'), so which of their names a run gives which part is
    arbitrary: they are matched one-to-one by least mean distance of their tracked positions
    (poses: poses.npz's arrays) to the true ones (world_from_body: (T, M, 4, 4), truth.json's
    order). Other bodies keep their names. shapes: the recording's library by name."""
    def geometry(name: str):
        sh = shapes.get(name)
        return name if sh is None or sh.type == "mesh" else (sh.type, sh.size, sh.radius, sh.length)

    run_names = [str(n) for n in poses["body_names"]]
    run_geom = [geometry(str(s)) for s in poses["shape_names"]]
    P = poses["world_from_body"][:len(world_from_body), :, :3, 3]
    Q = world_from_body[:len(P), :, :3, 3]
    out = {}
    for g in set(run_geom):
        mine = [i for i, x in enumerate(run_geom) if x == g]
        theirs = [k for k, b in enumerate(truth["bodies"]) if geometry(b["shape"]) == g]
        if len(theirs) < 2:
            continue
        cost = np.linalg.norm(P[:, mine][:, :, None] - Q[:, theirs][:, None, :], axis=-1).mean(0)
        for r, c in zip(*linear_sum_assignment(cost)):
            out[run_names[mine[r]]] = truth["bodies"][theirs[c]]["name"]
    return out


def _topology_scores(rec: Path, run: Path, truth: dict) -> dict:
    """topology_ok: same tree (rigid groups, one joint per truth joint) with the same joint types
    as the tree the clip shows (``observable_truth``; a still joint may also be reported as its
    true type); joints_found: the run's [parent, child,
    type] triples, for reading failures; joints_still: truth joints scored as fixed."""
    art = json.loads((run / "articulation.json").read_text())
    poses = np.load(run / "poses.npz")
    W = np.load(rec / "truth_poses.npz")["world_from_body"][:len(poses["world_from_body"])]  # the frames the run saw
    shapes = load_shapes(rec / "shapes.json")
    names = same_shape_names(poses, W, truth, shapes)
    art["joints"] = [dict(j, parent=names.get(j["parent"], j["parent"]), child=names.get(j["child"], j["child"]))
                     for j in art["joints"]]
    found = sorted([j["parent"], j["child"], j["type"]] for j in art["joints"])
    want = observable_truth(truth, joint_motion_m(truth, W, shapes))
    still = [j["name"] for j, w in zip(truth["joints"], want["joints"]) if w["type"] != j["type"]]
    want = with_true_types(want, truth, art["joints"])
    row = {"topology_ok": False, "tree_ok": False, "types_ok": False, "joints_found": found, "joints_still": still}
    try:
        c = compare(SimpleNamespace(joints=art["joints"]), want)
    except (KeyError, ValueError):  # a body the truth does not know
        return row
    return dict(row, topology_ok=bool(c["tree_ok"] and c["types_ok"]), tree_ok=bool(c["tree_ok"]),
                types_ok=bool(c["types_ok"]))


def _reused(mech: str, seed: int, args, cell: Path, row: dict) -> tuple[Path, list[str]] | None:
    """With ``--reuse``: the kept recording of this cell in that folder, its run's artifacts of the
    stages before ``--from`` copied into ``cell/run`` (the later stages' outputs and cache records
    left out) and their rows copied into ``row``; -> (recording, stages still to run). None when
    that folder has no row for the cell, or the cell's files were not kept. A cell that stopped
    before ``--from`` is copied as it is (nothing left to run). The row's ``clip_frames`` is the
    kept recording's frame count (a pushed cell kept before ``PUSH_FRAMES`` has 40)."""
    src_rows = _done(args.reuse / "cells.jsonl", args)
    src, src_cell = src_rows.get((mech, seed)), args.reuse / "cells" / f"{mech}_s{seed}"
    if src is None:
        return None
    first = STAGES.index(args.start)
    earlier = STAGES[:first]
    row.update({k: v for k, v in src.items() if k not in ("stages", "topology_ok", "tree_ok", "types_ok",
                                                           "joints_found", "tracebacks")
                and not (first == 0 and k.startswith("seg_"))})
    row["stages"] = {s: src["stages"][s] for s in earlier if s in src["stages"]}
    kept = len(list((src_cell / "rec" / "depth").glob("*.png")))
    if kept and kept != row["clip_frames"]:  # a recording kept before clip_frames: its own length
        row["clip_frames"] = kept
    if not all(row["stages"].get(s, {}).get("rc") == 0 for s in earlier):
        return src_cell / "rec", []
    if not (src_cell / "rec" / "truth.json").exists():
        return None
    later = {f for spec in _stage_specs() if spec.name in STAGES[first:] for f in spec.outputs}
    shutil.copytree(src_cell / "run", cell / "run", ignore=lambda d, names: [
        n for n in names if n in later or (Path(d).name == ".cache" and n[:-5] in STAGES[first:])])
    return src_cell / "rec", list(STAGES[first:])


def _stage_specs():
    from vid2sim.pipeline.run import STAGES as SPECS
    return SPECS


def clip_frames(mech: str, frames: int) -> int:
    """Frames of the recording made for ``mech``: ``frames``, or ``PUSH_FRAMES`` where that is more and
    a pusher drives the mechanism (``Mechanism.tip_factory``): the clip must show the push."""
    return max(frames, PUSH_FRAMES) if mechanism(mech).tip_factory is not None else frames


def run_cell(mech: str, seed: int, args) -> dict:
    """Make one random-scene recording (or, with ``--reuse``, take it and the earlier stages'
    artifacts from that folder), run the stages, score them."""
    cell = Path(args.out) / "cells" / f"{mech}_s{seed}"
    rec, run = cell / "rec", cell / "run"
    shutil.rmtree(cell, ignore_errors=True)
    cell.mkdir(parents=True)
    row = {"mechanism": mech, "seed": seed, "frames": args.frames, "clip_frames": clip_frames(mech, args.frames),
           "noise": args.noise, "stages": {},
           "seg_count_ok": False, "seg_shapes_ok": False, "track_err_m": None, "track_err_rel": None,
           "topology_ok": False}
    reused = _reused(mech, seed, args, cell, row) if args.reuse else None
    if reused is not None:
        rec, stages = reused
        if "seg_parts" not in row and stages and stages[0] != "segment" and (run / "segmentation.npz").exists():
            row.update(_segmentation_scores(run, json.loads((rec / "truth.json").read_text()), rec))  # kept before
    else:
        synth = _run(_cli("synth", mech, "--out", str(rec), "--scene", "random", "--seed", str(seed),
                          "--frames", str(row["clip_frames"]), "--noise", args.noise), args.timeout)
        row["synth"] = synth
        if synth["rc"] != 0:
            row["tracebacks"] = int(synth["traceback"])
            return row
        stages = list(STAGES)
    stages = [st for st in stages if STAGES.index(st) <= STAGES.index(args.to)]
    truth = json.loads((rec / "truth.json").read_text())
    row["scene"] = truth["scene"]
    for stage in stages:
        extra = ["--checkpoint", str(args.segment_checkpoint)] if stage == "segment" and args.segment_checkpoint else []
        extra += [a for kv in args.set if kv.split(".", 1)[0] == stage for a in ("--set", kv)]
        res = _run(_cli("--threads", "1", stage, str(rec), "--out", str(run), *extra), args.timeout)
        row["stages"][stage] = res
        if res["rc"] != 0:
            break
        try:
            if stage == "segment":
                row.update(_segmentation_scores(run, truth, rec))
            elif stage == "track":
                row.update(_tracking_scores(rec, run, truth))
            else:
                row.update(_topology_scores(rec, run, truth))
        except Exception as e:  # the artifact is unreadable: the bench says so, it does not stop
            res["score_error"] = f"{type(e).__name__}: {e}"
    row["tracebacks"] = sum(int(s["traceback"]) for s in row["stages"].values())
    if not args.keep and all(row["stages"].get(s, {}).get("rc") == 0 for s in STAGES[:STAGES.index(args.to) + 1]):
        shutil.rmtree(cell, ignore_errors=True)
    return row


def _ok(row: dict, stage: str) -> bool:
    return row["stages"].get(stage, {}).get("rc") == 0


def _factor_value(row: dict, f: str) -> str:
    sc = row.get("scene", {})
    if f == "mechanism":
        return row["mechanism"]
    if f == "size":
        return "x".join(map(str, sc["size"])) if "size" in sc else "?"
    if f == "distractors":
        return "none" if sc.get("distractors", 0) == 0 else "some"
    return str(sc.get(f, "?"))


def _median(x: list) -> float | None:
    x = [v for v in x if v is not None]
    return float(np.median(x)) if x else None


def summarise(rows: list[dict]) -> dict:
    """The benchmark's summary of cell rows (see the module docstring)."""
    def stats(rs: list[dict]) -> dict:
        n = max(len(rs), 1)
        return {"cells": len(rs), "segment_ok": sum(_ok(r, "segment") for r in rs) / n,
                "seg_masks_ok": sum(bool(r.get("seg_masks_ok")) for r in rs) / n,
                **{k: sum(bool(r.get(f"seg_{k}")) for r in rs) / n for k in PART_KEYS},
                "track_ok": sum(_ok(r, "track") for r in rs) / n,
                "topology_ok": sum(bool(r["topology_ok"]) for r in rs) / n,
                "tracebacks": sum(r.get("tracebacks", 0) for r in rs),
                "track_err_rel_median": _median([r["track_err_rel"] for r in rs])}

    out = stats(rows)
    n = max(len(rows), 1)
    out.update(articulate_ok=sum(_ok(r, "articulate") for r in rows) / n,
               seg_count_ok=sum(bool(r["seg_count_ok"]) for r in rows) / n,
               seg_shapes_ok=sum(bool(r["seg_shapes_ok"]) for r in rows) / n,
               seg_masks_ok=sum(bool(r.get("seg_masks_ok")) for r in rows) / n,
               synth_failed=sum(r.get("synth", {}).get("rc") != 0 for r in rows))
    by: dict[str, dict] = {}
    for f in FACTORS:
        groups: dict[str, list] = {}
        for r in rows:
            groups.setdefault(_factor_value(r, f), []).append(r)
        by[f] = {v: stats(rs) for v, rs in sorted(groups.items())}
    out["by_factor"] = by
    return out


def _done(path: Path, args) -> dict[tuple, dict]:
    rows = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("frames") == args.frames and r.get("noise") == args.noise:
                rows[(r["mechanism"], r["seed"])] = r
    return rows


def _seed_range(text: str) -> range:
    """``"N"`` -> seeds 0..N-1; ``"A-B"`` -> seeds A..B."""
    a, sep, b = text.partition("-")
    try:
        return range(int(a), int(b) + 1) if sep else range(int(a))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a count N nor a range A-B") from None


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=_seed_range, default=range(40),
                    help="N: seeds 0..N-1 per mechanism; A-B: seeds A..B (e.g. 4-7, held out from 0-3)")
    ap.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS),
                    help="names, space- or comma-separated (default: every synthetic mechanism)")
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--noise", choices=("none", "realistic", "random"), default="random",
                    help="sensor: none = clean, realistic = RealSense-like, random = each scene's own pick")
    ap.add_argument("--jobs", type=int, default=1, help="cells run at once")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_scenes"), help="folder of cells.jsonl and cell folders")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per command before it counts as failed")
    ap.add_argument("--reuse", type=Path, default=None,
                    help="folder of an earlier --keep run: take its recordings and the artifacts of the stages "
                         "before --from instead of making them again")
    ap.add_argument("--from", dest="start", choices=STAGES, default="articulate",
                    help="with --reuse: the first stage to run again")
    ap.add_argument("--keep", action="store_true", help="keep every cell's recording and run (default: failed ones only)")
    ap.add_argument("--to", choices=STAGES, default=STAGES[-1], help="the last stage to run (scores of later ones stay unset)")
    ap.add_argument("--segment-checkpoint", type=Path, default=None,
                    help="learned segmenter weights the segment stage uses (default: the shipped ones)")
    ap.add_argument("--set", action="append", default=[], metavar="STAGE.KEY=VALUE",
                    help="a setting passed to that stage's command (repeatable), e.g. segment.motion_samples=12")
    args = ap.parse_args(argv)
    mechs = [m for s in args.mechanisms for m in s.split(",") if m]
    unknown = [m for m in mechs if m not in MECHANISMS]
    if unknown:
        ap.error(f"unknown mechanism(s) {', '.join(unknown)}; known: {', '.join(MECHANISMS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    jsonl = args.out / "cells.jsonl"
    done = _done(jsonl, args)
    wanted = [(m, s) for m in mechs for s in args.seeds]
    if args.reuse:  # only the cells that folder has
        wanted = [c for c in wanted if c in _done(args.reuse / "cells.jsonl", args)]
    todo = [c for c in wanted if c not in done]
    rows = [done[c] for c in wanted if c in done]
    print(f"{len(rows)} cells already in {jsonl}, {len(todo)} to run", file=sys.stderr)
    lock = threading.Lock()
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(run_cell, m, s, args): (m, s) for m, s in todo}
        for i, fut in enumerate(as_completed(futs), 1):
            row = fut.result()
            rows.append(row)
            with lock, open(jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
            st = {k: ("ok" if v["rc"] == 0 else ("TRACEBACK" if v["traceback"] else "fail")) for k, v in row["stages"].items()}
            sc = row.get("scene", {})
            print(f"[{i}/{len(todo)} {time.time() - t0:.0f}s] {row['mechanism']} s{row['seed']} "
                  f"{sc.get('renderer')} {sc.get('size')} {sc.get('framing')} {sc.get('background')} "
                  f"{sc.get('sensor')} d={sc.get('distractors')}: {st} err_rel={row['track_err_rel']} "
                  f"topo={row['topology_ok']}", file=sys.stderr, flush=True)
    summary = summarise(rows)
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
