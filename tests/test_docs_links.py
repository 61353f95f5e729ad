"""The README and docs/ stay navigable and correct: every relative link points at a file that
exists (and, with an anchor, at a heading in it), and every `tally` command line they show
parses with today's command line (no Spark: the parser only)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tally_app.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def broken_links(page: Path) -> list[str]:
    """The relative links of a page that point nowhere, as `target` strings."""
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in anchors(linked)
        ):
            broken.append(target)
    return broken


def tally_command_lines(page: Path) -> list[str]:
    """The `tally ...` command lines in a page's code blocks, continuations joined; lines with
    placeholders (`...`, `[--optional]`) are usage sketches and left out."""
    found = []
    for block in FENCE.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split("#", 1)[0].strip()
            if command.startswith((".venv/bin/tally ", "tally ")) and not re.search(
                r"\.\.\.|\[--", command
            ):
                found.append(command)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == [], f"{page.relative_to(ROOT)}: broken links"


def test_the_docs_index_lists_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"](docs/{page.name})" in readme, f"README's index lacks docs/{page.name}"


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A section `here`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#a-section-here) [web](https://example.org/x.md)\n"
        "[gone](missing.md) [no anchor](other.md#nowhere)\n"
        "```\n[in code](not-a-link.md)\n```\n"
    )
    assert broken_links(page) == ["missing.md", "other.md#nowhere"]


def test_every_documented_command_line_parses() -> None:
    parser = build_parser()
    lines = [line for page in PAGES for line in tally_command_lines(page)]
    assert any(line.split()[1] == "reconcile" for line in lines)
    for line in lines:
        argv = shlex.split(line)[1:]
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"documented command does not parse: {line}")
