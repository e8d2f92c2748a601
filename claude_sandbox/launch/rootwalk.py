"""A root launch's walk for root-only files (rootonly.py), forked early, read late.

The walk takes about a tenth of a second on a dev container's tree even when its cache
is fresh: one lstat per directory. Run where it is needed, in the late-mount helper
after bwrap has started, the agent waited for all of it. Forked as soon as the plan is
made, it overlaps the jail's start, the launch's preparations and bwrap's set-up; the
helper (procmask.py) still reads the whole answer before it covers anything, and the
agent does not start before the helper has covered it all (docs/adr/0015).
"""

from __future__ import annotations

import os

from claude_sandbox.launch import rootonly, state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from claude_sandbox.launch.hostfacts import HostFacts
    from claude_sandbox.launch.mounts import Writable

# The walk's answer on its pipe: "D" or "F" and the path, NUL between entries, and END
# last; an answer without END is a walk that did not finish, and refuses the launch.
_END = b"\0\0end"


class Walk:
    """The walk (rootonly.for_launch) in a forked child; the helper reads its answer from
    `fd`. The child writes the cache after it has answered."""

    def __init__(self, state_dir: str | None, facts: HostFacts, layout: Writable) -> None:
        from claude_sandbox.core.process import tie_to_parent

        self.cache = os.path.join(state.store_root(state_dir, facts.home, facts.uid),
                                  rootonly.CACHE_NAME)
        self.fd, theirs = os.pipe2(os.O_CLOEXEC)
        parent = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            status = 1
            try:
                os.closerange(3, theirs)  # the jail's channels are not its business
                os.closerange(theirs + 1, os.sysconf("SC_OPEN_MAX"))
                if tie_to_parent(parent):  # ends with the launcher, even SIGKILLed
                    found, write = rootonly.for_launch(state_dir, facts, layout)
                    with open(theirs, "wb") as answer:
                        answer.write(b"\0".join((b"D" if is_dir else b"F") + path.encode(
                            "utf-8", "surrogateescape") for path, is_dir in found.items())
                            + _END)
                    if write is not None:
                        write()
                    status = 0
            finally:
                os._exit(status)
        os.close(theirs)

    def result(self) -> dict[str, bool]:
        """The walk's answer (in the helper); OSError when the walk did not finish."""
        chunks = []
        while chunk := os.read(self.fd, 1 << 16):
            chunks.append(chunk)
        data = b"".join(chunks)
        if not data.endswith(_END):
            raise OSError(0, "the walk for root-only files did not finish")
        body = data[: -len(_END)]
        return {entry[1:].decode("utf-8", "surrogateescape"): entry[:1] == b"D"
                for entry in (body.split(b"\0") if body else [])}

    def end(self, wait: bool) -> None:
        """After the session: `wait` for the child to write the cache, or end it (a launch
        torn down early), leaving no half-written file."""
        if self.fd >= 0:
            os.close(self.fd)  # with the helper gone, an answer unread fails, not blocks
            self.fd = -1
        if not wait:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            return
        if not wait:
            for leftover in [f"{self.cache}.{self.pid}", *(
                    os.path.join(f"{self.cache}.d", name)
                    for name in _listdir(f"{self.cache}.d") if name.endswith(f".{self.pid}"))]:
                try:
                    os.unlink(leftover)
                except OSError:
                    pass


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
