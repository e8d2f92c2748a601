"""CLAUDE_SANDBOX_TRACE=1: each launch phase's duration on stderr."""

from __future__ import annotations

import sys
import time


class Trace:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = time.perf_counter()

    def phase(self, name: str) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        sys.stderr.write(f"claude-sandbox: trace: {name} {1000 * (now - self._last):.1f} ms\n")
        self._last = now
