"""`_enter`'s command line: it reads back exactly what the launcher wrote (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox import enter
from claude_sandbox.errors import EXIT_USAGE, SandboxError
from claude_sandbox.limits import KernelSettings, enter_argv

PATHS = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                max_size=20).map(lambda tail: "/" + tail)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(enter.LEVELS), st.none() | st.integers(1, 2**31),
       st.none() | st.integers(1, 2**62), st.lists(PATHS, max_size=3),
       st.lists(PATHS, max_size=3), st.lists(st.text(max_size=10), max_size=4))
def test_enter_reads_back_what_the_launcher_wrote(
    level: str, pids: int | None, memory: int | None, writable: list[str],
    exec_files: list[str], agent_args: list[str],
) -> None:
    wrote = KernelSettings(level, pids, memory, tuple(writable), tuple(exec_files))
    entry, agent = enter.parse([*enter_argv(wrote), "--", "/usr/bin/agent", *agent_args])
    assert (entry.level, entry.max_pids, entry.max_memory, entry.writable,
            entry.exec_files) == (level, pids, memory, tuple(writable), tuple(exec_files))
    assert agent == ["/usr/bin/agent", *agent_args]  # a `--` among them stays the agent's


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["--level", "--nproc", "--data", "--writable", "--exec-file",
                                 "--keep-ignored", "--", "harsh", "/x", "1" * 5000, "-1",
                                 "INT,QUIT", "HUP"]), max_size=10)
       | st.lists(st.text(max_size=12), max_size=8))
def test_any_command_line_parses_or_is_refused_as_usage(argv: list[str]) -> None:
    try:
        enter.parse(argv)
    except SandboxError as error:
        assert error.status == EXIT_USAGE and error.message.startswith("_enter: ")
