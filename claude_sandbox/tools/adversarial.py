"""The adversarial suite's outside half: confirm from outside what the inside planted.

An attempt that writes somewhere records the exact path it made in its row
("planted"), and the text it appended to a file that was there ("appended");
only the outside can tell whether that write survived the sandbox. `confirm`
checks each path, removes a planted one (an appended-to file is the user's: it
is named, never touched), and turns the row into the final verdict.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Confirmed:
    number: str
    outcome: str
    detail: str


def confirm(rows: Iterable[Mapping[str, Any]], facts: Mapping[str, Any],
            report: str = "") -> list[Confirmed]:
    """`report`: what the launcher said when the session ended, and its full list."""
    results = []
    for row in rows:
        reported = row.get("reported")
        if reported and row.get("outcome") != "FAIL":
            results.append(_named(row, reported, report))
            continue
        planted = row.get("planted") or []
        # [path, text]: text a probe appended to a file that was there before it.
        appended = row.get("appended") or []
        if not (planted or appended) or row.get("outcome") == "FAIL":
            continue
        survivors = [path for path in planted if os.path.lexists(path)]
        # Reported, never removed: the file is the user's.
        changed = [path for path, text in appended if text in _read(path)]
        for path in survivors:
            with contextlib.suppress(OSError):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
        detail = str(row.get("detail", ""))
        if changed:
            results.append(Confirmed(row["id"], "FAIL", "planted text persisted outside in "
                                     f"{', '.join(changed)}"))
            continue
        if not survivors:
            results.append(Confirmed(row["id"], "PASS", f"{detail}; nothing persisted outside"))
        elif detail.startswith("EXPOSED"):
            results.append(Confirmed(row["id"], "SKIP",
                                     f"{detail}; confirmed outside: {', '.join(survivors)}"))
        else:
            results.append(Confirmed(row["id"], "FAIL",
                                     f"persisted outside: {', '.join(survivors)}"))
    del facts
    return results


def _named(row: Mapping[str, Any], paths: Iterable[str], report: str) -> Confirmed:
    """A plant live mode lets land counts as blocked only when the session-end report
    names it: the user is told before a program outside runs it."""
    unnamed = [p for p in paths if p not in report]
    if unnamed:
        return Confirmed(row["id"], "FAIL", "landed and not named by the session-end report: "
                         + ", ".join(unnamed))
    return Confirmed(row["id"], "PASS", f"{row.get('detail', '')}; each named by the "
                     "session-end report")


def _read(path: str) -> str:
    """The text at `path`, never blocking: the agent may have left a FIFO there."""
    from claude_sandbox.launch.overlay.gitrepo import read_small

    return read_small(path, 1 << 20) or ""
