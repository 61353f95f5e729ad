"""Carrying earlier results over: a partial run (`tally bench --only ...`) takes the other
sections' results from the output directory's earlier `benchmarks.json`; the report labels them
with the date they were measured."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.report.files import JSON_NAME

# Sections whose results kept their shape since format 1 (before issue 12): still carried.
UNCHANGED_SINCE_FORMAT_1 = ("nightly", "curve")


def carry_previous(r: dict[str, Any], out_dir: Path, sections: Sequence[str]) -> None:
    """Fill the sections in `sections` (those this run did not run) from `out_dir`'s earlier
    `benchmarks.json`, when it is of the same mode; each keeps the date it was measured
    (`r["measured"]`) and is listed in `r["carried"]`. Results of an older format are carried
    only for sections whose shape did not change."""
    r.setdefault("carried", [])
    r.setdefault("measured", {})
    r.setdefault("carry_notes", [])
    path = out_dir / JSON_NAME
    if not sections or not path.is_file():
        return
    try:
        prev = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        r["carry_notes"].append(f"earlier results in {path} unreadable ({exc}); none carried")
        return
    if prev.get("mode") != r["mode"]:
        r["carry_notes"].append(
            f"earlier results in {path} are of {prev.get('mode')} mode; none carried"
        )
        return
    same_format = prev.get("format", 1) == r.get("format")
    measured = prev.get("measured") or {}
    for name in sections:
        if not prev.get(name):
            continue
        if not same_format and name not in UNCHANGED_SINCE_FORMAT_1:
            r["carry_notes"].append(
                f"the earlier {name} results measured the previous benchmark design; not carried"
            )
            continue
        r[name] = prev[name]
        r["measured"][name] = measured.get(name) or prev.get("started") or "an earlier run"
        r["carried"].append(name)


def carried_label(r: dict[str, Any], name: str) -> str:
    """' (measured <date>, carried over from an earlier run)' for a carried section."""
    if name not in (r.get("carried") or []):
        return ""
    return f" (measured {r['measured'].get(name)}, carried over from an earlier run)"
