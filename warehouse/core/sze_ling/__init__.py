"""Sze-Ling's maintenance algorithm (docs/paper-notes.md): the engine and what it is made of."""
