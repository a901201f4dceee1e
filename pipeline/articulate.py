"""Articulate stage: joint types, kinematic tree and joint positions from pose tracks.

Heiden et al. 2022, §4.3.3.3 / Alg. 6, with Sturm et al. 2011 model selection:

1. noise of the tracks (``fit.estimate_noise`` unless given; a body axis clearly
   noisier than that keeps its own estimate: ``body_noise``; when the shapes are
   given, a rotation the body's shape cannot show, a rod's spin or a ball's turn, gets
   ``UNSEEN_SIGMA``, a rod's position along its own axis, fixed only by its end caps,
   at least ``rod_axial_noise_m``, and a rod's frame is kept from turning end over end
   between frames, ``rods_without_flips``, or its unseen spin from jumping,
   ``rods_without_spin_jumps``, and a box's frame from switching to one its symmetry makes
   look the same, ``boxes_without_flips``), propagated to each pair's relative pose; frames
   whose tracking residual stands out from its usual level (``poorly_fit_frames``: the
   tracker slipped off the bodies) and frames where a body's position jumps off its
   neighbours' path and back (``glitch_frames``) count as lost;
2. for every body against the world and every pair of bodies, RANSAC + least
   squares of a fixed, prismatic and revolute joint (``vid2sim.models.joints.fit``);
   the cheapest fitting model is the pair's cost (no edge when none fits). Cost =
   truncated chi-square under Huber's loss beyond ``robust_scale`` (``fit.frame_cost``: a
   few frames of tracking error do not buy a joint coordinate) + ``complexity_penalty`` per
   joint coordinate per frame + log(#observations) per geometric parameter (BIC-like); a
   model fits when at least
   ``min_inlier_ratio`` of the frames are inliers and, for a joint with coordinates,
   q moves by more than ``min_motion_sigma`` of its own noise (the isotropic noise in
   ``fit``; for a prismatic or revolute joint also the pair's full noise model and q's own
   frame-to-frame jitter, ``articulate_motion.still_reason``), so a pair whose relative pose
   stays within the noise, or jitters, is ``fixed``;
3. a minimum spanning forest (Prim, networkx) over the bodies *and the world*, so a
   body attached to the world gets the joint RANSAC found for its world motion;
   components without the world are rooted at their best-connected body, attached
   with a ``planar`` joint if one fits its world motion, else ``free``. Then fewest
   coordinates (``_rehang``): a part hung (from the world or a body) by a joint with
   coordinates is re-hung by a joint with fewer that explains it, to a body across that
   joint (a chain link by its hinge to its neighbour instead of a planar joint to the
   world; a box welded to another instead of its own slider) or, instead of a planar
   joint, by its own world joint where model selection with a prior for mounted
   mechanisms prefers it (a cartpole's cart on its rail, not its pole), or, instead of a
   joint with coordinates to a moving body, its weld to the world where that holds in every
   frame (a still hub hung from its swinging arm by a hinge undoing the arm's swing). So a planar
   or free world joint remains only where no fixed, prismatic or revolute joint, to
   the world or to another body, explains the motion. A rigid group (welded bodies) hung by
   a 1-dof joint hangs by the member's joint that carries the whole group best
   (``_group_joints``);
4. the noise checked against the chosen joints: where their residuals exceed it by
   more than ``max_birge_ratio`` (Birge ratio, sqrt of the reduced chi-square;
   positions and rotations apart), which slowly varying tracking errors do (third
   differences do not see them), the noise is raised by that ratio and steps 2-3 are
   repeated, then again while a ratio exceeds 1 (at most ``noise_refits`` times); the
   residuals are a fitting weld's where the floor, not the tracks' jitter, set that part's
   noise (a joint's coordinate can absorb slow errors), else the chosen joint's;
5. edges oriented away from the root and refitted in that direction; axes and
   pivots mapped to world coordinates at frame 0 through the parent's denoised
   frame-0 pose; joint positions solved root to leaf so that
   ``vid2sim.models.joints.forward_kinematics`` reproduces the tracks
   (``vid2sim.pipeline.articulate_world``).

A moving camera (the recording's contract is a static one, camera.json) makes every
static body appear to move alike: their relative poses stay within the noise, so
they are welded together (fixed joints), and the group hangs from the world by one
joint, the one the evidence supports for its apparent motion (fixed if that stays
within the noise; a prismatic or revolute joint if the camera slid or panned about
one axis; else planar or free). The stage cannot tell camera motion from a mechanism
carried as a whole, so it keeps that joint and logs a warning.

Joint coordinates follow the convention in ``vid2sim.models.joints.kinematics``
(frame 0 is q = 0; export realises it with ``urdf_frames``). Joint names are
``<parent>_to_<child>``. Writes ``q_plot.png`` (q(t)), ``joints_3d.png`` (axes as
arrows) and ``articulate_costs.json`` (the cost matrix) into out_dir.

Not done here: closed kinematic loops (a spanning forest cannot express them),
joint limits (export), dynamics (identify).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import networkx as nx
import numpy as np

from vid2sim.models import geometry as se3
from vid2sim.models.joints import fit
from vid2sim.pipeline.articulate_frames import box_symmetries, boxes_without_flips, rods_without_flips, rods_without_spin_jumps
from vid2sim.pipeline.articulate_plots import plots as _plots
from vid2sim.pipeline.articulate_motion import at_rest, glitch_frames, poorly_fit_frames, still_reason
from vid2sim.pipeline.articulate_world import Edge, Forest, Root, Tracks, world_frame
from vid2sim.pipeline.artifacts import ArtifactError, Articulation, JointPositions, PoseTracks
from vid2sim.datasets.atomic import write_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArticulateConfig:
    """Settings of the articulate stage (noise in per-component standard deviations)."""

    position_noise_m: float = 0.0          # tracked position noise (m); 0 = estimate from the tracks
    rotation_noise_deg: float = 0.0        # tracked orientation noise (deg); 0 = estimate from the tracks
    min_position_noise_m: float = 0.001    # floor for the (estimated) position noise
    min_rotation_noise_deg: float = 0.5    # floor for the (estimated) orientation noise: the estimate sees
                                           # frame-to-frame jitter, not the slow bias of a partly occluded
                                           # part (the cartpole's cart on realistic depth: 0.1 deg estimated,
                                           # 2-5 mm / ~1 deg actual; with 0.5 mm / 0.2 deg its rail was missed)
    rod_axial_noise_m: float = 0.01        # floor for the position noise of a capsule or cylinder along its own
                                           # axis (m; used when the shapes are given): only its end caps fix it
                                           # there, and in a chain they are hidden at the joints (pendulum3,
                                           # realistic depth: slow slips of 6-28 mm std that third differences
                                           # put at 2-3 mm)
    ransac_iterations: int = 100           # hypotheses per joint model and body pair
    inlier_chi2: float = 45.0              # per-frame chi-square (6 noise-normalised components) of an inlier
    min_inlier_ratio: float = 0.85         # a model fits a pair if this fraction of frames are inliers (the
                                           # tracker may be off for a while: pendulum3's middle link, realistic
                                           # depth, its first 15 of 120 frames)
    complexity_penalty: float = 2.0        # cost per joint coordinate per frame (AIC-like; + log(n) per parameter)
    robust_scale: float = 9.0              # a frame's chi-square e above this costs 2 sqrt(9 e) - 9, not e: Huber's
                                           # loss at 3 sigma of the whitened residual's norm (``fit.frame_cost``;
                                           # 0 = e): a few frames of tracking error buy no joint coordinate
    min_motion_sigma: float = 6.0          # a joint must move more than this many sigmas of q, else it is fixed
    planar_roots: bool = True              # try a planar joint before a free one for floating roots
    mounted_prior: float = 1.0             # cost per saved coordinate per frame that a joint with fewer
                                           # coordinates may exceed the one it replaces by (_rehang: a mechanism
                                           # hung from the world by a 0/1-dof joint instead of a planar one)
    max_birge_ratio: float = 1.3           # residuals of the chosen joints above this many times the noise
                                           # (sqrt of the reduced chi-square) mean the noise was underestimated
    noise_refits: int = 2                  # times the noise may be raised to the residuals' level and the
                                           # joints chosen again (0: trust the noise estimate)
    level_deg: float = 1.0                 # a joint on the world (or on a body welded to it) whose axis is within
                                           # this many degrees of gravity-neutral (prismatic horizontal, revolute
                                           # vertical) is made exactly so: a frictionless twin turns an untrackable
                                           # tilt into a slide the recording does not show (0 = off)
    seed: int = 0                          # RANSAC random seed
    plots: bool = True                     # write q_plot.png and joints_3d.png
    max_lost_fraction: float = 0.5         # a body lost (out of view, occluded) in more frames than this is an error
    glitch_medians: float = 4.0            # a frame whose tracked position leaves its neighbours' path by this many
                                           # median such distances (and glitch_floor_sigma) counts as lost (0 = off)
    glitch_floor_sigma: float = 5.0        # ... and by at least this many position noise sigmas
    poor_fit_ratio: float = 1.2            # a frame whose tracking residual exceeds this many times its usual level
                                           # (``articulate_motion.poorly_fit_frames``) counts as lost (0 = off) ...
    poor_fit_margin_m: float = 0.002       # ... and this much more (m): clean depth's sub-mm residuals vary by more
                                           # than the ratio without a body slipping


NOISIER = 1.5  # a body axis's own noise estimate is used where it exceeds the global one by this
UNSEEN_SIGMA = 1.0  # rad: noise of a rotation a body's shape cannot show (a rod's spin about its axis, a ball's turn)


def unseen_rotations(poses: PoseTracks, shapes: dict | None) -> dict[str, tuple[bool, bool, bool]]:
    """Body name -> which of its own rotation axes its shape cannot show: z (the axis) for a
    capsule or cylinder, all three for a sphere. The tracker leaves those rotations where
    they were (``models.render.align.free_basis``), so a rod hinged to a turning parent
    (tree5's arm_b) keeps a spin that is not the true one, and the ball keeps its first
    orientation: joint fits must not read those as motion."""
    out = {}
    for body, shape in zip(poses.body_names, poses.shape_names):
        kind = getattr((shapes or {}).get(shape), "type", None)
        if kind in ("capsule", "cylinder"):
            out[body] = (False, False, True)
        elif kind == "sphere":
            out[body] = (True, True, True)
    return out


def _settings(cfg: ArticulateConfig, sp: float, sr: float, parent: str, child: str = "",
              axes: dict | None = None) -> fit.FitSettings:
    axes = axes or {}
    return fit.FitSettings(sp, sr, cfg.ransac_iterations, cfg.inlier_chi2, cfg.min_inlier_ratio,
                           cfg.complexity_penalty, cfg.min_motion_sigma, cfg.max_birge_ratio, cfg.seed,
                           parent_noisy=parent != "world", robust_scale=cfg.robust_scale,
                           child_axes=axes.get(child), parent_axes=axes.get(parent))


def body_noise(cfg: ArticulateConfig, W: np.ndarray, valid: np.ndarray, names: list[str], sp: float, sr: float
               ) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    """Per-axis noise of each body in its own frame (``fit.estimate_body_noise``) where an axis
    is clearly noisier than the global (sp, sr), by more than ``NOISIER`` x; every other axis
    keeps the global value (bodies with no such axis are left out). From ~100 frames one axis's estimate is only good to ~15 %:
    trusting every axis's own estimate flipped near-ties of the isotropic bench_articulate
    (5 mm: the cabinet's drawer, one axis estimated at 4.0 mm, became a revolute child of
    the door; tree accuracy 0.786 vs 0.857), while the realistic-noise pole, located
    2.9 mm along its axis vs 1 mm across, needs its own axis. Empty when the user gave the
    noise (then it is isotropic)."""
    if cfg.position_noise_m or cfg.rotation_noise_deg:
        return {}
    out = {}
    for name, est in zip(names, fit.estimate_body_noise(W, valid)):
        pos, rot = est if est is not None else (np.zeros(3), np.zeros(3))
        if not ((pos > NOISIER * sp).any() or (rot > NOISIER * sr).any()):
            continue  # isotropic at (sp, sr): the closed-form whitening applies
        pos, rot = np.where(pos > NOISIER * sp, pos, sp), np.where(rot > NOISIER * sr, rot, sr)
        out[name] = (tuple(float(x) for x in pos), tuple(float(x) for x in rot))
    return out


def _relative(W: np.ndarray, names: list[str], parent: str, child: str) -> np.ndarray:
    Wc = W[:, names.index(child)]
    return Wc if parent == "world" else se3.inv(W[:, names.index(parent)]) @ Wc


def _valid(valid: np.ndarray, names, parent, child) -> np.ndarray:
    v = valid[:, names.index(child)]
    return v if parent == "world" else v & valid[:, names.index(parent)]


def _fit_pair(cfg, W, valid, names, parent, child, sp, sr, kinds=("fixed", "prismatic", "revolute"), axes=None):
    """``fit.select`` of the pair's relative pose, then a fitting prismatic or revolute joint
    that ``articulate_motion.still_reason`` finds without motion does not fit. -> (cheapest
    fitting JointFit or None, kind -> JointFit)."""
    X = _relative(W, names, parent, child)
    st = _settings(cfg, sp, sr, parent, child, axes)
    _, every = fit.select(X, _valid(valid, names, parent, child), st, kinds)
    for kind, f in every.items():
        why = still_reason(f, X, st, cfg.min_motion_sigma) if f.fits and fit.DOF[kind] == 1 else ""
        if why:
            every[kind] = replace(f, fits=False, why=why)
    ok = [f for f in every.values() if f.fits]
    return (min(ok, key=lambda f: f.cost) if ok else None), every


def _forest(cfg, W, valid, names, sp, sr, axes=None, unseen=None) -> tuple[nx.Graph, dict]:
    """Graph over bodies + world with the cheapest fitting joint of every pair (a body's
    joint to the world may also be planar: a root sliding on a floor). A pair is fitted with
    the body whose shape shows more of its rotation as the parent: seen from a ball whose
    tracked orientation stays put, the rod welded to it swings around (tree5: chi-square
    ~1000 for the weld the other way round fits at ~1)."""
    G = nx.Graph()
    G.add_nodes_from(["world", *names])
    table = {}
    hidden = {b: sum((unseen or {}).get(b, ())) for b in names}
    pairs = [("world", b) for b in names] + [(a, b) if hidden[a] <= hidden[b] else (b, a)
                                             for i, a in enumerate(names) for b in names[i + 1:]]
    world_kinds = ("fixed", "prismatic", "revolute") + (("planar",) if cfg.planar_roots else ())
    for a, b in pairs:
        kinds = world_kinds if a == "world" else ("fixed", "prismatic", "revolute")
        best, every = _fit_pair(cfg, W, valid, names, a, b, sp, sr, kinds, axes)
        table[(a, b)] = {k: {"cost": f.cost if np.isfinite(f.cost) else None, "fits": f.fits, "why": f.why}
                         for k, f in every.items()}
        n_ok = int(_valid(valid, names, a, b).sum())
        if best is not None:
            # frames where either body is lost carry no evidence: extrapolate the cost per
            # valid frame, so that a pair seen in few frames does not look cheap
            G.add_edge(a, b, weight=best.cost * len(W) / max(n_ok, 1), kind=best.kind, fit=best, parent=a,
                       every={k: f for k, f in every.items() if f.fits}, scale=len(W) / max(n_ok, 1))
            log.debug("pair %s-%s: %s (cost %.1f)", a, b, best.kind, best.cost)
    tree = _rehang(nx.minimum_spanning_tree(G, algorithm="prim"), G, cfg.mounted_prior, len(W), cfg.max_birge_ratio)
    return _group_joints(tree, G, Tracks(W, valid, names), _settings_for(cfg, sp, sr, axes or {})), table


def _rehang(tree: nx.Graph, G: nx.Graph, prior: float, frames: int, max_birge: float) -> nx.Graph:
    """A part of the forest hung (from the world or from a body) by a joint with
    coordinates (planar, prismatic, revolute) is re-hung by a joint with fewer
    coordinates where one fits: a fixed, prismatic or revolute joint of one of its bodies
    to a body on the other side of that joint, or, instead of a planar joint, one of its
    bodies' own fixed, prismatic or revolute joints to the world. Fewest coordinates
    first, then cost.

    The spanning tree compares edges one at a time, so a link of a chain whose tracked
    pose slips along its own axis is cheaper as a planar joint to the world (3
    coordinates, absorbing the slip) than as a hinge to its neighbour (1), and two static
    boxes swayed alike by a moving camera can each hang from the world by a slider (2
    coordinates) rather than one by a slider and the other welded to it (1). A joint to a
    body outside the part qualifies where it is that pair's own choice (the cheapest
    model that fits it: a weld that merely fits beside a cheaper slider of the same pair
    does not), instead of a planar joint always (it explains the part's motion with
    fewer coordinates), instead of a 1-dof joint where its cost is at most that joint's
    plus the prior (a door's hinge to the world is not traded for the weld of a drawer,
    moving within the noise of 10 mm tracks, to the carcass), and never for a weld to a body
    welded to that joint's own parent: the 1-dof joint fits only where it moves the part
    against its parent significantly, which the weld would contradict (a lid turning 4 deg on
    a base welded to the world: its hinge to the world passes the motion test, its hinge to
    the base, with the base's noise added, does not, and the weld to the base fits within the
    prior). A body's own world joint replaces a planar one only where model selection
    prefers it for that body's world motion with a prior for mounted mechanisms of
    ``prior`` per saved coordinate per frame (the planar joint's extra coordinates also
    absorb tracking errors that are not noise): a precisely tracked pole sliding in a plane
    can beat the cart's prismatic rail in the spanning tree, and the cart's 1-D motion
    gains little from a planar joint, while an end link of a chain pushed over a floor,
    which pivots about one point most of the time but also slides, gains a lot. A part hung
    by a joint with coordinates from a body that moves (not welded to the world) is welded
    to the world instead where one of its bodies' welds to the world holds in every frame,
    its residuals within ``max_birge`` of the noise (``articulate_motion.at_rest``): a joint whose motion undoes its parent's, leaving the part still, is a
    coincidence the tracks cannot support (tree5's hub on a hinge to arm_a, the hub's slow
    4-mm slide along the camera ray absorbed by arm_a's 10-mm noise along its own axis).
    """
    moving = [(a, b) if tree.edges[a, b]["parent"] == a else (b, a) for a, b in tree.edges
              if fit.DOF[tree.edges[a, b]["kind"]] >= 1]
    for a, b in sorted(moving, key=lambda e: (e[0] != "world", str(e[0]), str(e[1]))):
        if not tree.has_edge(a, b):
            continue
        kind0, w0 = tree.edges[a, b]["kind"], tree.edges[a, b]["weight"]
        cut = tree.copy()
        cut.remove_edge(a, b)
        comp = nx.node_connected_component(cut, b)  # the part hung by this joint
        rest = nx.node_connected_component(cut, a)
        if "world" in comp:
            comp, rest = rest, comp
        rigid = _welded(cut, a if a in rest else b)
        options = []
        for c in sorted(comp, key=str):
            for o in sorted((n for n in G.neighbors(c) if n in rest), key=str):
                attr = G.edges[c, o]
                for kind, f in attr["every"].items():
                    saved = prior * (fit.DOF[kind0] - fit.DOF[kind]) * frames
                    if saved <= 0 or (kind == "fixed" and fit.DOF[kind0] == 1 and o in rigid):
                        continue  # the 1-dof joint moves the part against o's rigid group: no weld to it
                    if o == "world":  # instead of a planar joint (the cart on its rail), or a weld that holds
                        own = attr["every"].get(kind0)  # in every frame instead of a joint to a moving body
                        ok = (kind0 == "planar" and (own is None or f.cost <= own.cost + saved)) or \
                            (kind == "fixed" and "world" not in rigid and at_rest(f, round(frames / attr["scale"]), max_birge))
                    else:  # the pair's own choice; instead of a 1-dof joint, within the prior of its cost
                        ok = kind == attr["kind"] and (kind0 == "planar" or f.cost * attr["scale"] <= w0 + saved)
                    if ok:
                        parent = "world" if o == "world" else attr["parent"]
                        options.append((fit.DOF[kind], f.cost * attr["scale"], c, o, kind, f, parent))
        if not options:
            continue
        dof, w, c, o, kind, f, parent = min(options, key=lambda t: t[:2] + (str(t[2]), str(t[3])))
        log.info("%s attached to %s by %s (%d coordinate%s) instead of %s to %s by %s", c, o, kind, dof,
                 "" if dof == 1 else "s", b, a, kind0)
        tree.remove_edge(a, b)
        tree.add_edge(o, c, weight=w, kind=kind, fit=f, parent=parent, every=G.edges[c, o]["every"])
    return tree


def _group_cost(f: fit.JointFit, parent: str, carrier: str, members: list[str], tracks: Tracks, settings) -> float:
    """Truncated chi-square of every body of a rigid group carried by the 1-dof joint ``f`` (fitted
    from ``parent`` to the member ``carrier``): each member's pose in the parent's frame predicted
    as the joint's motion at ``f.q`` applied to that member's own best constant pose
    (``se3.mean_pose`` of the motion undone), scored under the pair's noise, over frames where
    the parent, the carrier and the member are seen, extrapolated to all frames."""
    total = 0.0
    motion = fit.predict(f.kind, f.axis, f.pivot, np.eye(4), f.q)  # (T, 4, 4) the joint's motion
    for b in members:
        X = _relative(tracks.world_from_body, tracks.names, parent, b)
        ok = _valid(tracks.valid, tracks.names, parent, b) & _valid(tracks.valid, tracks.names, parent, carrier)
        if ok.sum() < 3:
            continue
        ref = se3.mean_pose((se3.inv(motion) @ X)[ok])
        st = settings(parent, b)
        Lw = fit.whitening(X, st.sigma_pos, st.sigma_rot, st.parent_noisy, st.child_axes, st.parent_axes)
        e = np.minimum(fit.chi2(X, motion @ ref, Lw)[ok], st.inlier_chi2)
        total += float(e.sum()) * len(ok) / ok.sum()
    return total


def _from(parent: str, child: str, kind: str, f: fit.JointFit, G: nx.Graph, tracks: Tracks, settings) -> fit.JointFit:
    """``f``, the pair's fitted joint of ``kind``, as a joint of ``child`` in ``parent``'s frame:
    refitted in that direction where the pair was fitted the other way round."""
    if G.edges[parent, child]["parent"] == parent:
        return f
    X, st = _relative(tracks.world_from_body, tracks.names, parent, child), settings(parent, child)
    return fit.fit_model(kind, X, _valid(tracks.valid, tracks.names, parent, child), st, np.random.default_rng(st.seed))


def _welded(tree: nx.Graph, body: str) -> set:
    """``body`` and the bodies welded to it (fixed joints) in ``tree``."""
    welds = nx.Graph([(u, v) for u, v, k in tree.edges(data="kind") if k == "fixed"])
    return nx.node_connected_component(welds, body) if body in welds else {body}


def _group_joints(tree: nx.Graph, G: nx.Graph, tracks: Tracks, settings) -> nx.Graph:
    """A rigid group (bodies welded together) hung by a prismatic or revolute joint hangs by the
    member's joint to the same parent that carries the whole group best (``_group_cost``). The
    spanning tree and ``_rehang`` choose joints pair by pair, so a group can end up hung by
    the joint of a member whose own pose it explains but not the others': tree5's ball, its
    orientation unseen, slides on arm_a along the chord of its arc (the depth jitter along it
    absorbed), and arm_b, welded to it, hangs by that slider instead of its hinge."""
    for a, b in list(tree.edges):
        if not tree.has_edge(a, b) or tree.edges[a, b]["kind"] not in ("prismatic", "revolute"):
            continue
        cut = tree.copy()
        cut.remove_edge(a, b)
        parent = a if tree.edges[a, b]["parent"] == a else b
        child = b if parent == a else a
        group = sorted(_welded(cut, child), key=str)
        if len(group) < 2 or "world" in group:
            continue
        options = [(kind, m, _from(parent, m, kind, f, G, tracks, settings)) for m in group if G.has_edge(parent, m)
                   for kind, f in G.edges[parent, m]["every"].items() if kind in ("prismatic", "revolute")]
        if len(options) < 2:
            continue
        kind, m, f = min(options, key=lambda o: (_group_cost(o[2], parent, o[1], group, tracks, settings), str(o[1])))
        if m == child:
            continue
        log.info("the rigid group %s hangs from %s by %s's %s joint instead of %s's %s joint", group, parent, m,
                 kind, child, tree.edges[a, b]["kind"])
        tree.remove_edge(a, b)
        attr = G.edges[parent, m]
        tree.add_edge(parent, m, weight=f.cost * attr["scale"], kind=kind, fit=f, parent=parent, every=attr["every"])
    return tree


def _settings_for(cfg: ArticulateConfig, sp: float, sr: float, axes: dict):
    """(parent, child) -> ``fit.FitSettings`` of that pair for this noise."""
    return lambda parent, child: _settings(cfg, sp, sr, parent, child, axes)


def _choose(cfg, W, valid, names, sp, sr, axes, unseen, welds: tuple[bool, bool]):
    """The forest (``_forest``) for noise (sp, sr, per-body axes), chosen again with the
    noise raised by the chosen joints' Birge ratios (``_tree_birge_ratios``, ``welds``: which
    of positions and rotations are read from the pairs' welds; at most ``noise_refits`` times): first
    where one exceeds ``max_birge_ratio``, then, the noise known to be underestimated, while
    one exceeds 1 (the residuals' level is the estimate). -> (tree, table, sp, sr, axes,
    [position, rotation] factors the noise was raised by)."""
    tree, table = _forest(cfg, W, valid, names, sp, sr, axes, unseen)
    birge = [1.0, 1.0]
    for k in range(cfg.noise_refits):
        bp, br = _tree_birge_ratios(tree, W, valid, names, _settings_for(cfg, sp, sr, axes), unseen, welds)
        if max(bp, br) <= (cfg.max_birge_ratio if k == 0 else 1.0):
            break
        birge = [birge[0] * bp, birge[1] * br]
        sp, sr, axes = sp * bp, sr * br, _scaled(axes, bp, br)
        log.info("the chosen joints leave residuals %.2f x (positions) and %.2f x (rotations) the stated noise "
                 "(Birge ratios): noise raised to %.2f mm, %.2f deg and the joints chosen again",
                 bp, br, sp * 1e3, np.rad2deg(sr))
        tree, table = _forest(cfg, W, valid, names, sp, sr, axes, unseen)
    return tree, table, sp, sr, axes, birge


TRANSLATIONS = {"prismatic": 1, "planar": 2}  # a joint's translational coordinates, by kind
ROTATIONS = {"revolute": 1, "planar": 1}      # ... and rotational ones


def _tree_birge_ratios(tree: nx.Graph, W, valid, names, settings, unseen: dict, welds: tuple[bool, bool]
                       ) -> tuple[float, float]:
    """Birge ratios (``fit.birge_ratio``) of the chosen joints together, for positions and
    rotations apart: over every fitted edge of the forest (its inlier frames; for the parts
    ``welds`` (positions, rotations) marks, its pair's fixed joint where that fits too, since
    a joint with coordinates can absorb the largest part of slowly varying errors and hide
    them; where the tracks' jitter measured a part's noise, a weld's larger residuals there
    are the joint's motion), the whitened
    residual's position part (its first 3 components depend on the position residual
    only) and rotation part, each per frame over its residual degrees of freedom (3 less
    the joint's translational / rotational coordinates, less the rotations the bodies'
    shapes cannot show), pooled by their median. 1 where there is nothing to pool."""
    pooled: tuple[list, list] = ([], [])
    for u, v, attr in tree.edges(data=True):
        parent, child = attr["parent"], (v if attr["parent"] == u else u)
        X = _relative(W, names, parent, child)
        st = settings(parent, child)
        Lw = fit.whitening(X, st.sigma_pos, st.sigma_rot, st.parent_noisy, st.child_axes, st.parent_axes)
        hidden = sum(unseen.get(child, ())) + sum(unseen.get(parent, ()))
        residuals: dict[int, np.ndarray] = {}   # per fit read: positions and rotations may share one
        for part, cols, coords, less in ((0, slice(0, 3), TRANSLATIONS, 0), (1, slice(3, 6), ROTATIONS, hidden)):
            f = attr["every"].get("fixed", attr["fit"]) if welds[part] else attr["fit"]
            if id(f) not in residuals:
                residuals[id(f)] = fit.residuals(X, fit.predict(f.kind, f.axis, f.pivot, f.ref, f.q), Lw)[f.inliers]
            r, k = residuals[id(f)], 3 - coords.get(f.kind, 0) - less
            if k > 0 and len(r):
                pooled[part].append((r[:, cols] ** 2).sum(1) / fit.chi2_median(k))
    return tuple(float(np.sqrt(max(1.0, np.median(np.concatenate(p))))) if p else 1.0 for p in pooled)


def _scaled(axes: dict, bp: float, br: float) -> dict:
    """Per-body axis noise, positions times bp and rotations times br, except the rotations
    a shape cannot show (``UNSEEN_SIGMA``)."""
    return {n: (tuple(x * bp for x in pa), tuple(x if x >= UNSEEN_SIGMA else x * br for x in ra))
            for n, (pa, ra) in axes.items()}


class NoiseModel(NamedTuple):
    """What step 1 of the stage gives the joint fits."""
    W: np.ndarray            # (T, M, 4, 4) world_from_body, frames continuous across symmetries
    valid: np.ndarray        # (T, M) bool: frames to fit (lost, poorly fit and glitch frames are False)
    sp: float                # position noise used (m)
    sr: float                # rotation noise used (rad)
    axes: dict               # body name -> ((3,) m, (3,) rad) noise along the body's axes
    unseen_axes: dict        # body name -> (3,) bool: rotations the body's shape cannot show
    estimated: tuple         # (position m, rotation rad) as estimated from the tracks


def noise_model(cfg: ArticulateConfig, W: np.ndarray, valid: np.ndarray, poses: PoseTracks,
                shapes: dict | None) -> NoiseModel:
    """Step 1 of the stage: rods' and boxes' frames made continuous, the tracks' noise, the
    frames set aside as poorly fit or as the tracker's glitches, per-body per-axis noise.
    W: (T, M, 4, 4) world_from_body, valid: (T, M) bool."""
    names = list(poses.body_names)
    unseen_axes = unseen_rotations(poses, shapes)
    rods = [n for n, u in unseen_axes.items() if u == (False, False, True)]
    poor = poorly_fit_frames(poses.residual, cfg.poor_fit_ratio, cfg.poor_fit_margin_m, seen=valid.any(1))
    W = rods_without_flips(W, valid, names, rods, trusted=~poor)  # a poorly fit frame is no rod's reference
    W = rods_without_spin_jumps(W, valid, names, rods, trusted=~poor)
    W = boxes_without_flips(W, valid, names, box_symmetries(poses, shapes))
    est_p, est_r = fit.estimate_noise(W, valid)
    if poor.any():
        log.info("frames %s: the tracking residual stands out from its usual level: set aside as poorly fit",
                 np.flatnonzero(poor).tolist())
        valid = valid & ~poor[:, None]
    sp = cfg.position_noise_m or max(est_p, cfg.min_position_noise_m)
    sr = np.deg2rad(cfg.rotation_noise_deg) or max(est_r, np.deg2rad(cfg.min_rotation_noise_deg))
    if cfg.glitch_medians > 0:
        glitch = glitch_frames(W, valid, cfg.glitch_medians, cfg.glitch_floor_sigma * sp)
        for m in np.flatnonzero(glitch.any(0)):
            log.info("%s: frames %s leave the path of their neighbours: set aside as the tracker's glitches",
                     names[m], np.flatnonzero(glitch[:, m]).tolist())
        valid = valid & ~glitch
    log.info("noise: position %.2f mm, rotation %.2f deg (estimated %.2f mm, %.2f deg)",
             sp * 1e3, np.rad2deg(sr), est_p * 1e3, np.rad2deg(est_r))

    axes = body_noise(cfg, W, valid, names, sp, sr)
    for name, unseen in unseen_axes.items():
        pa, ra = axes.get(name, ((sp,) * 3, (sr,) * 3))
        if unseen == (False, False, True):  # a rod: only its end caps fix it along its axis
            pa = (pa[0], pa[1], max(pa[2], cfg.rod_axial_noise_m))
        axes[name] = (tuple(pa), tuple(UNSEEN_SIGMA if u else r for u, r in zip(unseen, ra)))
    for name, (pa, ra) in axes.items():
        log.info("noise of %s along its axes: position %s mm, rotation %s deg", name,
                 np.round(np.array(pa) * 1e3, 2).tolist(), np.round(np.rad2deg(ra), 2).tolist())
    return NoiseModel(W, valid, sp, sr, axes, unseen_axes, (est_p, est_r))


def run(cfg: ArticulateConfig, poses: PoseTracks, out_dir: Path, shapes: dict | None = None
        ) -> tuple[Articulation, JointPositions]:
    """poses -> (Articulation, JointPositions) per docs/formats.md §2. ``shapes`` (the
    recording's library, optional) says which rotations each body's shape cannot show."""
    W = np.asarray(poses.world_from_body, float)
    T, M = W.shape[:2]
    names = list(poses.body_names)
    valid = np.ones((T, M), bool) if poses.lost is None else ~np.asarray(poses.lost, bool)
    for m in np.flatnonzero((~valid).mean(0) > cfg.max_lost_fraction):
        bad = np.flatnonzero(~valid[:, m])
        raise ArtifactError(Path(out_dir) / PoseTracks.FILE,
                            f"body {names[m]!r} is lost (left the view or occluded) in {bad.size} of {T} frames "
                            f"(first {bad[0]}, last {bad[-1]}); its joints cannot be inferred — trim the recording "
                            f"to where it is visible or raise articulate.max_lost_fraction ({cfg.max_lost_fraction})")
    nm = noise_model(cfg, W, valid, poses, shapes)
    W, valid, unseen_axes = nm.W, nm.valid, nm.unseen_axes
    est_p, est_r = nm.estimated
    welds = (nm.sp > est_p, nm.sr > est_r)  # parts whose noise the tracks' jitter did not measure
    tree, table, sp, sr, axes, birge = _choose(cfg, W, valid, names, nm.sp, nm.sr, nm.axes, unseen_axes, welds)
    edges: list[Edge] = []
    roots: list[Root] = []
    def comp_order(c: set) -> tuple[int, int]:
        return (0 if "world" in c else 1, min((names.index(b) for b in c if b != "world"), default=-1))

    for comp in sorted(nx.connected_components(tree), key=comp_order):
        if "world" in comp:
            root = "world"
        else:  # nothing ties it to the world: a free body, the best-connected one as root,
            # among those the one whose rotation the depth shows fully (not a rod's spin)
            sub = tree.subgraph(comp)
            root = max(sorted(comp, key=names.index), key=lambda b: (sub.degree(b), -sum(unseen_axes.get(b, ()))))
            roots.append(Root(root, "free", None))
        # Neighbours in body order: the MST's adjacency order varies between processes
        # (hash seeds), and the artifact must be byte-identical for the same input.
        for parent, child in nx.bfs_edges(tree, root, sort_neighbors=lambda ns: sorted(ns, key=lambda b: -1 if b == "world" else names.index(b))):
            attr = tree.edges[parent, child]
            kind, f = attr["kind"], attr["fit"]
            if kind == "planar":
                roots.append(Root(child, "planar", f))
                continue
            if attr["parent"] != parent:  # fitted the other way round: refit in this direction
                f = fit.fit_model(kind, _relative(W, names, parent, child), _valid(valid, names, parent, child),
                                  _settings(cfg, sp, sr, parent, child, axes), np.random.default_rng(cfg.seed))
            edges.append(Edge(parent, child, f))
    _warn_if_one_moving_group(edges, roots, names)
    art, jp = world_frame(Tracks(W, valid, names), Forest(roots, edges), sp, sr, cfg.level_deg)
    if cfg.plots:
        _plots(art, jp, W[0], names, poses.fps, Path(out_dir))
    costs = {f"{a}|{b}": v for (a, b), v in table.items()}
    write_json(Path(out_dir) / "articulate_costs.json",
               {"noise": {"position_m": sp, "rotation_rad": sr, "estimated_position_m": est_p,
                          "estimated_rotation_rad": est_r, "birge_ratios": birge,
                          "body_axes": {n: {"position_m": list(a[0]), "rotation_rad": list(a[1])} for n, a in axes.items()}},
                "pairs": costs})
    for j in art.joints:
        log.info("joint %s: %s %s -> %s axis %s pivot %s", j.name, j.type, j.parent, j.child,
                 np.round(j.axis, 3).tolist(), np.round(j.pivot, 3).tolist())
    return art, jp


def _warn_if_one_moving_group(edges: list[Edge], roots: list[Root], names: list[str]) -> None:
    """Log a warning when several bodies are all welded together and their group moves
    relative to the world (by one joint with coordinates): what static objects filmed by
    a moving camera look like."""
    if len(names) < 2 or any(e.fit.kind != "fixed" for e in edges if e.parent != "world"):
        return
    world = [e.fit.kind for e in edges if e.parent == "world"] + [r.kind for r in roots]
    if len(world) == 1 and world[0] != "fixed":
        log.warning("all %d bodies move as one rigid group (%s joint to the world): if they are static "
                    "objects, the camera moved (the recording must come from a static camera)", len(names), world[0])


def run_with_actuators(cfg: ArticulateConfig, poses: PoseTracks, out_dir: Path, shapes: dict | None = None,
                       rec=None) -> tuple[Articulation, JointPositions]:
    """``run``, then, when ``rec`` carries a known pusher and the parts rest on a floor, the
    world joint made planar in the floor's plane (``identify_push.planar_root``): the stage's
    entry point."""
    art, jp = run(cfg, poses, out_dir, shapes=shapes)
    if rec is not None:
        from vid2sim.pipeline.identify_push import planar_root   # pipeline-level rule with identify's floor

        art, jp = planar_root(art, jp, poses, rec, shapes) or (art, jp)
    return art, jp
