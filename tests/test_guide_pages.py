"""The instructor guide as pages by task (docs/guide/): each short enough to read at once, in the order a workshop
runs, with every heading of the one-file guide it replaced on exactly one page, and links that lead somewhere, on
GitHub as on the website. Fast: reads files only (tests/test_site.py builds the site)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from website.build import guide_pages

GUIDE = ROOT / "docs" / "guide"
LONGEST = 300  # lines: a page read at once
# Reference pages looked up, not read through, which other work generates from data (issue 51): they may be longer
REFERENCE = {
    "expected-results.md": "what each notebook printed besides its key figures (those: website/results.py)",
    "mutation-report-2026-11-27.md": "the mutation report's table of one run: to be generated from its output",
}
# The order a workshop runs: prepare a site; deploy; engine clusters; release, collect, grade; the class results
# table; on the cluster with Slurm; clean up; measure. Then the reference pages.
WORKSHOP = [
    "01-prepare",
    "02-deploy",
    "03-engine-clusters",
    "04-release-collect-grade",
    "05-class-results",
    "06-slurm",
    "07-clean-up",
    "08-measure",
]
OLD_HEADINGS = ROOT / "tests" / "fixtures" / "instructor_guide_headings.tsv"
PAGES = sorted(GUIDE.glob("*.md"))


def prose(text: str) -> list[str]:
    """TEXT's lines outside fenced code blocks (a `# comment` in a bash block is no heading)."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            lines.append(line)
    return lines


def title(heading: str) -> str:
    """A heading's words, without its hashes or the section number the one-file guide gave it ("## 3. X" -> "X")."""
    return re.sub(r"^\d+\. ", "", heading.lstrip("#").strip())


def headings(path: Path) -> list[str]:
    return [title(line) for line in prose(path.read_text()) if re.match(r"#{1,6} ", line)]


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading (MyST makes the same with myst_heading_anchors): lower case, punctuation
    dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def links(path: Path) -> list[str]:
    """The relative Markdown links of PATH's prose (not http(s) or mailto)."""
    found = re.findall(r"\]\(([^)\s]+)\)", "\n".join(prose(path.read_text())))
    return [link for link in found if not re.match(r"[a-z]+:", link)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_page_is_short_enough_to_read_at_once(page):
    lines = len(page.read_text().splitlines())
    if page.name not in REFERENCE:
        assert lines <= LONGEST, f"{page.name} has {lines} lines: split it by task (at most {LONGEST})"


def test_the_reference_pages_named_as_exceptions_exist():
    assert set(REFERENCE) <= {p.name for p in PAGES}, "REFERENCE names a page the guide does not have"


def test_the_index_lists_every_page_in_the_order_a_workshop_runs():
    listed = guide_pages((GUIDE / "index.md").read_text())
    assert listed[: len(WORKSHOP)] == WORKSHOP, listed  # the task pages first, then the reference pages
    assert not [name for name in listed[len(WORKSHOP) :] if re.match(r"\d", name)], "a numbered page out of order"
    assert sorted(listed) == sorted(p.stem for p in PAGES if p.name != "index.md"), "a page the index leaves out"


def test_every_heading_of_the_one_file_guide_is_on_exactly_one_page():
    rows = [line.split("\t") for line in OLD_HEADINGS.read_text().splitlines() if not line.startswith("#")]
    assert len(rows) > 30, rows  # the old guide had 39
    on = {p.name: headings(p) for p in PAGES}
    for page, heading in rows:
        where = [name for name, found in on.items() if title(heading) in found]
        expected = [] if page == "generated" else [page]  # generated: a website page made from data, not the guide's
        assert where == expected, f"{heading!r} is a heading of {where or 'no page'}, not only of {page}"


@pytest.mark.parametrize(
    "path",
    [*PAGES, ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "docs" / "instructor-guide.md"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_relative_link_leads_to_a_file_and_its_heading(path):
    broken = []
    for link in links(path):
        target, _, fragment = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            broken.append(f"{link}: no file {file}")
        elif fragment and file.suffix == ".md" and fragment not in {anchor(h) for h in headings(file)}:
            broken.append(f"{link}: {file.name} has no heading with the anchor #{fragment}")
    assert not broken, f"{path.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_every_benchmark_is_in_the_measure_page_table():
    """A benchmark the guide does not list is one an instructor never runs: each script of benchmarks/ has a row."""
    page = (GUIDE / "08-measure.md").read_text()
    missing = [p.name for p in sorted((ROOT / "benchmarks").glob("*.py")) if f"| `{p.name}` |" not in page]
    assert missing == [], f"add a row for {missing} to the table in docs/guide/08-measure.md"
