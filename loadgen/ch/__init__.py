"""The CH-benCHmark federation: TPC-C's relations as go-tpc writes them, with TPC-H's supplier,
nation and region at sources of their own, and the analytical queries as views over them.

- catalog: the twelve relations of go-tpc's PostgreSQL schema, their fedlab types and placement;
- go_tpc: a database prepared by go-tpc, and the rows it generated for the other sources;
- views: the queries fedlab maintains (loadgen/views/ch/), and go-tpc's text of all 22.

docs/ch-benchmark.md says which queries are views, with what changes, and why the others are not.
"""
