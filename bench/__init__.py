"""`fedlab bench`: maintenance algorithms side by side on one workload and seed.

- run_specs: the runs one invocation asks for (algorithms x access paths x views x scales x chaos, or
  x synthetic federations of each shape and size with --federation), checked before anything starts;
- runner: one run live (Federation, driver, ramp, checker) and its raw figures;
- ramp: the search for the highest sustained rate;
- resources: peak memory and CPU seconds of every process, sampled with psutil;
- profile: where the warehouse's maintenance loop and the load's commits spend their time
  (each part's times a bounded sample: loadgen.reservoir);
- growth: a long run's costs interval by interval, and its last tenth against its first;
- metrics: percentiles, staleness per source transaction and cost on the wire, from the files a
  run leaves (warehouse history, message logs, the sources' logs);
- targets: the performance targets against the figures, with the shortfall and what dominates;
- efficiency: the targets on the testbed's own cost (the instrument lighter than what it measures);
- federation_size: cost per transaction against the number of sources;
- plots: the PNGs (matplotlib, Agg);
- report: summary.json, summary.md and summary.html;
- command: the CLI (`add_arguments`, `main`) and its progress bar.
"""
