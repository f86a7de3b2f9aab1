"""Sze-Ling's maintenance algorithm (docs/paper-notes.md): its core (maintenance.py) and what it is made of."""
