"""`tally bench`: tally's speed layer and nightly job measured side by side with what users
would pick instead, against the targets of issue 12 (each reported met or missed).

Sections (`tally bench --only ...`), each a module:

* `bench.speed` (target 1): throughput of whole processes on the same backlog: `tally
  stream`, plain Spark durable (bronze + aggregation), plain Spark aggregation only, a Spark
  batch ceiling; the previous configuration (1M-line micro-batches) beside it;
* `bench.state` (targets 2 and 4): per-batch fixed cost and its phases, and state, batch time
  and RSS over a 10x longer run;
* `bench.latency` (target 3): window end -> row readable in `stream_aggregates`;
* `bench.bigfile` (target 5): one ~2 GB file against the same events in 100 files;
* `bench.nightly`: `reconcile` / validate / report per stage vs DuckDB, and the lateness curve.

Engines run as OS processes (`bench.engines`: the real `tally` command line through
`bench.tally_cli`, which records the stream's per-batch phases; the plain Spark engines in
`bench.plain_job`; beside them on Kafka, Flink SQL in `bench.flink_job`, run from its own
virtualenv by `bench.flink_peer`), timed and measured from the outside
(`bench.common.run_process`).
`bench.phases` reads the phase records; `bench.run` holds the presets (full, `--quick`), the
orchestration and the CLI command (found through the `tally.commands` entry point group);
`bench.findings` turns the numbers into sentences; `bench.report` writes `benchmarks.md`,
`benchmarks.png` and `benchmarks.json`, keeping earlier results of sections a partial run
did not measure.
"""
