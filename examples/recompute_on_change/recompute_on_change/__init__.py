"""Recompute on change: a fedlab maintenance algorithm as a plug-in (docs/new-algorithm.md)."""
