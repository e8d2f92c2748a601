"""The launching terminal's modes: read before the session, given back after it."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def modes() -> list[Any] | None:
    """The launching terminal's modes, to give back whatever state the agent leaves it in."""
    import termios

    try:
        return termios.tcgetattr(0) if os.isatty(0) else None
    except termios.error:
        return None


def restore(modes: list[Any] | None) -> None:
    """An agent killed in raw mode leaves the terminal unusable; the shell gets it back sane.

    Only from the terminal's foreground group: a background launch writing the
    modes would be stopped by SIGTTOU.
    """
    if modes is None:
        return
    import termios

    try:
        if os.tcgetpgrp(0) == os.getpgrp():
            termios.tcsetattr(0, termios.TCSADRAIN, modes)
    except (OSError, termios.error):
        pass
