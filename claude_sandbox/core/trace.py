"""CLAUDE_SANDBOX_TRACE=1: each launch phase's duration, and the running total, on stderr.

The one tracer of the launch path: the launcher's phases print as `trace:`, the
jail's (which overlap them) as `jail:`, each with its own total.
"""

from __future__ import annotations

import sys
import time


class Trace:
    def __init__(self, enabled: bool, part: str = "trace") -> None:
        self.enabled = enabled
        self.part = part
        self._start = self._last = time.perf_counter()

    def phase(self, name: str) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        sys.stderr.write(f"claude-sandbox: {self.part}: {name}: {1000 * (now - self._last):.1f} "
                         f"ms (total {1000 * (now - self._start):.1f} ms)\n")
        self._last = now
