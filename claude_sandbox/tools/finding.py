"""What one of doctor's probes found: ok or not, what it saw, and the fix when not."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    ok: bool
    detail: str
    fix: str = ""
