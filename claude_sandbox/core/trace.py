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

    def phase(self, name: str, detail: Callable[[], str] | None = None) -> None:
        """The phase since the last one. `detail`: what follows its name, worked out after
        the phase is timed, and its cost (a plan's digest: the whole plan rendered) left
        out of the next phase: a launch that is not traced never pays it."""
        if not self.enabled:
            return
        now = time.perf_counter()
        shown = f"{name} {detail()}" if detail is not None else name
        sys.stderr.write(f"claude-sandbox: {self.part}: {shown}: {1000 * (now - self._last):.1f} "
                         f"ms (total {1000 * (now - self._start):.1f} ms)\n")
        self._last = now if detail is None else time.perf_counter()
