"""Tooling beside the product: synthetic input (`generate`: one messy feed; `sources`: three
sources with different disorder), publishing JSONL to Kafka (`produce`) and free local ports
for the servers tests and benchmarks start (`ports`).

It sits beside the three layers and imports only the ground floor (`tally/`); the command line
(`tally generate`, `tally produce`), `bench/` and the tests use it. Nothing of the product
(the layers, the nightly sequence, the DAGs) depends on it.
"""
