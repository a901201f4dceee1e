"""Articulate's tracked body frames made continuous where a shape looks the same in another frame.

A tracker fits a shape to depth; where the shape looks the same turned (a rod end over end or
about its own axis, a box by its symmetries), the frame it reports may switch between those
turns from one frame to the next, which no joint explains. ``rods_without_flips``,
``rods_without_spin_jumps`` and ``boxes_without_flips`` take the switches out: world_from_body
(T, M, 4, 4) in, the same with each such body's rotation turned back to a reference frame's (a
rod: a near frame its axis turned least from, ``rod_reference_edges``; a box: the smoothest
sequence over the whole track, ``smoothest_turns``); positions are never changed. Not here: the
noise, the fits, the tree (``vid2sim.pipeline.articulate``).
"""
from __future__ import annotations

import itertools

import networkx as nx
import numpy as np

from vid2sim.models import geometry as se3
from vid2sim.pipeline.artifacts import PoseTracks

SPIN_JUMP_DEG = 10.0  # a rod's spin about its own axis changed by more than this between frames is a tracker's jump
REFERENCE_REACH = 2  # a rod frame's reference is one of the next this many valid frames (before or after)
UNTRUSTED_TURN = np.pi / 2  # rad added to a turn to a frame not trusted: over any line angle, so it is a leaf
BOX_SYMMETRY_TOL = 0.1  # relative: box extents this close are alike (a turn swapping them looks the same)
BOX_SKIP_DEG = 45.0  # the turn a box's frame may save by passing over one frame: half a 90-deg turn no symmetry undoes


def rod_reference_edges(z: np.ndarray, frames: np.ndarray, trusted: np.ndarray | None = None,
                        reach: int = REFERENCE_REACH) -> list[tuple[int, int]]:
    """(reference, frame) pairs, each reference listed before it serves, that carry a rod's
    frame from the first trusted one of ``frames`` (N,) to every other: the minimum spanning tree
    (Kruskal, networkx) over the frames, each joined to the next ``reach`` ones, weighted by the
    angle between their z axes as lines (0-90 deg), plus ``UNTRUSTED_TURN`` where either frame is
    not ``trusted`` (N,) bool (None: all). A frame's reference is thus a near frame its axis
    turned least from, not just the one before: a mistracked frame whose axis is off both
    neighbours', or one not trusted, ends as a leaf and the frames after it are carried from the
    frame before it. Over a gap of ``reach`` frames a rod must turn less than 90 deg (else its
    line's angle wraps round). z: (N, 3) unit axes."""
    if len(frames) == 0:
        return []
    ok = np.ones(len(frames), bool) if trusted is None else np.asarray(trusted, bool)
    G = nx.Graph()
    G.add_nodes_from(range(len(frames)))
    for gap in range(1, reach + 1):
        cos = np.abs(np.einsum("ij,ij->i", z[gap:], z[:-gap]))
        w = np.arccos(np.clip(cos, 0.0, 1.0)) + UNTRUSTED_TURN * ~(ok[gap:] & ok[:-gap])
        G.add_weighted_edges_from(zip(range(len(w)), range(gap, len(w) + gap), w.tolist()))
    tree = nx.minimum_spanning_tree(G, algorithm="kruskal")
    return [(int(frames[a]), int(frames[b])) for a, b in nx.bfs_edges(tree, int(np.argmax(ok)))]


def rods_without_flips(W: np.ndarray, valid: np.ndarray, names: list[str], rods: list[str],
                       trusted: np.ndarray | None = None) -> np.ndarray:
    """(T, M, 4, 4) world_from_body with each rod's (capsule's, cylinder's) frame kept
    continuous: a rod looks the same turned end over end, and a tracker may switch
    between the two frames (double_pendulum, realistic depth: link2's frame turned 180
    deg about its x axis from frame 36 on), which no joint explains. Where a rod's z axis
    points against its reference frame's (``rod_reference_edges`` over its valid frames; only
    frames ``trusted`` (T,) bool, default all, serve as references), its frame is turned 180
    deg about its own x axis (same shape in the same place). Other bodies are returned as
    they are."""
    flip = np.diag([1.0, -1.0, -1.0])  # 180 deg about x: z -> -z
    W = np.array(W, float)
    for m in [names.index(r) for r in rods]:
        frames = np.flatnonzero(valid[:, m])
        trust = None if trusted is None else trusted[frames]
        for ref, t in rod_reference_edges(W[frames, m, :3, 2], frames, trust):
            if W[t, m, :3, 2] @ W[ref, m, :3, 2] < 0:
                W[t, m, :3, :3] = W[t, m, :3, :3] @ flip
    return W


def box_symmetries(poses: PoseTracks, shapes: dict | None, tol: float = BOX_SYMMETRY_TOL) -> dict[str, np.ndarray]:
    """Body name -> (K, 3, 3) the rotations other than the identity that map its box onto
    itself: the signed permutations of its axes (det +1) that keep each extent within ``tol``
    (relative) of the one it replaces, so the three 180-deg turns about its axes for any box,
    and 90-deg turns about an axis whose two other extents are alike. Only boxes are listed."""
    perms = [np.diag(d) @ np.eye(3)[list(o)] for o in itertools.permutations(range(3))
             for d in itertools.product((1.0, -1.0), repeat=3)]
    out = {}
    for body, shape in zip(poses.body_names, poses.shape_names):
        sh = (shapes or {}).get(shape)
        if getattr(sh, "type", None) != "box" or sh.size is None:
            continue
        size = np.asarray(sh.size, float)
        keep = [P for P in perms if np.linalg.det(P) > 0 and not np.allclose(P, np.eye(3))
                and np.all(np.abs(np.abs(P) @ size - size) <= tol * size)]
        if keep:
            out[body] = np.array(keep)
    return out


def boxes_without_flips(W: np.ndarray, valid: np.ndarray, names: list[str], symmetries: dict[str, np.ndarray]
                        ) -> np.ndarray:
    """(T, M, 4, 4) world_from_body with each box's frame kept continuous: a box looks the same
    turned by any of its symmetries (``box_symmetries``), and a tracker in noisy, far depth may
    switch between those frames (a cart's frame turned 180 deg about its long axis), which no
    joint explains. Each valid frame's rotation R is replaced by one R S (S a symmetry or the
    identity), chosen for the whole track at once (``smoothest_turns``): the least total
    frame-to-frame turn, where one frame at a time may be passed over for ``BOX_SKIP_DEG``, so
    that a single mistracked frame (a box turned by 90 deg, which no symmetry undoes) does not
    decide the frames after it. The first valid frame keeps its rotation. Positions and other
    bodies are returned as they are."""
    W = np.array(W, float)
    for name, S in symmetries.items():
        m = names.index(name)
        idx = np.flatnonzero(valid[:, m])
        if idx.size < 2:
            continue
        cands = np.concatenate([np.eye(3)[None], S])  # (K+1, 3, 3)
        pick = smoothest_turns(W[idx, m, :3, :3][:, None] @ cands[None], np.deg2rad(BOX_SKIP_DEG))
        first = cands[pick[0]].T  # keep the first frame's rotation: every pick turned back by its symmetry
        W[idx, m, :3, :3] = W[idx, m, :3, :3] @ cands[pick] @ first
    return W


def _turn(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Angle (rad) between rotations A (..., 3, 3) and B (..., 3, 3), broadcast: that of A^T B."""
    return se3.rotation_angle(np.swapaxes(A, -1, -2) @ B)


def smoothest_turns(R: np.ndarray, skip_rad: float) -> np.ndarray:
    """R: (n, K, 3, 3) the K candidate rotations of each of n frames -> (n,) int: one candidate
    per frame, the sequence of least total turn between consecutive kept frames (Viterbi).
    A frame may be passed over (its neighbours compared directly) at a cost of ``skip_rad``,
    one frame at a time; a passed-over frame takes the candidate nearest the frame before it."""
    n, K = R.shape[:2]
    cost = np.zeros((n, K))
    back = np.zeros((n, K, 2), int)  # (frame, candidate) each (frame, candidate) came from
    for t in range(1, n):
        steps = [(1, 0.0)] + ([(2, skip_rad)] if t >= 2 else [])
        tot = np.stack([cost[t - d][:, None] + _turn(R[t - d][:, None], R[t][None]) + c for d, c in steps])
        flat = tot.transpose(2, 0, 1).reshape(K, -1)  # (K now, steps x K before)
        best = flat.argmin(1)
        cost[t] = flat[np.arange(K), best]
        back[t] = np.stack([t - 1 - best // K, best % K], 1)
    pick = np.full(n, -1)
    t, k = n - 1, int(cost[-1].argmin())
    while True:
        pick[t] = k
        if t == 0:
            break
        t, k = back[t, k]
    for t in np.flatnonzero(pick < 0):  # passed over: nearest the (kept) frame before it
        pick[t] = int(_turn(R[t - 1, pick[t - 1]][None], R[t]).argmin())
    return pick


def rods_without_spin_jumps(W: np.ndarray, valid: np.ndarray, names: list[str], rods: list[str],
                            trusted: np.ndarray | None = None) -> np.ndarray:
    """(T, M, 4, 4) world_from_body with the jumps of each rod's spin about its own axis (z)
    taken out. A rod's spin cannot be seen; the tracker leaves it where it was, but a
    mistracked frame can leave it turned (double_pendulum, realistic depth, seed 1: by 73 deg
    about the lower link's axis from frame 12 on), and the joint coordinate solved from the
    rotation then reads that turn as motion. Each valid frame is compared with its reference
    (``rod_reference_edges``, among the frames ``trusted`` (T,) bool, default all; its jumps
    already undone): the spin the tracker changed is
    measured against the least rotation carrying the reference's z axis to this one's (the
    reference's x axis made perpendicular to this z); a change above ``SPIN_JUMP_DEG`` is a
    jump, undone in this frame and every frame carried from it (a turn about the rod's own z
    axis). Smaller changes, positions and other bodies are kept as they are."""
    W = np.array(W, float)
    z_axis = np.array([0.0, 0.0, 1.0])
    for m in [names.index(r) for r in rods]:
        frames = np.flatnonzero(valid[:, m])
        turn: dict[int, float] = {}
        trust = None if trusted is None else trusted[frames]
        for ref, t in rod_reference_edges(W[frames, m, :3, 2], frames, trust):
            turn[t] = turn.get(ref, 0.0)
            if turn[t]:
                W[t, m, :3, :3] = W[t, m, :3, :3] @ se3.rot_axis(z_axis, np.array([turn[t]]))[0]
            x, z = W[t, m, :3, 0], W[t, m, :3, 2]
            carried = W[ref, m, :3, 0] - (W[ref, m, :3, 0] @ z) * z
            if np.linalg.norm(carried) > 0.1:  # z turned by less than ~84 deg from the reference
                jump = float(np.arctan2(np.cross(x, carried) @ z, x @ carried))
                if abs(jump) > np.deg2rad(SPIN_JUMP_DEG):
                    turn[t] += jump
                    W[t, m, :3, :3] = W[t, m, :3, :3] @ se3.rot_axis(z_axis, np.array([jump]))[0]
    return W
