"""The launch's third stage: the plan, made by pure functions from the configuration and the
facts, and its renderings (bwrap's command line, the inner record, `explain`, the docs).

tests/unit/test_planner_reads_nothing.py proves that making and rendering a plan reads
nothing of the host.
"""
