"""A live federation on this machine: `fedlab run`, `demo`, `check` and `view`, and what they share."""
