"""The holder's tools: one that ends without reading its input is answered, not fatal."""

from __future__ import annotations

import time

import pytest

from claude_sandbox.jail import holder


def test_a_tool_that_ends_before_its_input_is_written_is_answered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The packet filter's legacy run carries its rules in its script and may end before
    the holder writes the same text to its standard input (the holder descheduled under
    load): the broken pipe killed the holder, and the launch ended with status 1."""
    spawn = holder._spawn

    def late(*args: object, **kwargs: object) -> object:
        child = spawn(*args, **kwargs)  # type: ignore[arg-type]
        time.sleep(0.05)  # the tool runs and ends meanwhile
        return child

    monkeypatch.setattr(holder, "_spawn", late)
    started = holder.start_tool("x" * 4096, ["/bin/sh", "-c", "echo done; exit 3"])
    assert isinstance(started, holder.Started)
    assert holder.finish_tool(started)[:3] == ["ok", "3", "done\n"]
