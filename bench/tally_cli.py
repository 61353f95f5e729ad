"""`python -m bench.tally_cli TRACE -- stream ...`: the real `tally` command line
(`python -m tally_app.cli ...`, run with `runpy`), with the DEBUG records of the stream's
logger `tally.stream` appended to the file TRACE, one JSON object a line:

    {"t": <epoch s>, "level": "DEBUG", "msg": "batch 3 phases: read_parse 0.33 s, ..."}

and, for the per-batch phase record, the phases themselves (`"phases": {"read_parse": 0.33,
...}`, from `BatchProcessor`'s phase timer) so nothing depends on the message's wording.
The command runs exactly as `tally` would; only a logging handler is added (records are
written and flushed one at a time, so a killed process leaves a readable trace).
"""

from __future__ import annotations

import json
import logging
import runpy
import sys
from pathlib import Path
from typing import Any, TextIO

LOGGER = "tally.stream"


class TraceHandler(logging.Handler):
    """Every record of `tally.stream` (DEBUG and up) as a JSON line."""

    def __init__(self, out: TextIO) -> None:
        super().__init__(logging.DEBUG)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            entry: dict[str, Any] = {
                "t": record.created,
                "level": record.levelname,
                "msg": record.getMessage(),
            }
            args = record.args if isinstance(record.args, tuple) else ()
            for arg in args:
                seconds = getattr(arg, "seconds", None)
                if isinstance(seconds, dict):
                    entry["phases"] = {str(k): float(v) for k, v in seconds.items()}
            self.out.write(json.dumps(entry) + "\n")
            self.out.flush()
        except Exception:
            self.handleError(record)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m bench.tally_cli TRACE -- <tally arguments>", file=sys.stderr)
        return 2
    trace, tally_args = Path(argv[0]), argv[2:]
    trace.parent.mkdir(parents=True, exist_ok=True)
    out = trace.open("a", encoding="utf-8")
    logger = logging.getLogger(LOGGER)
    logger.setLevel(logging.DEBUG)
    logger.addHandler(TraceHandler(out))
    # `tally`'s warnings reach stderr through Python's last-resort handler, which logging uses
    # only while no handler is found: with the trace's, the same one-line warnings go to
    # stderr here (the stream's clock-skew line among them).
    warnings = logging.StreamHandler(sys.stderr)
    warnings.setLevel(logging.WARNING)
    logging.getLogger("tally").addHandler(warnings)
    sys.argv = ["tally", *tally_args]
    try:
        runpy.run_module("tally_app.cli", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
