"""Compare an inferred ``Articulation`` with ground truth (truth.json's dict).

Used by the articulate tests and ``scripts/bench_articulate.py``. What counts as the
same tree: bodies welded together by fixed joints (including to the world) form one
rigid group; the groups must agree, and every moving truth joint must have an
inferred joint of the same type between the same two groups (in either direction:
the root of a floating mechanism, and so the direction of its joints, is a free
choice). Floating components compare their root joint type (free / planar).

Axis and pivot errors are measured in world coordinates at frame 0, except for the
joints of a floating mechanism when ``body_frames`` is given: there the world-frame-0
axis of a joint is only as good as the root's tracked orientation in frame 0 (the
joint-coordinate convention anchors it there), so the errors are measured in the
parent body's frame (inferred joint through the tracked frame-0 pose, truth through
the true one); ``axis_err_world_deg`` always holds the world-frame error.
"""
from __future__ import annotations

import numpy as np

from vid2sim.models import geometry


def add_noise(world_from_body: np.ndarray, sigma_pos: float, sigma_rot_deg: float, seed: int = 0) -> np.ndarray:
    """Per-component Gaussian noise: positions + N(0, sigma_pos) in world, orientations
    R exp(N(0, sigma_rot)) (about the body's own axes). (T, M, 4, 4) -> same."""
    rng = np.random.default_rng(seed)
    W = np.array(world_from_body, float)
    shape = W.shape[:2]
    W[..., :3, 3] += rng.normal(0, sigma_pos, shape + (3,))
    W[..., :3, :3] = W[..., :3, :3] @ geometry.exp_so3(rng.normal(0, np.deg2rad(sigma_rot_deg), shape + (3,)))
    return W


def _groups(bodies: list[str], joints: list[dict]) -> dict[str, str]:
    """Rigid group of every body: its members' names joined by '+' (with 'world' in
    the group of bodies welded to the world)."""
    parent = {b: b for b in ["world", *bodies]}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for j in joints:
        if j["type"] == "fixed":
            a, b = find(j["parent"]), find(j["child"])
            if a != b:
                if b == "world":
                    a, b = b, a
                parent[b] = a
    members: dict[str, list[str]] = {}
    for b in ["world", *bodies]:
        members.setdefault(find(b), []).append(b)
    return {b: "+".join(sorted(members[find(b)])) for b in ["world", *bodies]}


def _components(bodies: list[str], joints: list[dict]) -> dict[str, int]:
    """Connected component id of every body, ignoring root joints to the world."""
    import networkx as nx

    G = nx.Graph()
    G.add_nodes_from(bodies)
    G.add_edges_from((j["parent"], j["child"]) for j in joints if j["parent"] != "world")
    return {b: i for i, comp in enumerate(nx.connected_components(G)) for b in comp}


def _line_distance(p_true, a_true, p, a) -> float:
    """Pivot-line error: max distance of each line's pivot from the other line."""
    def d(x, c, s):
        v = np.asarray(x) - np.asarray(c)
        return float(np.linalg.norm(v - (v @ s) * s))
    a_true = np.asarray(a_true) / np.linalg.norm(a_true)
    a = np.asarray(a) / np.linalg.norm(a)
    return max(d(p_true, p, a), d(p, p_true, a_true))


def _axis_error_deg(a_true, a) -> float:
    c = abs(float(np.dot(a_true, a)) / (np.linalg.norm(a_true) * np.linalg.norm(a)))
    return float(np.rad2deg(np.arccos(min(1.0, c))))


def compare(art, truth: dict, body_frames: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """Score ``art`` against ``truth`` (truth.json dict). body_frames: (tracked, true)
    world_from_body at frame 0, (M, 4, 4) each, bodies in truth order. Returns
    ``{"tree_ok", "types_ok", "type_accuracy", "joints": [per truth joint: name, type,
    found (type or None), correct, axis_err_deg, axis_err_world_deg, pivot_err_m]}``."""
    bodies = [b["name"] for b in truth["bodies"]]
    tj = truth["joints"]
    mj = [j.to_json() if hasattr(j, "to_json") else dict(j) for j in art.joints]
    gt, gm = _groups(bodies, tj), _groups(bodies, mj)
    # same partition into rigid groups?
    part = lambda g: {frozenset(b for b in g if g[b] == r) for r in set(g.values())}  # noqa: E731
    groups_ok = part(gt) == part(gm)
    roots_t = {j["child"]: j for j in tj if j["type"] in ("free", "planar") and j["parent"] == "world"}
    roots_m = [j for j in mj if j["type"] in ("free", "planar") and j["parent"] == "world"]
    comp_t = _components(bodies, tj)
    floating_comps = {comp_t[b] for b in roots_t}
    bidx = {b: i for i, b in enumerate(bodies)}

    def frame_of(j, m):
        """(axis_true, pivot_true, axis_mine, pivot_mine) in the frame the errors use."""
        at, pt, am, pm = (np.asarray(x, float) for x in (j["axis"], j["pivot"], m["axis"], m["pivot"]))
        if body_frames is None or j["parent"] == "world" or comp_t[j["parent"]] not in floating_comps:
            return at, pt, am, pm
        Wm, Wt = body_frames[0][bidx[j["parent"]]], body_frames[1][bidx[j["parent"]]]
        ti, mi = geometry.inv(Wt), geometry.inv(Wm)
        return ti[:3, :3] @ at, ti[:3, :3] @ pt + ti[:3, 3], mi[:3, :3] @ am, mi[:3, :3] @ pm + mi[:3, 3]

    def key(j, g):
        return frozenset((g[j["parent"]], g[j["child"]]))

    moving_m = {}
    for j in mj:
        if j["type"] not in ("fixed", "free", "planar"):
            moving_m.setdefault(key(j, gm), []).append(j)
    rows = []
    for j in tj:
        row = {"name": j["name"], "type": j["type"], "found": None, "correct": False,
               "axis_err_deg": None, "axis_err_world_deg": None, "pivot_err_m": None}
        if j["type"] == "fixed":
            ok = gm[j["parent"]] == gm[j["child"]]
            row.update(found="fixed" if ok else None, correct=bool(ok))
        elif j["child"] in roots_t and j["type"] in ("free", "planar"):
            comp = comp_t[j["child"]]
            mine = [m for m in roots_m if comp_t.get(m["child"]) == comp]
            if mine:
                m = mine[0]
                row.update(found=m["type"], correct=m["type"] == j["type"])
                if j["type"] == "planar" and m["type"] == "planar":
                    row["axis_err_deg"] = _axis_error_deg(j["axis"], m["axis"])
        else:
            cands = moving_m.get(key(j, gt), []) if groups_ok else []
            if cands:
                m = min(cands, key=lambda m: _axis_error_deg(j["axis"], m["axis"]))
                at, pt, am, pm = frame_of(j, m)
                row.update(found=m["type"], correct=m["type"] == j["type"], axis_err_deg=_axis_error_deg(at, am),
                           axis_err_world_deg=_axis_error_deg(j["axis"], m["axis"]))
                if j["type"] == "revolute" and m["type"] == "revolute":
                    row["pivot_err_m"] = _line_distance(pt, at, pm, am)
        rows.append(row)
    n_moving_t = sum(1 for j in tj if j["type"] not in ("fixed",))
    n_moving_m = sum(1 for j in mj if j["type"] not in ("fixed",))
    tree_ok = groups_ok and all(r["found"] is not None for r in rows) and n_moving_t == n_moving_m
    return {"tree_ok": bool(tree_ok), "types_ok": bool(all(r["correct"] for r in rows)),
            "type_accuracy": float(np.mean([r["correct"] for r in rows])) if rows else 1.0, "joints": rows}


def pose_errors(W_fk: np.ndarray, W: np.ndarray, valid: np.ndarray | None = None) -> dict[str, float]:
    """RMS position (m) and rotation (rad) difference of two (T, M, 4, 4) pose sets."""
    dp = np.linalg.norm(W_fk[..., :3, 3] - W[..., :3, 3], axis=-1)
    dr = geometry.rotation_angle(np.swapaxes(W_fk[..., :3, :3], -1, -2) @ W[..., :3, :3])
    if valid is not None:
        dp, dr = dp[valid], dr[valid]
    return {"pos_rms_m": float(np.sqrt(np.mean(dp**2))), "rot_rms_rad": float(np.sqrt(np.mean(dr**2))),
            "pos_max_m": float(dp.max()), "rot_max_rad": float(dr.max())}
