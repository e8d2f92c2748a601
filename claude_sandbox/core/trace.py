"""CLAUDE_SANDBOX_TRACE=1: each launch phase's duration, and the running total, on stderr.

The one tracer of the launch path: the launcher's phases print as `trace:`, the
jail's (which overlap them) as `jail:`, each with its own total.
"""

from __future__ import annotations

import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class Trace:
    def __init__(self, enabled: bool, part: str = "trace") -> None:
        self.enabled = enabled
        self.part = part
        self._start = self._last = time.perf_counter()

    def phase(self, name: str) -> None:
        """The phase since the last one."""
        if not self.enabled:
            return
        now = time.perf_counter()
        sys.stderr.write(f"claude-sandbox: {self.part}: {name}: {1000 * (now - self._last):.1f} "
                         f"ms (total {1000 * (now - self._start):.1f} ms)\n")
        self._last = now

    def note(self, text: Callable[[], str]) -> None:
        """A line without a duration, worked out only when traced (a plan's digest: the
        whole plan rendered), and left out of the next phase. Said once the launch is
        done: said where it is worked out, it delayed every phase after it, and hid how
        long the launcher waits there for what runs beside it (pasta's attach)."""
        if not self.enabled:
            return
        began = time.perf_counter()
        sys.stderr.write(f"claude-sandbox: {self.part}: {text()}\n")
        self._last += time.perf_counter() - began
