"""The operator tier: doctor, verify, docs rendering. May import third-party packages."""
