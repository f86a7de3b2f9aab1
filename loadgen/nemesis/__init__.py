"""Faults applied from outside the processes under test: a schedule (schedule.py) and what applies it to a local run (local.py)."""
