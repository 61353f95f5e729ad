"""`tally bench`: tally's speed measured side by side with what users would pick instead.

Sections (issue 7), each a module:

* `bench.speed`: the speed layer vs a plain Spark `withWatermark` + `window` query vs a Spark
  batch aggregation of the same JSON backlog, measured alternately, several repetitions;
* `bench.latency`: window end -> row readable in `stream_aggregates`, at a steady input rate;
* `bench.state`: open-window state and batch duration over a long run;
* `bench.nightly`: `reconcile` / validate / report per stage vs DuckDB on the same files, and
  the lateness curve.

`bench.run` holds the presets (full, `--quick`), the orchestration and the CLI command (found
through the `tally.commands` entry point group); `bench.findings` turns the numbers into
sentences; `bench.report` writes `benchmarks.md`, `benchmarks.png` and `benchmarks.json`;
`bench.common` the inputs' shapes and helpers, `bench.probe` the micro-batch phase timer.
"""
