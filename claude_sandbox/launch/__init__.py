"""The launcher: from the shim to bwrap, outside the sandbox (docs/explanation/architecture.md)."""
