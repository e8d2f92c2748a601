"""The launch's fourth stage: the session made and run.

Its caps (the cgroup), its store and scratch places, the broker's certificate, the janitor
and the /proc helper (the launcher's halves of those two processes), and what the launch
says before and after it.
"""
