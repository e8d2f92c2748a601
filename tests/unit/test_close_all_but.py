"""A forked child keeps only the descriptors it names (process.close_all_but), a
descriptor above a lowered soft limit closed too."""

from __future__ import annotations

import ast
import os
import resource

from claude_sandbox.core import process


def test_a_child_keeps_only_what_it_names() -> None:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            extra = [os.open("/dev/null", os.O_RDONLY) for _ in range(5)]
            high = os.dup2(extra[0], 1500)  # an IDE's socket, above the soft limit below
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
            process.close_all_but({0, 1, 2, write_end})
            left = sorted(fd for fd in map(int, os.listdir("/proc/self/fd")) if _open(fd))
            os.write(write_end, repr((left, high)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    said = b""
    while chunk := os.read(read_end, 4096):
        said += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    left, high = ast.literal_eval(said.decode())
    assert high == 1500
    assert left == sorted({0, 1, 2, write_end}), left


def _open(fd: int) -> bool:
    """Whether `fd` is open: the listing names its own, closed once it is read."""
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True
