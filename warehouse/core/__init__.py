"""The pure maintenance core: events in, actions out; no sockets, threads, clocks or Spark.

The same core runs under the live warehouse service and under the deterministic simulator.
"""
