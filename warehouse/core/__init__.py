"""The pure maintenance core: events in, actions out; no sockets, threads, clocks or Spark.

The same core runs under the live warehouse service and under the deterministic simulator.
- `sze_ling/`: Sze-Ling's algorithm (its maintenance core, its transaction tasks and computations,
  compensation, keys and dependencies, version state) and the modes it runs in besides
  it: lazy maintenance's deferral (Zhou & Larson) and answers as of a version (Vinh).
- `baselines/`: the algorithms it is compared with that have their own state machines: the Strobe
  family and periodic recomputation.
- `salem/`: point-in-time refresh (Salem et al. 2000): Propagate and rolling propagation into a
  timed view delta (propagate), ComputeDelta (compute_delta) and the federation's points in time
  (timeline).
- here, what they all share: the events and actions (events), the interface adapters drive
  (algorithm), the one loop and the ports that carry out actions (ports), the built-in
  algorithms as plug-ins (builtin_plugins), the notification log and its receipts, the batch
  protocol by which the warehouse makes its work durable (batches), the view state, the join
  planner and the evaluation of a plan's fragments, snapshots of every source (snapshots), and the
  edges of a view's SQL beyond a join of distinct relations: a self-join's occurrences
  (occurrences) and an aggregate view kept from its join's deltas (aggregate_state).
"""
