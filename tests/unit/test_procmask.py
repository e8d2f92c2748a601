"""What the launcher tells the late-mount helper, and what the helper takes (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.core import wire
from claude_sandbox.launch.facts.rootonly import Walk
from claude_sandbox.launch.session import procmask

PATHS = st.lists(st.text(st.characters(blacklist_characters="\x00",
                                       blacklist_categories=("Cs",)), max_size=12)
                 .map(lambda tail: "/" + tail), max_size=4).map(tuple)
WALKS = st.none() | st.builds(Walk, PATHS.map(lambda p: p[0] if p else "/c"), PATHS, PATHS,
                              PATHS, PATHS, PATHS)


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.booleans(), WALKS)
def test_the_helper_reads_back_what_the_launcher_wrote(outer: bool, noexec: bool,
                                                       walk: Walk | None) -> None:
    fields = procmask.plan_fields(outer, noexec, walk)
    through = wire.unpack(wire.pack(fields), procmask.PLAN_LIMIT)
    assert procmask.read_plan(tuple(through)) == (outer, noexec, walk)


@settings(max_examples=300, deadline=None)
@given(st.booleans(), st.booleans(), WALKS, st.integers(0, 40),
       st.sampled_from(["drop", "add", "change"]), st.sampled_from(["", "x", "2", "99", "٣"]))
def test_anything_else_is_refused_or_read_as_written(outer: bool, noexec: bool,
                                                     walk: Walk | None, at: int, how: str,
                                                     token: str) -> None:
    fields = procmask.plan_fields(outer, noexec, walk)
    at = min(at, len(fields) - 1)
    if how == "drop":
        del fields[at]
    elif how == "add":
        fields.insert(at, token)
    else:
        fields[at] = token
    read = procmask.read_plan(tuple(fields))
    # Refused, or a plan that writes back to exactly these fields: nothing is read past,
    # short of, or beside what the fields say.
    assert read is None or procmask.plan_fields(*read) == fields


def test_the_first_field_and_the_flags_are_checked() -> None:
    assert procmask.read_plan(("plan", "1", "0")) == (True, False, None)
    for fields in ((), ("mask",), ("plan", "1"), ("plan", "2", "0"), ("plan", "1", "0", "/c"),
                   ("plan", "0", "0", "/c", "1")):
        assert procmask.read_plan(fields) is None, fields

