"""Codex's managed config inside: our sandbox_mode first, the operator's kept, valid TOML."""

from __future__ import annotations

import tomllib

from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.launch.planner import codexconfig


def test_the_operators_settings_stay_and_sandbox_mode_is_ours() -> None:
    text = ('sandbox_mode = "read-only"\ncheck_for_update_on_startup = false\n'
            '[mcp_servers.x]\ncommand = "y"\nsandbox_mode = "kept-in-a-table"\n')
    got = tomllib.loads(codexconfig.inside(text))
    assert got["sandbox_mode"] == "danger-full-access"
    assert got["check_for_update_on_startup"] is False
    assert got["mcp_servers"]["x"]["sandbox_mode"] == "kept-in-a-table"
    assert tomllib.loads(codexconfig.inside(""))["sandbox_mode"] == "danger-full-access"


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "sandbox_mode", "model"]),
                       st.text(alphabet="abc xyz", max_size=8), max_size=4))
def test_any_flat_config_stays_valid(values: dict[str, str]) -> None:
    text = "".join(f'{key} = "{value}"\n' for key, value in values.items())
    got = tomllib.loads(codexconfig.inside(text))
    assert got["sandbox_mode"] == "danger-full-access"
    for key, value in values.items():
        if key != "sandbox_mode":
            assert got[key] == value
