"""Workloads: the TPC-H and random federations, their update streams and the load driver."""
