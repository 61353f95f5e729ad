"""The application floor: the `tally` command line, `tally show` and the nightly sequence.

It sits above the ground floor (`tally/`) and the three layers (`streaming/`, `batch/`,
`expectations/`) and composes them; nothing below imports it. `dags/` and `bench/` sit on top.
"""
