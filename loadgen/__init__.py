"""What generates load: federations, their update streams and the driver that commits them.

- tpch: the TPC-H federation (catalog, data from tpchgen-cli, views/*.sql); workload: its update
  streams;
- ch: the CH-benCHmark federation (catalog of go-tpc's schema, go-tpc's database, views/ch/*.sql);
- view_files: the view definitions kept as SQL files, TPC-H's and CH-benCHmark's;
- synthetic, synthetic_load: random federations and their update streams; federation_shapes and
  many_views: generated federations of any size, of many views;
- pgbench/*.sql: the pgbench-like transactions of `fedlab bench-postgres`;
- driver, driver_process: the load driver, open-loop at a target rate, in this process or its own;
  reservoir: the bounded sample of times it keeps of its commits (and the bench's profile of each part).

The process that runs it in a deployment is fedlab.roles.load (`fedlab load`).
"""
