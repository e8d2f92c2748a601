"""claude-sandbox: a launch-time sandbox for AI coding agents in dev containers."""

from claude_sandbox.core import bundle as _bundle

__version__ = "0.1.0"

# The launch path's modules from one file where the installer wrote it for this very
# directory; elsewhere (a checkout, the tools venv) nothing changes (core/bundle.py).
_bundle.install(__path__[0])
