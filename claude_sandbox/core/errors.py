"""The one error type that reaches a user, and the exit statuses it carries.

Every condition we can name is raised as SandboxError where it is detected and
printed once, at the boundary in __main__, as `claude-sandbox: MESSAGE`
(EXIT_STATUSES below). Statuses follow sysexits(3) so scripts can tell a
refusal from the agent's own failure.
"""

from __future__ import annotations

EXIT_USAGE = 64  # bad command-line arguments
EXIT_UNAVAILABLE = 69  # a host primitive is missing: bwrap, pasta, tun, user namespaces, ...
EXIT_JAIL = 70  # the egress jail could not be built or does not match its plan
EXIT_REFUSED = 77  # a policy refusal: workspace, entry-point guard, nesting
EXIT_CONFIG = 78  # a configuration error, naming FILE:LINE or the variable

# The one table of them: `--help` (cli.py) and README.md (tools/render.py) render it.
EXIT_STATUSES: tuple[tuple[int, str], ...] = (
    (EXIT_USAGE, "bad command-line arguments"),
    (EXIT_UNAVAILABLE, "a host primitive the sandbox needs is missing (bwrap, pasta, "
     "/dev/net/tun, user namespaces, an engine setting), or a process or open-files limit "
     "is too low for a launch"),
    (EXIT_JAIL, "the egress jail could not be built or its read-back differs from the plan"),
    (EXIT_REFUSED, "the launch was refused by policy (entry-point guard, nesting, a control "
     "path that is a link out of the workspace, a .git that is a link, a link in the agent's "
     "state store where the sandbox mounts something)"),
    (EXIT_CONFIG, "the configuration is invalid, or a path may not be writable (the "
     "workspace, an allow-write path); the message names FILE:LINE or the variable"),
)
# What follows the table wherever it is shown.
OTHER_STATUS = "Otherwise the status is the program's own (128+N when a signal N ended it)."


class SandboxError(Exception):
    """A condition with a message a user can act on, and the status to exit with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def no_process(error: OSError) -> SandboxError:
    """A fork or a spawn refused for want of processes (EAGAIN: the user's RLIMIT_NPROC,
    or a pids cgroup above the launch)."""
    return SandboxError(f"cannot start a process ({error.strerror}): the user's process "
                        "limit is reached; raise it (`ulimit -u`) or end some of this "
                        "user's processes", EXIT_UNAVAILABLE)


def jail_error(why: str, status: int = EXIT_JAIL) -> SandboxError:
    """A refusal of the egress jail's: every one reads `egress jail: WHY`."""
    return SandboxError(f"egress jail: {why}", status)
