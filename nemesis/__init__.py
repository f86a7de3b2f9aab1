"""Faults applied from outside the processes under test: a schedule (schedule.py), what applies
it to a local run (local.py), what each fault did (effects.py) and its figure (plot.py)."""
