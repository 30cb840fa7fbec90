"""The site's reference pages of measured results, generated from recorded runs (course.records), never hand-kept.

    write_pages(source)   # SOURCE/reference/recorded-results.md and SOURCE/reference/mutation-report.md

Recorded runs are JSON files in docs/guide/records/ (`course run --record FILE`, `course mutation-report --json
FILE`). Per notebook, the newest record that ran it gives its section: the record's date, commit, profile and
machine, then its key figures (what the notebook published with `key_figure`) or its mutation report's rows. What
the class should read from a key figure is written by hand in docs/guide/key-figures.yml, per notebook, keyed by the
figure's name (`*` for the parts the run fills in, such as the number of engines); a key that no `key_figure` call
of that notebook can publish fails the build, so a renamed figure cannot leave its reading behind.
"""

from __future__ import annotations

import ast
import json
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from course import UserError, contents, memory, records

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "guide" / "records"
READINGS = ROOT / "docs" / "guide" / "key-figures.yml"
SOLUTIONS = ROOT / "solutions"
SAMPLE = "1"  # what a reading's `*` stands for when it is matched against the notebook's key_figure calls


def load_records(folder: Path = RECORDS) -> list[dict[str, Any]]:
    """Every record in FOLDER, oldest first (by date; ISO dates in UTC sort as text)."""
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} is not a record (JSON): {exc}") from None
        if record.get("schema") != records.SCHEMA or record.get("kind") not in (records.RUN, records.MUTATION):
            raise UserError(f"{path} is not a record of schema {records.SCHEMA} of `course run` or the mutation report")
        found.append({**record, "file": path.name})
    return sorted(found, key=lambda r: r["date"])


def newest_runs(found: list[dict[str, Any]]) -> dict[str, tuple[dict, dict]]:
    """notebook -> (the newest `course run` record that ran it, its entry there)."""
    newest: dict[str, tuple[dict, dict]] = {}
    for record in found:
        if record["kind"] == records.RUN:
            newest.update({entry["notebook"]: (record, entry) for entry in record["notebooks"]})
    return newest


def newest_reports(found: list[dict[str, Any]]) -> dict[str, tuple[dict, list[dict]]]:
    """notebook -> (the newest mutation report that measured it, its rows for that notebook)."""
    newest: dict[str, tuple[dict, list[dict]]] = {}
    for record in found:
        if record["kind"] == records.MUTATION:
            for name in dict.fromkeys(row["notebook"] for row in record["exercises"]):
                newest[name] = (record, [row for row in record["exercises"] if row["notebook"] == name])
    return newest


def _name_pattern(name: ast.expr) -> re.Pattern:
    """What a key_figure call's NAME argument can be: a string as it is; an f-string's fields, anything."""
    parts = name.values if isinstance(name, ast.JoinedStr) else [name]
    return re.compile("".join(re.escape(p.value) if isinstance(p, ast.Constant) else ".+" for p in parts))


def figure_names(notebook: Path) -> list[re.Pattern]:
    """The names the `key_figure` calls of the notebook at NOTEBOOK can publish (its code cells, magics included)."""
    from IPython.core.inputtransformer2 import TransformerManager

    patterns = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or "key_figure(" not in source:
            continue
        for node in ast.walk(ast.parse(TransformerManager().transform_cell(source))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "key_figure":
                patterns.append(_name_pattern(node.args[0]))
    return patterns


def load_readings(path: Path = READINGS, solutions: Path = SOLUTIONS) -> dict[str, dict[str, str]]:
    """notebook -> {figure name (`*` for what varies) -> what the class should read from it}, each name checked
    against the `key_figure` calls of solutions/NOTEBOOK.ipynb."""
    import yaml

    readings = (yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None) or {}
    for notebook, figures in readings.items():
        source = solutions / f"{notebook}.ipynb"
        if not source.is_file():
            raise UserError(f"{path.name} names the notebook {notebook!r}, which solutions/ does not have")
        published = figure_names(source)
        for name in figures:
            if not any(p.fullmatch(name.replace("*", SAMPLE)) for p in published):
                raise UserError(f"{path.name}: no key_figure call of {notebook} publishes a figure named {name!r}")
    return readings


def _cell(text: Any) -> str:
    """TEXT as one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def shown(value: Any, unit: str = "") -> str:
    """A figure's value as `course run`'s index shows it: 3 significant digits for a float, then its unit."""
    text = f"{value:.3g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


def provenance(record: dict[str, Any], source: str | None = None) -> str:
    """Where a record's numbers come from: its date, commit, profile and machine, and its file (SOURCE: by default
    docs/guide/records/ the record's file; "" names none)."""
    where = f"docs/guide/records/{record['file']}" if source is None else source
    m = record["machine"]
    commit = record["commit"][:12] if record["commit"] != "unknown" else "an unknown commit"
    changed = " with uncommitted changes" if record.get("changed") else ""
    gpus = f"{m['gpus']} GPU(s)" if m.get("gpus") else "no GPU"
    return (
        f"Recorded {record['date'].replace('T', ' ')} at commit `{commit}`{changed}, {record['profile']} profile, on "
        f"{m['cores']} cores ({m['cpu']}), {m['memory_bytes'] / 2**30:.1f} GiB memory, {gpus}, Python {m['python']}, "
        f"{m['system']}; load average {m['load_average']} as it started" + (f" (`{where}`)." if where else ".")
    )


RESULTS_INTRO = """\
What each notebook published as its key figures (`key_figure(...)` in the notebook) in the newest recorded run of
it, with when, where and at which commit that run was made: compare a dry run (`python -m course run`, whose
`index.html` shows the same figures) with these. Times move with the machine and its load; figures that involve no
training or timing repeat exactly. What the class should read from a figure is written by hand in
`docs/guide/key-figures.yml`; the instructor guide's *Expected results* page has the rest of what each notebook
prints. To refresh a notebook's section: `python -m course run NN --record docs/guide/records/run-DATE-NN.json`, commit
the file, and build the site again (`make docs`)."""


def results_page(
    found: list[contents.Notebook], runs: dict[str, tuple[dict, dict]], readings: dict[str, dict[str, str]]
) -> str:
    """The expected-results page: a section per notebook, from its newest recorded run."""
    lines = ["# Expected results, from recorded runs", "", RESULTS_INTRO, ""]
    for nb in found:
        lines += [f"## {nb.number} {nb.title}", ""]
        if nb.name not in runs:
            lines += [f"No recorded run of `{nb.name}` yet.", ""]
            continue
        record, entry = runs[nb.name]
        data = f"the offline fallback stood in for {', '.join(entry['fallbacks'])}" if entry["fallbacks"] else ""
        status = "ran" if entry["status"] == "ok" else f"FAILED ({_cell(entry['error'])})"
        lines += [provenance(record), ""]
        lines += [
            f"It {status} in {entry['seconds']:.0f} s, peak memory {memory.megabytes(entry['peak_memory_bytes'])}"
            + (f"; {data}" if data else "")
            + ".",
            "",
        ]
        if not entry["figures"]:
            lines += ["It published no key figure.", ""]
            continue
        read = readings.get(nb.name, {})
        lines += ["| key figure | value | what the class should read from it |", "|---|---|---|"]
        for figure in entry["figures"]:
            meaning = next((text for key, text in read.items() if fnmatchcase(figure["name"], key)), "")
            lines.append(
                f"| {_cell(figure['name'])} | {_cell(shown(figure['value'], figure['unit']))} | {_cell(meaning)} |"
            )
        lines.append("")
    return "\n".join(lines)


MUTATION_INTRO = """\
How many mutants of each exercise's solution its checks catch, from the newest recorded mutation report of each
notebook (`python -m course mutation-report NN --json docs/guide/records/mutation-DATE-NN.json`; the instructor
guide's *Measure a site and its checks* says what the columns mean). **mutants**: single edits run; **set aside**:
those the report set aside as equivalent; **visible** and **hidden**: caught by the check a learner sees, and with
the hidden tests too; **hung**: stopped after a time limit (counted as caught); **semantic**: the listed plausible
wrong answers, and how many of them each caught. The survivors are named under each table. The last report on the
whole course, run before reports were recorded as data, is the guide's
[report on the course (2026-11-27)](../instructors/mutation-report-2026-11-27.md), with what became of each survivor."""


def _share(caught: int | None, total: int | None) -> str:
    return "-" if not total else f"{caught}/{total}"


def mutation_page(found: list[contents.Notebook], reports: dict[str, tuple[dict, list[dict]]]) -> str:
    """The mutation report's page: per notebook, the rows of the newest report that measured it."""
    lines = ["# The mutation report's last table", "", MUTATION_INTRO, ""]
    if not reports:
        lines += ["No mutation report is recorded yet.", ""]
    for nb in found:
        if nb.name not in reports:
            continue
        record, rows = reports[nb.name]
        lines += [f"## {nb.number} {nb.title}", "", provenance(record), ""]
        options = record.get("options", {})
        lines += [f"Options: at most {options.get('limit')} mutants per exercise"]
        lines[-1] += ", the listed wrong answers only." if options.get("semantic_only") else "."
        lines += [
            "",
            "| exercise | mutants | set aside | visible | hidden | hung | semantic | s-visible | s-hidden | time |",
        ]
        lines += ["|---|---|---|---|---|---|---|---|---|---|"]
        survivors = []
        for row in rows:
            n, k = row["mutants"], row["semantic"]
            cells = [
                f"`{row['exercise']}`",
                "-" if n is None else str(n),
                "-" if row["equivalent"] is None else str(row["equivalent"]),
                _share(row["visible"], n),
                _share(row["hidden"], n),
                str(row["hung"]),
                str(k),
                _share(row["semantic_visible"], k),
                _share(row["semantic_hidden"], k),
                f"{row['minutes']:.1f} min",
            ]
            lines.append("| " + " | ".join(cells) + " |")
            survivors += [f"- `{row['exercise']}` ({_cell(s['kind'])}): {_cell(s['what'])}" for s in row["survivors"]]
        lines += ["", "Survivors (no check caught them):" if survivors else "No mutant survived.", "", *survivors, ""]
    return "\n".join(lines)


def write_pages(
    source: Path, folder: Path = RECORDS, readings: Path = READINGS, solutions: Path = SOLUTIONS
) -> list[Path]:
    """Write SOURCE/reference/recorded-results.md and mutation-report.md from the records in FOLDER; the pages."""
    found = contents.notebooks(solutions)
    everything = load_records(folder)
    pages = source / "reference"
    pages.mkdir(parents=True, exist_ok=True)
    results = pages / "recorded-results.md"
    results.write_text(results_page(found, newest_runs(everything), load_readings(readings, solutions)), "utf-8")
    report = pages / "mutation-report.md"
    report.write_text(mutation_page(found, newest_reports(everything)), encoding="utf-8")
    return [results, report]
