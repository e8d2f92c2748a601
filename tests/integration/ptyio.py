"""What the pty tests share: a process on a pty, and reading its output until a text."""

from __future__ import annotations

import os
import select
import time


class PtyProcess:
    """A child on a pty (`pid`, master `fd`) and everything it has written (`seen`)."""

    pid: int
    fd: int
    seen: bytes = b""

    def wait_for(self, text: str, timeout: float = 30) -> bool:
        """Read until `text` appears or `timeout` passes; whether it appeared."""
        deadline = time.monotonic() + timeout
        while text.encode() not in self.seen and time.monotonic() < deadline:
            if select.select([self.fd], [], [], 0.02)[0]:
                try:
                    self.seen += os.read(self.fd, 65536)
                except OSError:
                    break
        return text.encode() in self.seen
