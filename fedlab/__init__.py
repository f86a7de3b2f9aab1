"""fedlab: a testbed for distributed materialized-view maintenance. Autonomous sources commit
transactions and notify a warehouse, which keeps views over them in Delta Lake with a maintenance
algorithm of its choice, under faults, judged by a checker that shares no code with it.

One import name over the folders at the top of the repository (setup.py maps them):

- fedlab.fedmodel: the model every side speaks (catalog, view definition, transactions, row codec);
- fedlab.fedio: the I/O every process shares (gRPC channels with their TLS, the message log);
- fedlab.source_node: one autonomous data source (its database, versions, outbox, server);
- fedlab.warehouse: the maintenance core (pure), the Spark + Delta view store, the gRPC service;
- fedlab.loadgen: everything around the federation (workloads, simulator, checker, bench, roles);
- fedlab.cli: the `fedlab` command.
"""
