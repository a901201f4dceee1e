"""segment_fallback: the next candidate frames where the chosen one leaves a library shape unnamed."""
import numpy as np
import pytest

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment import SegmentConfig
from vid2sim.pipeline.segment_fallback import agreeing, confirmed, explained, fall_back

SHAPES = {"hub": Shape("hub", "box", size=(0.12, 0.12, 0.08)),
          "arm": Shape("arm", "capsule", radius=0.02, length=0.3),
          "ball": Shape("ball", "sphere", radius=0.045)}
WANTED = set(SHAPES)
M = np.zeros((4, 4), bool)


def det(cls):
    return Detection(M, CLASSES.index(cls), 0.5)


HUB, ARM, BALL = ((det("box"), (0.12, 0.10), "hub"), (det("capsule"), (0.30, 0.04), "arm"),
                  (det("sphere"), (0.09, 0.09), "ball"))


def parts(*named):
    return [n[0] for n in named], [n[1] for n in named], [n[2] for n in named]


def test_explained_counts_only_names_at_a_size_their_shape_can_have():
    wrong_size = (det("box"), (0.60, 0.50), "hub")
    assert explained(parts(HUB, ARM), WANTED, SHAPES, 1.6, 1.0) == 2
    assert explained(parts(wrong_size, ARM), WANTED, SHAPES, 1.6, 1.0) == 1
    # a box's name on a capsule detection is counted as named but not as agreeing
    assert agreeing(parts((det("capsule"), (0.12, 0.10), "hub"), ARM), SHAPES) == 1


def test_a_frame_naming_every_shape_is_kept_without_looking_further():
    asked = []
    best, got = fall_back(["a", "b"], "a", parts(HUB, ARM, BALL), lambda c: asked.append(c),
                          lambda c: 0, WANTED, SHAPES, 1.6, 1.0)
    assert best == "a" and got[2] == ["hub", "arm", "ball"] and asked == []


def test_the_next_candidates_are_named_and_the_one_naming_most_of_its_class_is_kept():
    # "a" (chosen) leaves the arm unnamed; "b" names all three with the hub's name on a capsule
    # (a look-alike), "c" all three on parts of their shape's class; "d" is ranked below the limit
    named = {"b": parts((det("capsule"), (0.10, 0.08), "hub"), ARM, BALL), "c": parts(HUB, ARM, BALL),
             "d": parts(HUB, ARM, BALL)}
    rank = {"a": 4, "b": 3, "c": 2, "d": 1}
    asked = []

    def name(c):
        asked.append(c)
        return named[c]

    best, got = fall_back(["a", "b", "c", "d"], "a", parts(HUB, BALL), name, rank.get, WANTED, SHAPES, 1.6, 1.0,
                          limit=2)
    assert best == "c" and asked == ["b", "c"]
    assert [CLASSES[d.label] for d in got[0]] == ["box", "capsule", "sphere"]
    # limit 1: only "b" is looked at; it names more than "a", so it is kept
    asked.clear()
    best, _ = fall_back(["a", "b", "c", "d"], "a", parts(HUB, BALL), name, rank.get, WANTED, SHAPES, 1.6, 1.0,
                        limit=1)
    assert best == "b" and asked == ["b"]


def test_a_candidate_naming_no_more_leaves_the_chosen_one():
    best, got = fall_back(["a", "b"], "a", parts(HUB, BALL), lambda c: parts(HUB), lambda c: c == "a",
                          WANTED, SHAPES, 1.6, 1.0)
    assert best == "a" and got[2] == ["hub", "ball"]
    best, _ = fall_back(["a", "b"], "a", parts(HUB, BALL), lambda c: parts(HUB, ARM, BALL), lambda c: 0,
                        WANTED, SHAPES, 1.6, 1.0, limit=0)
    assert best == "a"


def test_a_name_on_an_oversized_mask_counts_where_another_frame_shows_that_part_at_its_size():
    # tree5 s131's pattern: "a" (chosen) names hub and arm at fitting sizes, the ball nowhere; "b" names
    # hub and ball at fitting sizes and the arm on a mask over the arm and a fin (0.60 x 0.20 m, size cost
    # above 1). Explained 2 and agreeing 2 in both; "a" shows the arm at its size, so "b"'s arm is confirmed
    # and "b" names all three shapes the frames show: "b" is kept.
    long_arm = (det("cylinder"), (0.60, 0.20), "arm")
    a, b = parts(HUB, ARM), parts(HUB, long_arm, BALL)
    assert [explained(p, WANTED, SHAPES, 1.6, 1.0) for p in (a, b)] == [2, 2]
    assert [agreeing(p, SHAPES) for p in (a, b)] == [2, 2]
    assert confirmed(a, {"hub", "arm", "ball"}) == 2 and confirmed(b, {"hub", "arm", "ball"}) == 3
    best, got = fall_back(["a", "b"], "a", a, lambda c: b, lambda c: c == "a", WANTED, SHAPES, 1.6, 1.0)
    assert best == "b" and got[2] == ["hub", "arm", "ball"]


def test_a_shape_no_frame_shows_at_its_size_does_not_win_a_tie():
    # a library sphere absent from the scene, named in "b" on a capsule piece of the arm (0.30 x 0.04 m: cost
    # far above 1 for a 0.09 m ball) and nowhere at its size: "b" ties "a" on every key and "a" is kept,
    # so segment still reports the ball missing
    ball_on_arm = (det("capsule"), (0.30, 0.04), "ball")
    a, b = parts(HUB, ARM), parts(HUB, ARM, ball_on_arm)
    best, got = fall_back(["a", "b"], "a", a, lambda c: b, lambda c: c == "a", WANTED, SHAPES, 1.6, 1.0)
    assert explained(b, WANTED, SHAPES, 1.6, 1.0) == 2
    assert best == "a" and got[2] == ["hub", "arm"]


def test_fallback_must_not_be_negative():
    with pytest.raises(ValueError, match="fallback must be >= 0"):
        SegmentConfig(fallback=-1)
