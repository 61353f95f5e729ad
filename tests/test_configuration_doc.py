"""docs/configuration.md is what the code says: every setting and every command, with the
settings' own help text (no Spark: the parser and the dataclass only)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tally.settings import Settings, setting_help, setting_rules
from tally_app.cli import build_parser
from tally_app.config_doc import (
    PAGE,
    SECTIONS,
    _cell,
    main,
    render,
    setting_flags,
    subcommands,
)


@pytest.fixture(scope="module")
def page() -> str:
    return render()


def test_the_committed_page_is_current(page: str) -> None:
    assert PAGE.read_text() == page, "docs/configuration.md is stale: run `make docs`"


def test_every_setting_has_a_row_with_its_environment_variable_and_default(page: str) -> None:
    rows = {line.split(" | ")[0].strip("| `"): line for line in page.splitlines() if "| `" in line}
    for f in dataclasses.fields(Settings):
        assert f.metadata.get("help"), f"{f.name}: no help in its field metadata"
        row = rows.get(f.name)
        assert row is not None, f"{f.name}: no row in docs/configuration.md"
        assert f"`TALLY_{f.name.upper()}`" in row
        assert f.metadata["help"][:20] in row
    lateness = (
        "| `lateness` | `TALLY_LATENESS` | `--lateness` (stream, report) | duration or `auto` "
        "| `30s` |"
    )
    assert lateness in page


def test_each_setting_row_states_the_rules_its_value_keeps(page: str) -> None:
    rows = {line.split(" | ")[0].strip("| `"): line for line in page.splitlines() if "| `" in line}
    for f in dataclasses.fields(Settings):
        for rule in setting_rules(f.name):
            assert f" {_cell(rule)}" in rows[f.name], f"{f.name}: {rule!r} not in its row"
    # a relation between two settings is stated on both rows
    for name in ("late_rate_warn", "late_rate_fail"):
        assert "| 0 &lt;= late_rate_warn &lt;= late_rate_fail &lt;= 1 |" in rows[name]


def test_every_command_and_its_flags_appear(page: str) -> None:
    commands = subcommands(build_parser())
    assert {"generate", "produce", "stream", "show", "reconcile", "lateness-curve"} <= set(commands)
    for name, parser in commands.items():
        section = page.split(f"### `tally {name}`\n", 1)
        assert len(section) == 2, f"tally {name}: no section"
        body = section[1].split("\n### ", 1)[0]
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help", "--verbose"):
                    assert f"`{flag}`" in body, f"tally {name} {flag}: not documented"


def test_a_flag_maps_to_the_setting_its_command_reads() -> None:
    flags = setting_flags(subcommands(build_parser()))
    # lateness-curve's --lateness sets the bounds it tries, not the stream's bound
    assert flags["lateness_candidates"] == {"`--lateness`": ["lateness-curve"]}
    assert flags["lateness"] == {"`--lateness`": ["stream", "report"]}
    assert flags["source_kind"] == {"`--source-kind`, `--source`": ["stream"]}
    assert "alert_email" not in flags  # read by the DAGs only
    # the curve measures against tumbling windows: it offers no window-kind flag to ignore
    assert flags["session_gap"] == {"`--session-gap`": ["stream", "reconcile"]}


def test_the_curve_refuses_a_window_kind_it_would_ignore(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["lateness-curve", "--date", "2026-11-20", "--session-gap", "6h"])
    assert exit_info.value.code == 2
    assert "--session-gap" in capsys.readouterr().err


def test_the_command_line_help_is_the_settings_help() -> None:
    stream = subcommands(build_parser())["stream"]
    helps = {a.dest: a.help for a in stream._actions}
    assert helps["session_gap"] == setting_help("session_gap")
    assert helps["watermark_policy"] == setting_help("watermark_policy")


def test_every_section_starts_at_a_setting() -> None:
    names = [f.name for f in dataclasses.fields(Settings)]
    assert names[0] == SECTIONS[0][1]
    starts = [names.index(first) for _, first in SECTIONS]
    assert starts == sorted(starts)


def test_check_mode_fails_on_a_stale_page_and_passes_on_the_current_one(
    tmp_path: Path, page: str, capsys: pytest.CaptureFixture[str]
) -> None:
    current = tmp_path / "configuration.md"
    current.write_text(page)
    assert main(["--check", str(current)]) == 0
    stale = tmp_path / "stale.md"
    stale.write_text(page.replace("`30s`", "`45s`", 1))
    assert main(["--check", str(stale)]) == 1
    assert "run `make docs`" in capsys.readouterr().err
    assert main(["--check", str(tmp_path / "missing.md")]) == 1
