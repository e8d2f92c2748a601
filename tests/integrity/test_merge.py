"""The managed-settings and codex merges: foreign keys kept, idempotent, reversible (pure)."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.install import integrity

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=10,
)
ADMIN_HOOK = {"type": "command", "command": "/opt/corp/audit-prompt"}
SETTINGS = st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=5)


def _admin_settings(extra: dict[str, Any]) -> dict[str, Any]:
    return {
        **extra,
        "permissions": {"deny": ["Read(./.env)"]},
        "env": {"HTTPS_PROXY": "http://proxy.corp:3128"},
        "hooks": {"UserPromptSubmit": [{"hooks": [ADMIN_HOOK]}],
                  "PreToolUse": [{"matcher": "Bash", "hooks": [ADMIN_HOOK]}]},
    }


def _our_commands(settings: dict[str, Any], event: str) -> list[str]:
    return [h["command"] for g in settings["hooks"][event] for h in g["hooks"]
            if h["command"].startswith(integrity.HOOKS_DIR)]


def test_merge_into_nothing_installs_the_policy() -> None:
    merged, added = integrity.merge_settings({})
    assert merged["env"] == {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_SIMPLE": "0"}
    assert added == ("DISABLE_AUTOUPDATER", "CLAUDE_CODE_SIMPLE")
    assert _our_commands(merged, "UserPromptSubmit") == [f"{integrity.HOOKS_DIR}/prompt-gate"]
    assert _our_commands(merged, "SessionStart") == [f"{integrity.HOOKS_DIR}/session-start"]


def test_merge_keeps_the_administrators_policy() -> None:
    admin = _admin_settings({"companyAnnouncements": ["hi"]})
    merged, _ = integrity.merge_settings(admin)
    assert merged["permissions"] == admin["permissions"]
    assert merged["companyAnnouncements"] == ["hi"]
    assert merged["env"]["HTTPS_PROXY"] == "http://proxy.corp:3128"
    assert merged["hooks"]["PreToolUse"] == admin["hooks"]["PreToolUse"]
    assert merged["hooks"]["UserPromptSubmit"][0] == {"hooks": [ADMIN_HOOK]}
    assert len(_our_commands(merged, "UserPromptSubmit")) == 1


def test_an_administrators_own_autoupdater_key_is_not_claimed() -> None:
    merged, added = integrity.merge_settings({"env": {"DISABLE_AUTOUPDATER": "1"}})
    assert added == ("CLAUDE_CODE_SIMPLE",)
    assert integrity.unmerge_settings(merged, added) == {"env": {"DISABLE_AUTOUPDATER": "1"}}


def test_the_unwrapped_drop_in_allows_no_user_or_project_code() -> None:
    dropin = integrity.unwrapped_settings()
    assert dropin["allowManagedHooksOnly"] is True
    assert dropin["allowManagedMcpServersOnly"] is True and dropin["allowedMcpServers"] == []
    for name in integrity.UNWRAPPED_HELPERS:
        wanted = integrity.KEY_HELPER if name == "apiKeyHelper" else integrity.REFUSE_HELPER
        assert dropin[name] == integrity.hook_path(wanted)


@given(SETTINGS)
def test_merge_is_idempotent_and_keeps_foreign_keys(existing: dict[str, Any]) -> None:
    once, _ = integrity.merge_settings(existing)
    twice, added_again = integrity.merge_settings(once)
    assert twice == once
    assert added_again == ()
    for key, value in existing.items():
        if key not in ("env", "hooks"):
            assert once[key] == value
    # What we write is JSON that reads back the same.
    assert json.loads(integrity.settings_text(once)) == once


@given(SETTINGS)
def test_unmerge_takes_out_exactly_ours(existing: dict[str, Any]) -> None:
    merged, added = integrity.merge_settings(existing)
    restored = integrity.unmerge_settings(merged, added)
    for key, value in existing.items():
        if key not in ("env", "hooks"):
            assert restored[key] == value
    env = existing.get("env")
    had_it = isinstance(env, dict) and "DISABLE_AUTOUPDATER" in env
    assert had_it or "DISABLE_AUTOUPDATER" not in restored.get("env", {})
    hooks = restored.get("hooks", {})
    for groups in hooks.values():
        for group in groups:
            if isinstance(group, dict):
                assert not any(integrity.HOOKS_DIR in json.dumps(h) for h in group["hooks"])


def test_unmerge_of_the_administrators_file_restores_it() -> None:
    admin = _admin_settings({})
    merged, added = integrity.merge_settings(admin)
    assert integrity.unmerge_settings(merged, added) == admin


def test_unparseable_settings_are_refused() -> None:
    assert integrity.parse_settings("{ not json") is None
    assert integrity.parse_settings("[1, 2]") is None
    assert integrity.parse_settings("") == {}


def test_codex_block_goes_first_and_is_idempotent() -> None:
    admin = 'model = "o4"\n[mcp_servers.x]\ncommand = "y"\n'
    merged = integrity.codex_merge(admin)
    assert merged is not None
    document = tomllib.loads(merged)
    assert document["check_for_update_on_startup"] is False
    assert document["mcp_servers"] == {"x": {"command": "y"}}
    assert integrity.codex_merge(merged) == merged
    assert integrity.codex_unmerge(merged) == admin


def test_codex_keeps_an_administrators_own_update_setting() -> None:
    admin = "check_for_update_on_startup = true\n"
    assert integrity.codex_merge(admin) == admin


def test_codex_leaves_broken_toml_alone() -> None:
    assert integrity.codex_merge("this is = = not toml") is None


@given(st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True),
                       st.integers() | st.booleans(), max_size=4))
def test_codex_merge_round_trips(values: dict[str, Any]) -> None:
    values.pop("check_for_update_on_startup", None)
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())
    merged = integrity.codex_merge(text)
    assert merged is not None
    assert integrity.codex_merge(merged) == merged
    assert integrity.codex_unmerge(merged) == text
    assert tomllib.loads(merged) == {**values, "check_for_update_on_startup": False}


# Text that json/tomllib refuse with something other than their decode error: a number
# longer than Python converts, and nesting deeper than the parser recurses.
HOSTILE_JSON = ['{"a": ' + "1" * 5000 + "}", "[" * 100_000, '{"a":' * 100_000,
                '{"a":' * 500 + "1" + "}" * 500,  # parses, but too deep to copy and write back
                '{"a": NaN}', '{"a": -Infinity}']  # Python's extensions, not JSON
HOSTILE_TOML = ["a = " + "1" * 5000, "a = " + "[" * 100_000, "a = " + "{b = " * 100_000]


@pytest.mark.parametrize("text", HOSTILE_JSON, ids=["long-number", "deep-array", "deep-object",
                                                     "deep-500", "nan", "infinity"])
def test_managed_settings_we_cannot_read_are_left_alone(text: str) -> None:
    assert integrity.parse_settings(text) is None


@pytest.mark.parametrize("text", HOSTILE_TOML, ids=["long-number", "deep-array", "deep-table"])
def test_codex_config_we_cannot_read_is_left_alone(text: str) -> None:
    assert integrity.codex_merge(text) is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_settings_text_is_read_or_left_alone(text: str) -> None:
    value = integrity.parse_settings(text)
    assert value is None or isinstance(value, dict)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_codex_text_is_extended_to_valid_toml_or_left_alone(text: str) -> None:
    merged = integrity.codex_merge(text)
    assert merged is None or isinstance(tomllib.loads(merged), dict)


def test_settings_as_deep_as_we_accept_merge_and_write_back() -> None:
    text = '{"a":' * 63 + "1" + "}" * 63
    existing = integrity.parse_settings(text)
    assert existing is not None
    merged, _ = integrity.merge_settings(existing)
    assert json.loads(integrity.settings_text(merged))["a"] == existing["a"]
