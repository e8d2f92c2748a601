"""What crosses into the inner stage: `_enter` reads back exactly what the launcher wrote,
and refuses anything else as a usage error (pure)."""

from __future__ import annotations

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
       st.lists(PATHS, max_size=3),
       st.lists(st.sampled_from(sorted(spec.TERMINAL_SIGNALS)), max_size=4),
       st.booleans(), PATHS, st.lists(st.text(max_size=10).filter(lambda a: "\0" not in a),
                                      max_size=4))
def test_enter_reads_back_what_the_launcher_wrote(
    level: str, pids: int | None, memory: int | None, writable: list[str],
    exec_files: list[str], keep: list[str], masks: bool, program: str, args: list[str],
) -> None:
    brokered = level == "brokered"
    wrote = Inner(level, pids, memory, tuple(writable), tuple(exec_files), tuple(keep), masks,
                  (program, *args), commands_only=tuple(writable[:1]) if brokered else (),
                  shells=("/usr/bin/bash",) if brokered else (),
                  agent_writable=tuple(writable) if brokered else (),
                  agent_exec=(program,) if brokered else (),
                  agent_connect=(443, 8080) if brokered else ())
    helper_fd = 7 if masks else None
    assert spec.decode(spec.encode(wrote, helper_fd)) == (wrote, helper_fd)


def test_brokered_fields_only_with_the_brokered_level() -> None:
    for inner in (Inner("standard", shells=("/bin/sh",), agent_exec=("/x",), command=("/x",)),
                  Inner("brokered", command=("/x",))):
        _refused(spec.encode(inner, None))
        try:
            spec.decode(spec.encode(inner, None))
        except SandboxError:
            continue
        raise AssertionError(f"read: {inner}")


def _refused(data: bytes) -> None:
    try:
        spec.decode(data)
    except SandboxError as error:
        assert error.status == EXIT_USAGE and error.message.startswith("_enter: ")


GOOD = spec.encode(Inner("standard", max_pids=64, writable=("/w",),
                         command=("/bin/true", "x")), None).split(b"\0")
TOKENS = st.sampled_from([b"", b"0", b"1", b"2", b"99999999", b"/x", b"harsh", b"level",
                          b"command", b"helper_fd", "\u00e9".encode(), b"\xff", b"-1"])


@settings(max_examples=500, deadline=None)
@given(st.integers(0, len(GOOD) - 1), TOKENS | st.binary(max_size=6))
def test_a_record_with_one_token_changed_is_read_or_refused(at: int, token: bytes) -> None:
    _refused(b"\0".join([*GOOD[:at], token, *GOOD[at + 1 :]]))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(GOOD) - 1), st.lists(TOKENS, max_size=3))
def test_a_record_with_tokens_inserted_or_dropped_is_read_or_refused(
    at: int, tokens: list[bytes],
) -> None:
    _refused(b"\0".join([*GOOD[:at], *tokens, *GOOD[at + 1 :]]))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_are_read_or_refused(data: bytes) -> None:
    _refused(data)


def test_a_standard_stream_is_never_the_helper() -> None:
    record = spec.encode(Inner("standard", late_masks=True, command=("/bin/true",)), 2)
    try:
        spec.decode(record)
    except SandboxError as error:
        assert error.status == EXIT_USAGE
    else:
        raise AssertionError("accepted descriptor 2 as the helper")


def test_a_huge_count_allocates_nothing() -> None:
    huge = list(GOOD)
    huge[huge.index(b"writable") + 1] = b"9999999"
    _refused(b"\0".join(huge))
    _refused(b"[" * 200_000)


def test_a_nul_in_an_argument_is_refused_by_the_writer() -> None:
    try:
        spec.encode(Inner("standard", command=("/bin/echo", "a\0b")), None)
    except SandboxError as error:
        assert error.status == EXIT_USAGE
    else:
        raise AssertionError("encoded a NUL")


def test_what_the_launcher_never_writes_is_refused() -> None:
    def changed(name: str, *values: bytes) -> bytes:
        at = GOOD.index(name.encode())
        count = int(GOOD[at + 1])
        return b"\0".join([*GOOD[: at + 1], str(len(values)).encode(), *values,
                            *GOOD[at + 2 + count :]])

    for name, values in (("command", (b"bin/true",)), ("command", ()),
                         ("writable", (b"relative",)), ("level", (b"lenient",)),
                         ("keep_ignored", (b"usr1",)), ("max_pids", (b"-1",)),
                         ("max_pids", (b"1", b"2")), ("helper_fd", (b"5",)),
                         ("late_masks", (b"yes",)), ("max_memory", ("\u0661".encode(),)),
                         ("max_memory", (b"9999999999999999999",))):
        try:
            spec.decode(changed(name, *values))
        except SandboxError as error:
            assert error.status == EXIT_USAGE
        else:
            raise AssertionError(f"accepted {name} = {values}")
    spec.decode(b"\0".join(GOOD))  # and the record itself is read


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12) | st.sampled_from(["1" * 5000, "²", "7"]), max_size=4))
def test_any_command_line_names_one_descriptor_or_is_refused(argv: list[str]) -> None:
    try:
        assert enter.parse(argv) >= 0
    except SandboxError as error:
        assert error.status == EXIT_USAGE and error.message.startswith("_enter: ")
