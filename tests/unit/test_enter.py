"""What crosses into the inner stage: `_enter` reads back exactly what the launcher wrote,
and refuses anything else as a usage error (pure)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.core.errors import EXIT_USAGE, SandboxError
from claude_sandbox.inside import enter, spec
from claude_sandbox.inside.spec import Inner

PATHS = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                max_size=20).map(lambda tail: "/" + tail)
CAPS = st.none() | st.integers(0, 2**62)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(spec.LEVELS), CAPS, CAPS, st.lists(PATHS, max_size=3),
       st.lists(PATHS, max_size=3), st.lists(st.sampled_from(spec.SIGNAL_NAMES), max_size=4),
       st.booleans(), PATHS, st.lists(st.text(max_size=10).filter(lambda a: "\0" not in a),
                                      max_size=4))
def test_enter_reads_back_what_the_launcher_wrote(
    level: str, pids: int | None, memory: int | None, writable: list[str],
    exec_files: list[str], keep: list[str], masks: bool, program: str, args: list[str],
) -> None:
    wrote = Inner(level, pids, memory, tuple(writable), tuple(exec_files), tuple(keep), masks,
                  (program, *args))
    helper_fd = 7 if masks else None
    assert spec.decode(spec.encode(wrote, helper_fd)) == (wrote, helper_fd)


def _refused(data: bytes) -> None:
    try:
        spec.decode(data)
    except SandboxError as error:
        assert error.status == EXIT_USAGE and error.message.startswith("_enter: ")


GOOD = json.loads(spec.encode(Inner("standard", command=("/bin/true",)), None))
VALUES = st.none() | st.booleans() | st.integers(-5, 2**70) | st.floats() | st.text(max_size=8) \
    | st.lists(st.text(max_size=8) | st.integers(), max_size=3)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(sorted(GOOD)), VALUES)
def test_a_record_with_one_field_changed_is_read_or_refused(field: str, value: object) -> None:
    _refused(json.dumps(GOOD | {field: value}).encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_are_read_or_refused(data: bytes) -> None:
    _refused(data)


def test_deep_nesting_is_refused_not_a_traceback() -> None:
    _refused(b"[" * 200_000)


def test_what_the_launcher_never_writes_is_refused() -> None:
    for change in ({"command": ["bin/true"]}, {"command": []}, {"writable": ["relative"]},
                   {"level": "lenient"}, {"keep_ignored": ["usr1"]}, {"max_pids": -1},
                   {"helper_fd": 5}, {"extra": 1}, {"late_masks": 1}):
        try:
            spec.decode(json.dumps(GOOD | change).encode())
        except SandboxError as error:
            assert error.status == EXIT_USAGE
        else:
            raise AssertionError(f"accepted {change}")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12) | st.sampled_from(["1" * 5000, "²", "7"]), max_size=4))
def test_any_command_line_names_one_descriptor_or_is_refused(argv: list[str]) -> None:
    try:
        assert enter.parse(argv) >= 0
    except SandboxError as error:
        assert error.status == EXIT_USAGE and error.message.startswith("_enter: ")
