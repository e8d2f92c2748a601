"""Frozen records (core/record.py): built as a dataclass is, refused as a dataclass
refuses, never changed after construction."""

from __future__ import annotations

import pytest

from claude_sandbox.core.record import record, replace


@record
class Pair:
    left: str
    right: int = 2
    tags: tuple[str, ...] = ()


@pytest.mark.parametrize("made", [
    lambda: Pair("a", 2, ()),
    lambda: Pair("a"),
    lambda: Pair(left="a"),
    lambda: Pair("a", tags=()),
    lambda: Pair(tags=(), right=2, left="a"),
])
def test_positional_keyword_and_default_values_make_the_same_record(made: object) -> None:
    built = made()  # type: ignore[operator]
    assert built == Pair("a", 2, ()) and hash(built) == hash(Pair("a", 2, ()))
    assert (built.left, built.right, built.tags) == ("a", 2, ())
    assert repr(built) == "Pair(left='a', right=2, tags=())"


@pytest.mark.parametrize(("made", "said"), [
    (lambda: Pair(), "Pair() missing argument 'left'"),
    (lambda: Pair(right=3), "Pair() missing argument 'left'"),
    (lambda: Pair("a", left="b"), "Pair() got an unexpected or repeated argument 'left'"),
    (lambda: Pair("a", other=1), "Pair() got an unexpected or repeated argument 'other'"),
    (lambda: Pair("a", 1, (), 4), "Pair() takes 3 arguments, 4 given"),
])
def test_a_missing_repeated_unknown_or_extra_argument_is_refused(made: object,
                                                                  said: str) -> None:
    with pytest.raises(TypeError) as info:
        made()  # type: ignore[operator]
    assert str(info.value) == said


def test_a_record_is_never_changed_after_construction() -> None:
    built = Pair("a")
    with pytest.raises(AttributeError):
        built.left = "b"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del built.right  # type: ignore[misc]
    with pytest.raises(AttributeError):
        built.other = 1  # type: ignore[attr-defined]  # slots: no new attributes either
    assert replace(built, right=5) == Pair("a", 5) and built == Pair("a")
