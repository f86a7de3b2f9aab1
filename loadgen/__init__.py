"""Workloads, the simulator, the driver, chaos, the consistency checker, reports and the CLI."""
