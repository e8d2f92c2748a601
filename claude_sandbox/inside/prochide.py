"""Inside: ask the launcher's /proc helper to hide the outer processes (launch/session/procmask.py).

`_enter` calls this before anything of the agent runs, where the outer /proc is
bound (a container engine masked parts of /proc); the helper, outside, makes
the mounts and answers.
"""

from __future__ import annotations

import os

from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError


def request_hiding(fd: int) -> None:
    """Ask the launcher's helper to make the late masks; wait until it has.

    The request carries this process's credentials (SCM_CREDENTIALS): the
    kernel checks them and turns the pid into the helper's pid namespace.
    """
    import _socket
    import struct

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, fd)
    try:
        creds = struct.pack("3i", os.getpid(), os.getuid(), os.getgid())
        sock.sendmsg([b"mask\n"], [(_socket.SOL_SOCKET, _socket.SCM_CREDENTIALS, creds)])
        answer = sock.recv(512).decode(errors="replace").strip()
    except OSError as error:
        answer = f"the launcher's helper is gone ({error.strerror})"
    finally:
        sock.close()
    if answer != "ok":
        raise SandboxError(f"_enter: the outer processes could not be hidden in /proc: "
                           f"{answer or 'no answer'}", EXIT_UNAVAILABLE)
