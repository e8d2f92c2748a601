"""Inside: ask the launcher's /proc helper to hide the outer processes (launch/session/procmask.py).

`_enter` calls this before anything of the agent runs, where the outer /proc is
bound (a container engine masked parts of /proc); the helper, outside, makes
the mounts and answers.
"""

from __future__ import annotations

from claude_sandbox.core.errors import EXIT_UNAVAILABLE, SandboxError

ANSWER_LIMIT = 1 << 16  # "ok", or the helper's one line of why not


def request_hiding(fd: int) -> None:
    """Ask the launcher's helper to make the late masks; wait until it has.

    The request carries this process's credentials (SCM_CREDENTIALS): the
    kernel checks them and turns the pid into the helper's pid namespace.
    """
    import _socket

    from claude_sandbox.core import wire

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, fd)
    try:
        wire.send(sock, ["mask"], credentials=True)
        reply = wire.receive_fields(sock, ANSWER_LIMIT) or ["err", "no answer"]
        answer = "ok" if reply == ["ok"] else " ".join(reply[1:]) or "a malformed answer"
    except (OSError, wire.WireError) as error:
        answer = f"the launcher's helper is gone ({getattr(error, 'strerror', None) or error})"
    finally:
        sock.close()
    if answer != "ok":
        raise SandboxError(f"_enter: the late masks could not be made: {answer or 'no answer'}",
                           EXIT_UNAVAILABLE)
