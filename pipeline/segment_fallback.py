"""Segment: the next candidate frames, where the chosen one leaves a library shape unnamed.

The candidate frames are ranked without motion (``segment.segment_frames``); only the chosen
one is named with the motion cue, the full motion cue where a shape is left unnamed
(``segment_missing``) and the nested split (``segment_nested``). A frame ranked first can
still leave a part unnamed after all that while another frame names it: a part hidden behind
another or a few pixels across in one frame is seen whole in another.

``fall_back`` names the next candidates the same way, best ranked first, at most ``FALLBACK``
of them, and keeps the candidate whose naming explains the most library shapes at a size
they can have (``size_cost`` at most the caller's ``fit``), then has the most named parts
the segmenter classed as their shape's type (a box's name on a capsule detection is a
look-alike's), then names the most library shapes that some naming tried (this candidate's or
another's) explains at a fitting size (``confirmed``: a name on a mask over two parts in one
frame counts where another frame shows that part at its size; a shape no frame shows at a
size it can have, such as one absent from the scene, does not); the better ranked on a tie.
It stops at the first that explains every shape with every named part of its shape's class.
Each candidate tried costs one more naming with the motion cue; the sampled depth is read once
for all of them.
"""
from __future__ import annotations

import logging
from typing import Callable, Sequence, TypeVar

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.pipeline.segment_size import size_cost

log = logging.getLogger("vid2sim.pipeline.segment")

FALLBACK = 3  # candidates named after the chosen one, at most, where it leaves a library shape unnamed

C = TypeVar("C")
Parts = tuple[list, list[tuple[float, float]], list[str]]  # (detections, seen extents m, library names)


def explained(parts: Parts, wanted: set[str], shapes: dict[str, Shape], tol: float, fit: float) -> int:
    """How many shapes of ``wanted`` the named ``parts`` explain at a size they can have
    (``size_cost`` of the part's seen extents at most ``fit``; depth recordings)."""
    return len({n for e, n in zip(parts[1], parts[2])
                if n in wanted and size_cost(e, shapes[n], True, tol) <= fit})


def agreeing(parts: Parts, shapes: dict[str, Shape]) -> int:
    """How many of the named ``parts`` the segmenter classed as their library shape's type
    (a box's name on a box detection, not on a capsule)."""
    return sum(CLASSES[d.label] == shapes[n].type for d, n in zip(parts[0], parts[2]))


def confirmed(parts: Parts, fitting: set[str]) -> int:
    """How many library shapes the named ``parts`` name at any size, of those in ``fitting`` (the
    shapes some naming of the candidate frames explains at a size they can have)."""
    return len(fitting & set(parts[2]))


def fall_back(candidates: Sequence[C], best: C, parts: Parts, name: Callable[[C], Parts], rank: Callable[[C], tuple],
              wanted: set[str], shapes: dict[str, Shape], tol: float, fit: float,
              limit: int = FALLBACK) -> tuple[C, Parts]:
    """(candidate, its named parts): ``best`` and its ``parts`` where they name every shape of
    ``wanted``; otherwise the next ``limit`` candidates by ``rank`` (larger first) are named
    with ``name`` until one does, and the one scoring best on (``explained``, ``agreeing``,
    ``confirmed``) is kept (``best`` on a tie, then the better ranked)."""
    if wanted <= set(parts[2]) or limit <= 0:
        return best, parts

    def score(got: Parts) -> tuple[int, int]:
        return explained(got, wanted, shapes, tol, fit), agreeing(got, shapes)

    tried = [(best, parts)]
    others = sorted((c for c in candidates if c is not best), key=rank, reverse=True)[:limit]
    for c in others:
        got = name(c)
        n = score(got)
        log.info("segment: candidate frame %d named as well: %d of %d library shapes at fitting sizes, %d named "
                 "parts of their shape's class (%s)", getattr(c, "frame", -1), n[0], len(wanted), n[1],
                 ", ".join(got[2]))
        tried.append((c, got))
        if n[0] >= len(wanted) and n[1] >= len(got[2]):
            break
    fitting = {n for _, (_, es, ns) in tried for e, n in zip(es, ns)
               if n in wanted and size_cost(e, shapes[n], True, tol) <= fit}
    keys = [score(p) + (confirmed(p, fitting),) for _, p in tried]
    k = max(range(len(tried)), key=lambda j: (keys[j], -j))
    if k > 0:
        log.info("segment: frame %d kept instead: it names %d of %d library shapes at fitting sizes, %d seen at a "
                 "fitting size in some candidate frame", getattr(tried[k][0], "frame", -1), keys[k][0], len(wanted),
                 keys[k][2])
    return tried[k]
