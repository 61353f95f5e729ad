"""The tally orchestration package: DAG files, their shared wiring and the Spark application."""
