"""claude-sandbox: a launch-time sandbox for AI coding agents in dev containers."""

__version__ = "0.1.0"
