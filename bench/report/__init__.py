"""The results of `tally bench`, written into the output directory: `benchmarks.md` (the
targets met or missed, the findings, one section per target with its tables: `markdown`,
`sections`), `benchmarks.png` (`charts`), `benchmarks-lateness.png` (section 11's chart,
`lateness`) and `benchmarks.json` (every raw number). A partial
run (`tally bench --only ...`) first takes the other sections' earlier results from the
output directory's `benchmarks.json` (`carry`); the report labels them with the date they
were measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report.carry import carry_previous
from bench.report.charts import render_chart
from bench.report.files import JSON_NAME, MD_NAME, PNG_NAME
from bench.report.lateness import PNG_NAME as LATENESS_PNG_NAME
from bench.report.lateness import render_chart as render_lateness_chart
from bench.report.markdown import render_markdown

__all__ = [
    "JSON_NAME",
    "MD_NAME",
    "PNG_NAME",
    "carry_previous",
    "render_chart",
    "render_markdown",
    "write_outputs",
]


def write_outputs(r: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / PNG_NAME
    render_chart(r, png)
    paths = {}
    if r.get("lateness"):  # section 11's own chart: the bound auto chose over time
        paths["lateness_png"] = out_dir / LATENESS_PNG_NAME
        render_lateness_chart(r["lateness"], paths["lateness_png"])
    md = out_dir / MD_NAME
    md.write_text(render_markdown(r, PNG_NAME), encoding="utf-8")
    js = out_dir / JSON_NAME
    js.write_text(json.dumps(r, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return {"md": md, "png": png, "json": js, **paths}
