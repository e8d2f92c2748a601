"""claude-sandbox: a launch-time sandbox for AI coding agents in dev containers."""

from claude_sandbox.core import bundle as _bundle
from claude_sandbox.core import streams as _streams

__version__ = "0.1.0"

# A standard descriptor the process was started without gets /dev/null before the bundle
# (or anything else) is opened at its number (core/streams.py).
_streams.fill_closed()
# The launch path's modules from one file where the installer wrote it for this very
# directory; elsewhere (a checkout, the tools venv) nothing changes (core/bundle.py).
_bundle.install(__path__[0])
