"""The workspace's overlays around a session, and what of the session comes back out.

Git's directory and the control files (made before the session, applied by rule after
it), what the session left that a program outside could run, and review mode.
"""
