"""The deterministic simulator and the commands built on it: `fedlab simulate`, `matrix` and `soak`."""
