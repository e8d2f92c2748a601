"""`claude-sandbox verify`'s results: one row a check or probe, shown as a table (plain
or rich) and written as JUnit XML."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

FAILING = ("FAIL", "ESCAPED")


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    name: str
    outcome: str  # PASS FAIL SKIP | BLOCKED ESCAPED EXPOSED
    detail: str
    kind: str = "check"


def render_plain(rows: Sequence[Row]) -> str:
    checks = [r for r in rows if r.kind == "check"]
    attempts = [r for r in rows if r.kind == "adversarial"]
    lines = [f"claude-sandbox verify: {len(checks)} checks"]
    for row in checks:
        tail = f" \u2014 {row.detail}" if row.outcome != "PASS" and row.detail else ""
        lines.append(f"[{row.outcome}] {row.id} {row.name}{tail}")
    if attempts:
        lines.append(f"adversarial: {len(attempts)} attempts")
        for row in attempts:
            lines.append(f"[{row.outcome}] {row.id} {row.name} \u2014 {row.detail}")
    passed = sum(r.outcome == "PASS" for r in checks)
    failed = sum(r.outcome == "FAIL" for r in checks)
    skipped = sum(r.outcome == "SKIP" for r in checks)
    summary = f"Summary: {passed} PASS / {failed} FAIL"
    if skipped:
        summary += f" ({skipped} SKIP)"
    if attempts:
        escaped = sum(r.outcome == "ESCAPED" for r in attempts)
        blocked = sum(r.outcome == "BLOCKED" for r in attempts)
        summary += f"; adversarial {blocked} BLOCKED / {escaped} ESCAPED"
    lines.append(summary)
    return "\n".join(lines)


def render_rich(rows: Sequence[Row], agent: str) -> None:
    from rich.console import Console
    from rich.table import Table

    colours = {"PASS": "green", "BLOCKED": "green", "FAIL": "bold red", "ESCAPED": "bold red",
               "SKIP": "yellow", "EXPOSED": "yellow"}
    table = Table(title=f"claude-sandbox verify: {agent}")
    for column in ("#", "check", "result", "detail"):
        table.add_column(column, overflow="fold")
    for row in rows:
        colour = colours.get(row.outcome, "")
        table.add_row(row.id, row.name, f"[{colour}]{row.outcome}[/]", row.detail)
    Console().print(table)
    print(render_plain(rows).splitlines()[-1])


def write_junit(path: str, rows: Sequence[Row], agent: str) -> None:
    failures = sum(r.outcome in FAILING for r in rows)
    skipped = sum(r.outcome in ("SKIP", "EXPOSED") for r in rows)
    cases = []
    for row in rows:
        name = quoteattr(f"{row.id} {row.name}")
        body = ""
        if row.outcome in FAILING:
            body = f"<failure message={quoteattr(row.detail)}>{escape(row.detail)}</failure>"
        elif row.outcome in ("SKIP", "EXPOSED"):
            body = f"<skipped message={quoteattr(row.outcome + ': ' + row.detail)}/>"
        cases.append(f'  <testcase classname="claude-sandbox.{agent}" name={name}>{body}'
                     "</testcase>")
    xml = (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="claude-sandbox verify '
           f'{agent}" tests="{len(rows)}" failures="{failures}" skipped="{skipped}">\n'
           + "\n".join(cases) + "\n</testsuite>\n")
    Path(path).write_text(xml, encoding="utf-8")
