"""Recorded runs (course.records) and the site's pages made from them (website/results.py): per notebook the newest
record that ran it, its provenance, its key figures joined with the hand-written readings by name, the mutation
report's rows; a reading that names a figure no notebook publishes fails. Fast: small records written here (the
commands that write real ones are run in tests/test_run.py and tests/test_mutation.py)."""

from __future__ import annotations

import json
import re
import subprocess

import nbformat
import pytest

from course import UserError, contents, records
from tests.conftest import ROOT
from website import results

SOLUTIONS = ROOT / "solutions"
FIRST, SECOND = "01_task_graphs", "09_sharded_data_parallelism"


def test_the_machine_and_commit_a_record_names(tmp_path):
    facts = records.machine()
    assert facts["cores"] >= 1 and facts["memory_bytes"] > 2**28 and facts["python"].count(".") == 2, facts
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Example CPU @ 2.0GHz\nflags\t: fpu\n")
    assert records.cpu_model(cpuinfo) == "Example CPU @ 2.0GHz"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert records.commit()["commit"] == head and re.fullmatch(r"[0-9a-f]{40}", head)
    assert records.commit(tmp_path) == {"commit": "unknown", "changed": None}  # not a git checkout
    with pytest.raises(UserError, match="is a folder"):
        records.write(tmp_path, {})


def run_record(date: str, *entries: dict) -> dict:
    """A `course run` record of DATE holding ENTRIES, with the header of this machine and checkout."""
    return {**records.header(records.RUN, "quick"), "date": date, "notebooks": list(entries)}


def entry(notebook: str, *figures: tuple[str, float | str, str], status: str = "ok") -> dict:
    return {
        "notebook": notebook,
        "status": status,
        "error": "" if status == "ok" else "ZeroDivisionError: division by zero",
        "seconds": 21.4,
        "peak_memory_bytes": 440 * 2**20,
        "fallbacks": [],
        "figures": [{"name": n, "value": v, "unit": u} for n, v, u in figures],
    }


def save(folder, name: str, record: dict) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(json.dumps(record))


def test_each_notebook_is_shown_from_the_newest_run_of_it_with_its_readings(tmp_path):
    folder = tmp_path / "records"
    speedup = "blocked multiply speedup, 2 engines, blocks of 384"
    save(folder, "b.json", run_record("2026-11-20T10:00:00+00:00", entry(FIRST, (speedup, 1.2, "x")), entry(SECOND)))
    newer = run_record("2026-11-28T03:30:00+00:00", entry(FIRST, (speedup, 1.8333, "x"), ("a word", "yes", "")))
    save(folder, "a.json", newer)  # the newer one sorts first by file name: the date decides, not the name
    source = tmp_path / "site"
    results.write_pages(source, folder)
    page = (source / "reference" / "recorded-results.md").read_text()
    first = page.split("## 01 ")[1].split("\n## ")[0]
    assert "Recorded 2026-11-28 03:30:00+00:00 at commit" in first and "(`docs/guide/records/a.json`)" in first
    reading = results.load_readings()[FIRST]["blocked multiply speedup, * engines, blocks of *"]
    assert f"| {speedup} | 1.83 x | {' '.join(reading.split())} |" in first, first
    assert "| a word | yes |  |" in first  # a figure without a reading is shown, its reading left empty
    assert f"{newer['machine']['cores']} cores ({newer['machine']['cpu']})" in first
    assert "It ran in 21 s, peak memory 440 MB." in first
    ninth = page.split("## 09 ")[1].split("\n## ")[0]
    assert "Recorded 2026-11-20 10:00:00" in ninth and "It published no key figure." in ninth
    assert f"No recorded run of `{'02_sgd'}` yet." in page  # every notebook has its section
    failed = {**run_record("2026-11-29T00:00:00+00:00", entry(FIRST, status="failed")), "file": "c.json"}
    text = results.results_page(contents.notebooks(), results.newest_runs([failed]), {})
    assert "It FAILED (ZeroDivisionError: division by zero) in 21 s" in text


def notebook_publishing(folder, name: str, *calls: str) -> None:
    """A solution notebook NAME in FOLDER whose second cell makes CALLS (key_figure calls)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(f"# {name[:2]} - A notebook\n\n**Estimated time:** 5 minutes"),
        nbformat.v4.new_code_cell("from course.run import key_figure\nn = 2\n" + "\n".join(calls)),
    ]
    folder.mkdir(exist_ok=True)
    nbformat.write(nb, str(folder / f"{name}.ipynb"))


def test_a_reading_must_name_a_figure_the_notebook_publishes(tmp_path):
    solutions = tmp_path / "solutions"
    notebook_publishing(solutions, "01_one", 'key_figure(f"speedup on {n} engines", 1.5, "x")', 'key_figure("a", 1)')
    readings = tmp_path / "key-figures.yml"
    readings.write_text('01_one:\n  "speedup on * engines": fine\n  "a": also\n')
    assert results.load_readings(readings, solutions) == {"01_one": {"speedup on * engines": "fine", "a": "also"}}
    readings.write_text('01_one:\n  "speedup on * ranks": renamed\n')
    with pytest.raises(UserError, match="no key_figure call of 01_one publishes a figure named 'speedup on \\* ranks'"):
        results.load_readings(readings, solutions)
    readings.write_text('02_gone:\n  "a": the notebook is gone\n')
    with pytest.raises(UserError, match="names the notebook '02_gone', which solutions/ does not have"):
        results.load_readings(readings, solutions)


def test_the_course_readings_name_figures_its_notebooks_publish():
    readings = results.load_readings()  # raises for a name no key_figure call of the notebook publishes
    published = {p.stem for p in SOLUTIONS.glob("*.ipynb") if results.figure_names(p)}
    assert set(readings) == published, "every notebook with key figures has its readings, and only those"


def test_the_mutation_page_shows_each_notebooks_newest_report(tmp_path):
    row = {
        "notebook": FIRST,
        "exercise": "ex1",
        "mutants": 12,
        "equivalent": 4,
        "visible": 11,
        "hidden": 12,
        "hung": 0,
        "semantic": 3,
        "semantic_visible": 3,
        "semantic_hidden": 3,
        "minutes": 0.1,
        "survivors": [],
    }
    old = {**records.header(records.MUTATION, "quick"), "date": "2026-11-01T00:00:00+00:00", "file": "m1.json"}
    old["options"] = {"limit": 12, "exercise": None, "semantic_only": False}
    new = {**old, "date": "2026-11-02T00:00:00+00:00", "file": "m2.json"}
    survivor = {"kind": "statement", "what": "line 1: `x = 1` removed"}
    old["exercises"] = [row, {**row, "notebook": SECOND, "exercise": "ex-zero", "survivors": [survivor]}]
    new["exercises"] = [{**row, "visible": 12, "mutants": None, "equivalent": None}]
    page = results.mutation_page(contents.notebooks(), results.newest_reports([old, new]))
    first = page.split("## 01 ")[1].split("\n## ")[0]
    assert (
        "(`docs/guide/records/m2.json`)" in first and "| `ex1` | - | - | - | - | 0 | 3 | 3/3 | 3/3 | 0.1 min |" in first
    )
    ninth = page.split("## 09 ")[1]
    assert "(`docs/guide/records/m1.json`)" in ninth and "| `ex-zero` | 12 | 4 | 11/12 | 12/12 |" in ninth
    assert "- `ex-zero` (statement): line 1: `x = 1` removed" in ninth
    assert "## 02 " not in page  # a notebook no report measured has no section
    assert "No mutation report is recorded yet." in results.mutation_page(contents.notebooks(), {})


def test_a_file_that_is_not_a_record_is_refused(tmp_path):
    (tmp_path / "x.json").write_text('{"kind": "something else"}')
    with pytest.raises(UserError, match="x.json is not a record of schema 1"):
        results.load_records(tmp_path)
