"""The launch's second stage: the host's facts, read once into frozen records.

Before the plan, this is the one stage that reads the host (the configuration reads its
file only): the planner gets every fact it needs from here.
"""
