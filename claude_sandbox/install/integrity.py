"""The integrity guard (docs/explanation/architecture.md): agents refuse to work unsandboxed.

The shims are the first line: `claude` on PATH is ours. This module is the
second, for the day something runs the real binary directly (an IDE extension,
a user's own alias, an auto-update that put a fresh binary on PATH):

- Claude Code reads /etc/claude-code/managed-settings.json, a policy tier users
  cannot override. We merge into it a SessionStart hook that warns loudly when
  the session is not sandboxed, a UserPromptSubmit gate that blocks every
  prompt unless the kernel says we are inside (guard.inside_sandbox: a mount
  over the root-owned marker, no_new_privs, no effective capabilities; an
  IS_SANDBOX=1 an outer shell forged counts for nothing), and
  DISABLE_AUTOUPDATER so an update cannot put an unwrapped binary back.
- Codex's managed config turns its update check off.

The hooks are root-owned scripts off PATH under LIBEXEC/hooks, read-only inside
the sandbox, run by the core venv's interpreter in isolated mode. The only
escape hatch is a root-owned flag file (ALLOW_FLAG), which turns the block into
a warning: an unprivileged agent cannot create it.

The merge functions are pure (dict in, dict out) so their properties are
tested without touching /etc; the installer does the writing.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import stat
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from claude_sandbox.core import paths

MANAGED_SETTINGS = "/etc/claude-code/managed-settings.json"
UNWRAPPED_SETTINGS = paths.UNWRAPPED_SETTINGS
EMPTY_SETTINGS = paths.EMPTY_SETTINGS
CODEX_MANAGED_CONFIG = paths.CODEX_MANAGED_CONFIG
ALLOW_FLAG = "/etc/claude-sandbox.allow-unsandboxed"
HOOKS_DIR = f"{paths.LIBEXEC}/hooks"
# The installer records here which managed-settings keys were ours, so that
# uninstall removes only those and leaves an administrator's identical ones.
STATE_FILE = f"{paths.LIBEXEC}/integrity.json"

# Claude Code's hook contract (checked against 2.1.x's built-in hook docs):
# the event arrives as JSON on stdin; for UserPromptSubmit, exit 2 blocks the
# prompt, erases it and shows stderr to the user; any other non-zero status is
# NOT blocking, so the gate must turn its own failures into exit 2.
EXIT_BLOCK = 2
# CLAUDE_CODE_SIMPLE=1 (also `--bare`) skips every hook, the managed gate
# included; a managed env value wins over one in any user or project settings
# file, so a planted settings file cannot switch the gate off (check 54).
ENV_POLICY = (("DISABLE_AUTOUPDATER", "1"), ("CLAUDE_CODE_SIMPLE", "0"))
# What an unwrapped Claude Code may run of the user's and the workspace's
# settings: nothing (ADR 0005). Hooks and MCP servers come only from managed
# settings, none at all; the settings that name a helper program are pinned to
# the refusal hook. An unwrapped session is blocked at its first prompt anyway;
# these keep what runs before that prompt (SessionStart hooks, MCP servers,
# helpers) from running code an agent planted.
UNWRAPPED_HELPERS = ("apiKeyHelper", "awsAuthRefresh", "awsCredentialExport",
                     "gcpAuthRefresh", "otelHeadersHelper", "proxyAuthHelper")
CODEX_BEGIN = "# >>> claude-sandbox: managed by the claude-sandbox installer; do not edit"
CODEX_END = "# <<< claude-sandbox"
CODEX_BLOCK = (
    f"{CODEX_BEGIN}\n"
    "# An update would replace the agent outside the sandbox's control.\n"
    "check_for_update_on_startup = false\n"
    f"{CODEX_END}\n"
)


@dataclass(frozen=True, slots=True)
class Hook:
    event: str  # the Claude Code hook event
    name: str  # the script's file name under HOOKS_DIR
    role: str  # the argument hook_main dispatches on


HOOKS: tuple[Hook, ...] = (
    Hook("SessionStart", "session-start", "session-start"),
    Hook("UserPromptSubmit", "prompt-gate", "prompt-gate"),
)
# Not a Claude Code hook: the program the unwrapped drop-in names for every
# helper setting. It prints nothing and fails, so no credential helper runs.
REFUSE_HELPER = Hook("", "refuse-helper", "refuse-helper")
# apiKeyHelper's stand-in: the same refusal, except that where an administrator
# accepted unwrapped sessions it answers with the key from the environment.
KEY_HELPER = Hook("", "api-key-helper", "api-key-helper")

NOT_SANDBOXED = (
    "claude-sandbox: THIS SESSION IS NOT SANDBOXED. Claude Code is running outside "
    "claude-sandbox (no sandbox mount, or capabilities/no_new_privs say otherwise), so it can "
    "read credentials and reach the private network. Start it as `claude` from a shell, "
    "whose shim runs it inside the sandbox."
)
BLOCKED = (
    NOT_SANDBOXED + " Every prompt is blocked until then. An administrator who accepts the risk "
    f"can create the root-owned file {ALLOW_FLAG} to turn this block into a warning."
)


def hook_path(hook: Hook) -> str:
    return os.path.join(HOOKS_DIR, hook.name)


def hook_text(hook: Hook) -> str:
    """The script: the core interpreter by absolute path, -I (no PYTHON*, cwd or user site)."""
    return (
        f"#!{paths.CORE_VENV}/bin/python -I\n"
        f"# claude-sandbox {hook.event} hook: root-owned, placed by the installer. Do not edit.\n"
        "import sys\n"
        "from claude_sandbox.install.integrity import hook_main\n"
        f"sys.exit(hook_main({hook.role!r}))\n"
    )


# ---------------------------------------------------------------- the hooks at run time

def allow_flag_set(path: str = ALLOW_FLAG) -> bool:
    """The escape hatch counts only as a root-owned regular file nobody else can replace."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022


def _drain_stdin() -> None:
    # The event JSON is read and ignored: the decision rests on kernel facts only,
    # never on what the caller says about itself.
    with contextlib.suppress(OSError, ValueError):
        sys.stdin.read()


def prompt_gate(inside: bool, allowed: bool) -> tuple[int, str, str]:
    """Pure: (exit status, stdout, stderr) for the UserPromptSubmit gate."""
    if inside:
        return 0, "", ""
    if allowed:
        warning = f"{NOT_SANDBOXED} (allowed by {ALLOW_FLAG})"
        return 0, json.dumps({"systemMessage": warning}) + "\n", warning + "\n"
    return EXIT_BLOCK, "", BLOCKED + "\n"


def session_start(inside: bool) -> tuple[int, str, str]:
    """Pure: the SessionStart check never blocks (it cannot), it warns loudly."""
    if inside:
        return 0, "", ""
    output = {
        "systemMessage": NOT_SANDBOXED,
        "hookSpecificOutput": {"hookEventName": "SessionStart",
                               "additionalContext": NOT_SANDBOXED},
    }
    return 0, json.dumps(output) + "\n", NOT_SANDBOXED + "\n"


def refuse_helper(allowed: bool, environ: Mapping[str, str]) -> tuple[int, str, str]:
    """Pure: what stands in for every helper program of an unwrapped session.

    It runs nothing of the user's or the workspace's settings. Claude Code waits
    for ever on a failing apiKeyHelper, so where an administrator accepted
    unwrapped sessions (ALLOW_FLAG) it answers with the key from the
    environment when there is one; a login-based session then needs that key.
    """
    key = environ.get("ANTHROPIC_API_KEY", "")
    if allowed and key:
        return 0, key + "\n", ""
    return 1, "", f"{NOT_SANDBOXED} (helper programs do not run)\n"


def hook_main(role: str) -> int:
    try:
        from claude_sandbox.core.guard import inside_sandbox

        _drain_stdin()
        inside = inside_sandbox()
        if role == "prompt-gate":
            status, out, err = prompt_gate(inside, allow_flag_set())
        elif role == "session-start":
            status, out, err = session_start(inside)
        elif role == "refuse-helper":
            status, out, err = refuse_helper(False, {})
        elif role == "api-key-helper":
            status, out, err = refuse_helper(allow_flag_set(), os.environ)
        else:
            status, out, err = EXIT_BLOCK, "", f"claude-sandbox: unknown hook role {role}\n"
    except Exception as error:
        # Fail closed: any status but 2 lets the prompt through.
        status, out, err = EXIT_BLOCK, "", f"claude-sandbox: the sandbox gate failed ({error})\n"
    sys.stdout.write(out)
    sys.stderr.write(err)
    return status


# ---------------------------------------------------------------- managed settings (pure)

def _is_ours(hook_entry: Any) -> bool:
    return isinstance(hook_entry, dict) and str(hook_entry.get("command", "")).startswith(
        HOOKS_DIR + "/")


def _without_ours(groups: Any) -> list[Any]:
    """Matcher groups with our hook commands taken out (and groups left empty dropped)."""
    kept: list[Any] = []
    for group in groups if isinstance(groups, list) else []:
        if isinstance(group, dict) and isinstance(group.get("hooks"), list):
            hooks = [h for h in group["hooks"] if not _is_ours(h)]
            if not hooks and group["hooks"]:
                continue
            group = {**group, "hooks": hooks}
        kept.append(group)
    return kept


def our_groups(hook: Hook) -> list[dict[str, Any]]:
    return [{"hooks": [{"type": "command", "command": hook_path(hook)}]}]


def merge_settings(existing: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Our policy merged into `existing`; also the env keys we added (for uninstall).

    Everything else is kept: foreign keys, the administrator's own hooks and env.
    Ours replace earlier copies of ours, so the merge is idempotent.
    """
    merged = copy.deepcopy(dict(existing))
    env = merged.get("env")
    env = dict(env) if isinstance(env, dict) else {}
    added = tuple(name for name, _ in ENV_POLICY if name not in env)
    env.update(ENV_POLICY)
    merged["env"] = env
    hooks = merged.get("hooks")
    hooks = dict(hooks) if isinstance(hooks, dict) else {}
    for hook in HOOKS:
        hooks[hook.event] = [*_without_ours(hooks.get(hook.event)), *our_groups(hook)]
    merged["hooks"] = hooks
    return merged, added


def unmerge_settings(existing: Mapping[str, Any], added_env: tuple[str, ...]) -> dict[str, Any]:
    """`existing` with our hooks and the env keys we added removed; empty containers dropped."""
    result = copy.deepcopy(dict(existing))
    if isinstance(result.get("hooks"), dict):
        hooks = {}
        for event, groups in result["hooks"].items():
            kept = _without_ours(groups)
            if kept:
                hooks[event] = kept
        if hooks:
            result["hooks"] = hooks
        else:
            del result["hooks"]
    if isinstance(result.get("env"), dict):
        env = {k: v for k, v in result["env"].items() if k not in added_env}
        if env:
            result["env"] = env
        else:
            del result["env"]
    return result


def unwrapped_settings() -> dict[str, Any]:
    """The drop-in for sessions outside the sandbox (UNWRAPPED_SETTINGS)."""
    refuse = hook_path(REFUSE_HELPER)
    return {
        "allowManagedHooksOnly": True,
        "allowManagedMcpServersOnly": True,
        "allowedMcpServers": [],
        "strictKnownMarketplaces": [],
        **{name: refuse for name in UNWRAPPED_HELPERS},
        "apiKeyHelper": hook_path(KEY_HELPER),
    }


def settings_text(settings: Mapping[str, Any]) -> str:
    return json.dumps(settings, indent=2) + "\n"


# Deeper than any settings file; merge_settings copies and json.dumps writes the
# document back recursively, and would fail part-way on a deeper one.
_MAX_DEPTH = 64


def _depth(value: object) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return deepest


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")  # Python would write it back as is


def parse_settings(text: str) -> dict[str, Any] | None:
    """The managed settings as a dict, or None when we cannot safely rewrite them."""
    try:
        value = json.loads(text, parse_constant=_not_json) if text.strip() else {}
    except (ValueError, RecursionError):  # not JSON, an over-long number, too deep
        return None
    if not isinstance(value, dict) or _depth(value) > _MAX_DEPTH:
        return None
    return value


# ---------------------------------------------------------------- codex managed config (pure)

def codex_merge(text: str) -> str | None:
    """`text` with our block at the top; None when it is not TOML we can safely extend.

    The block goes first because a bare key after a [table] header belongs to
    that table. An administrator's own top-level check_for_update_on_startup
    is their policy: left as it is.
    """
    base = codex_unmerge(text)
    try:
        document = tomllib.loads(base)
    except (ValueError, RecursionError):  # not TOML (TOMLDecodeError), or too deep
        return None
    if "check_for_update_on_startup" in document:
        return base
    return CODEX_BLOCK + base


def codex_unmerge(text: str) -> str:
    start = text.find(CODEX_BEGIN)
    end = text.find(CODEX_END, start)
    if start < 0 or end < 0:
        return text
    end = text.find("\n", end)
    return text[:start] + (text[end + 1:] if end >= 0 else "")
