"""The agents' managed settings the installer merges: Claude Code's hooks and policy,
the unwrapped sessions' drop-in, codex's update check; and their removal."""

from __future__ import annotations

import contextlib
import functools
import json
import os
from pathlib import Path

from claude_sandbox.install import integrity
from claude_sandbox.install.report import (
    Report,
    differs,
    read,
    write,
)


def _integrity_state() -> dict[str, list[str] | bool]:
    try:
        data = json.loads(Path(integrity.STATE_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def install_hooks(report: Report) -> None:
    for hook in (*integrity.HOOKS, integrity.REFUSE_HELPER, integrity.KEY_HELPER):
        path, text = integrity.hook_path(hook), integrity.hook_text(hook)
        what = f"{hook.event} hook" if hook.event else f"{hook.name} (a helper setting's stand-in)"
        report.step(f"{what} {path}", differs(path, text, 0o755),
                    functools.partial(write, path, text, 0o755))


def install_managed_settings(report: Report) -> None:
    """Merge our policy into Claude Code's managed settings; an administrator's keys stay."""
    path = integrity.MANAGED_SETTINGS
    text = read(path)
    existing = integrity.parse_settings(text or "")
    if existing is None:
        print(f"  warning    {path} is not a JSON object we can parse: left alone, so the "
              "Claude Code prompt gate and auto-update policy are NOT installed")
        return
    merged, added = integrity.merge_settings(existing)
    state = _integrity_state()
    owned = sorted({*state.get("env_added", []), *added})  # type: ignore[misc]
    created = bool(state.get("created_settings", text is None))
    wanted_state = json.dumps({"env_added": owned, "created_settings": created}) + "\n"
    wanted = integrity.settings_text(merged)
    # Rewrite only when our policy is missing: an administrator's formatting survives.
    needed = text is None or merged != existing or differs(path, text, 0o644)
    report.step(f"Claude Code managed settings {path} (prompt gate, session check, "
                "auto-update off)", needed, lambda: write(path, wanted, 0o644))
    report.step(f"integrity record {integrity.STATE_FILE}",
                differs(integrity.STATE_FILE, wanted_state, 0o644),
                lambda: write(integrity.STATE_FILE, wanted_state, 0o644))


def install_unwrapped_settings(report: Report) -> None:
    """Our own drop-in: what an unwrapped Claude Code may run (nothing the agent wrote)."""
    path = integrity.UNWRAPPED_SETTINGS
    text = integrity.settings_text(integrity.unwrapped_settings())
    report.step(f"Claude Code drop-in {path} (unwrapped sessions: managed hooks and no MCP "
                "servers only)", differs(path, text, 0o644), lambda: write(path, text, 0o644))
    report.step(f"empty settings {integrity.EMPTY_SETTINGS} (bound over the drop-in inside)",
                differs(integrity.EMPTY_SETTINGS, "{}\n", 0o444),
                lambda: write(integrity.EMPTY_SETTINGS, "{}\n", 0o444))


def install_codex_config(report: Report) -> None:
    path = integrity.CODEX_MANAGED_CONFIG
    text = read(path) or ""
    merged = integrity.codex_merge(text)
    if merged is None:
        print(f"  warning    {path} is not TOML we can parse: left alone, so the codex "
              "update check is NOT turned off")
        return
    report.step(f"codex managed config {path} (update check off)",
                differs(path, merged, 0o644), lambda: write(path, merged, 0o644))


def install_integrity(report: Report) -> None:
    install_hooks(report)
    install_managed_settings(report)
    install_unwrapped_settings(report)
    install_codex_config(report)


def _remove_file_and_empty_parent(path: str) -> None:
    os.unlink(path)
    # /etc/claude-code and /etc/codex exist only for these files when we made them.
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))


def uninstall_integrity(report: Report) -> None:
    """Take out what install_integrity put in; the administrator's own settings stay."""
    path = integrity.MANAGED_SETTINGS
    text = read(path)
    existing = integrity.parse_settings(text or "") if text is not None else None
    state = _integrity_state()
    if existing is not None:
        added = tuple(state.get("env_added", ()))  # type: ignore[arg-type]
        remaining = integrity.unmerge_settings(existing, added)
        if not remaining and state.get("created_settings", False):
            report.step(f"remove {path} (it held only our policy)", True,
                        functools.partial(_remove_file_and_empty_parent, path))
        else:
            wanted = integrity.settings_text(remaining)
            report.step(f"our policy out of {path} (the rest kept)", remaining != existing,
                        lambda: write(path, wanted, 0o644))
    dropin = integrity.UNWRAPPED_SETTINGS
    report.step(f"remove {dropin}", os.path.exists(dropin),
                functools.partial(_remove_file_and_empty_parent, dropin))
    codex = integrity.CODEX_MANAGED_CONFIG
    codex_text = read(codex)
    if codex_text is not None:
        rest = integrity.codex_unmerge(codex_text)
        if rest.strip():
            report.step(f"our block out of {codex} (the rest kept)", rest != codex_text,
                        lambda: write(codex, rest, 0o644))
        else:
            report.step(f"remove {codex} (it held only our block)", True,
                        functools.partial(_remove_file_and_empty_parent, codex))
