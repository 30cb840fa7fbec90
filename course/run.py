"""`python -m course run`: an instructor's dry run of the solution notebooks before a workshop.

Each notebook runs headless on a fresh course kernel with its own engine cluster (stopped afterwards,
whatever happened), and the run leaves executed copies, HTML renderings and an index.html with each
notebook's status, duration and key figures. Notebooks publish key figures with `key_figure(...)`.
The index also says, per notebook and at the top, when the offline fallback data stood in for a real
dataset (course.data announces it in the notebook's output), since its figures are then not the real ones,
and each notebook's peak memory (kernel, engines and their children together; course.memory), flagged above
Binder's 2 GB. Beside index.html the run leaves record.json, the same as data with the date, commit and machine
(course.records); `--record FILE` writes it where the course's website reads recorded runs (docs/guide/records/).
"""

from __future__ import annotations

import html
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course import UserError, memory, records
from course.grading import KERNEL_START_TIMEOUT

FIGURE_MIME = "application/vnd.course.key-figure+json"
KERNEL = "ddl-hpc"
SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
CELL_TIMEOUT = 1800  # seconds per cell: full-profile training cells are long
FALLBACK = re.compile(r"DATASET FALLBACK: (\w+) was not found")  # course.data's announcement


def key_figure(name: str, value: float | str, unit: str = "") -> None:
    """Show a headline result (a speedup, an accuracy) so `course run` can put it in its index."""
    from IPython.display import display

    shown = f"{value:.3g}" if isinstance(value, float) else str(value)
    display(
        {"text/plain": f"{name}: {shown} {unit}".rstrip(), FIGURE_MIME: {"name": name, "value": value, "unit": unit}},
        raw=True,
    )


@dataclass
class Result:
    """One notebook's dry run."""

    notebook: str
    ok: bool
    seconds: float
    error: str = ""
    figures: list[dict] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)  # datasets the offline fallback stood in for
    peak_memory: int = 0  # bytes: kernel, engines and their children together, at the highest sample


def find(names: list[str], available: list[Path] | None = None) -> list[Path]:
    """Notebooks by name, stem or number ('07', '07_horovod') among `available` (the solutions by default), or any
    .ipynb path; all of them when `names` is empty."""
    available = sorted(SOLUTIONS.glob("*.ipynb")) if available is None else available
    if not names:
        return available
    chosen = []
    for name in names:
        given = Path(name).expanduser()
        matches = (
            [given.resolve()]
            if given.suffix == ".ipynb" and given.is_file()
            else [p for p in available if name in (p.name, p.stem, p.stem.split("_")[0])]
        )
        if not matches:
            raise UserError(f"no solution notebook {name!r}; available: {', '.join(p.stem for p in available)}")
        chosen += [m for m in matches if m not in chosen]
    return chosen


def figures_in(notebook: nbformat.NotebookNode) -> list[dict]:
    """The key figures a notebook published while it ran, in order."""
    return [
        dict(output["data"][FIGURE_MIME])
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if FIGURE_MIME in output.get("data", {})
    ]


def fallbacks_in(notebook: nbformat.NotebookNode) -> list[str]:
    """The datasets a notebook's run replaced by the offline fallback (announced in its output, engines' too)."""
    found: list[str] = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            text = output.get("text", "") + str(output.get("data", {}).get("text/plain", ""))
            found += [name for name in FALLBACK.findall(text) if name not in found]
    return found


def execute(path: Path, profile: str = "quick", progress=None) -> tuple[Result, nbformat.NotebookNode]:
    """Run one notebook top to bottom on a fresh kernel with its own cluster; never raises for a failing cell."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    from course import cluster

    notebook = nbformat.read(path, as_version=4)
    cluster_id = cluster.normalise_id(f"run-{path.stem}-{os.getpid()}")  # two dry runs of one notebook side by side
    env = dict(os.environ, COURSE_PROFILE=profile, COURSE_CLUSTER_ID=cluster_id, TF_CPP_MIN_LOG_LEVEL="2")
    client = NotebookClient(
        notebook,
        kernel_name=KERNEL,
        timeout=CELL_TIMEOUT,
        startup_timeout=KERNEL_START_TIMEOUT,
        resources={"metadata": {"path": str(path.parent)}},
        on_cell_executed=(lambda **_: progress.update(1)) if progress else None,
    )
    started, error, peak = time.perf_counter(), "", memory.PeakMemory()
    try:
        with peak:
            client.execute(env=env)
    except CellExecutionError as exc:
        error = f"{exc.ename}: {exc.evalue}" if getattr(exc, "ename", None) else str(exc).strip().splitlines()[-1]
    except (CellTimeoutError, DeadKernelError) as exc:
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    finally:
        cluster.stop(cluster_id)  # a notebook that failed half-way must not leave engines behind
    seconds = time.perf_counter() - started
    return Result(
        path.stem, not error, seconds, error, figures_in(notebook), fallbacks_in(notebook), peak.peak
    ), notebook


def memory_cell(r: Result) -> str:
    """The index's peak-memory cell: the figure, flagged when Binder would have restarted the kernel."""
    shown = memory.megabytes(r.peak_memory)
    return (
        f"<b>{shown}: above Binder's {memory.megabytes(memory.BINDER_LIMIT)}</b>"
        if r.peak_memory > memory.BINDER_LIMIT
        else shown
    )


def write_index(results: list[Result], out: Path, profile: str) -> Path:
    """index.html: one row per notebook with its status, duration and key figures, linking the executed copy."""
    rows = []
    for r in results:
        figures = "<br>".join(
            html.escape(
                f"{f['name']}: {f['value']:.3g} {f.get('unit', '')}"
                if isinstance(f["value"], float)
                else f"{f['name']}: {f['value']} {f.get('unit', '')}"
            )
            for f in r.figures
        )
        status = "ok" if r.ok else f"FAILED: {html.escape(r.error)}"
        data = (
            f"<b>offline fallback</b> (scikit-learn's digits) stood in for {html.escape(', '.join(r.fallbacks))}"
            if r.fallbacks
            else "as configured"
        )
        rows.append(
            f"<tr class='{'ok' if r.ok else 'failed'}'><td><a href='{r.notebook}.html'>{r.notebook}</a> "
            f"(<a href='{r.notebook}.ipynb'>ipynb</a>)</td><td>{status}</td><td>{r.seconds:.0f} s</td>"
            f"<td>{memory_cell(r)}</td><td>{data}</td><td>{figures}</td></tr>"
        )
    total = sum(r.seconds for r in results)
    replaced = sorted({name for r in results for name in r.fallbacks})
    warning = (
        f"<p class='fallback'><b>Data:</b> the offline fallback (scikit-learn's 8x8 digits) stood in for "
        f"{html.escape(', '.join(replaced))} in {sum(bool(r.fallbacks) for r in results)} notebook(s), so "
        f"their accuracies and timings are not those of the real datasets; give the course the data "
        f"(course data fetch, COURSE_DATA_DIR) and run again.</p>"
        if replaced
        else "<p>Data: no notebook used the offline fallback.</p>"
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Course dry run ({profile})</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{border:1px solid #ccc;padding:.4em;vertical-align:top}}
table{{border-collapse:collapse}} tr.failed td{{background:#fdd}} tr.ok td:nth-child(2){{color:#070}}
p.fallback{{background:#ffe9b3;padding:.5em}}</style></head>
<body><h1>Course dry run: {profile} profile</h1>
<p>{sum(r.ok for r in results)} of {len(results)} notebooks ran; {total:.0f} s in all; highest peak memory \
{memory.megabytes(max((r.peak_memory for r in results), default=0))} (Binder's limit: 2 GB); {time.strftime("%Y-%m-%d %H:%M")}.</p>
{warning}
<p>The same as data (date, commit, machine, figures): <a href="record.json">record.json</a>.</p>
<table><tr><th>notebook</th><th>status</th><th>time</th><th>peak memory</th><th>data</th><th>key figures</th></tr>{"".join(rows)}</table></body></html>
"""
    index = out / "index.html"
    index.write_text(page)
    return index


def record(results: list[Result], header: dict) -> dict:
    """The run as data: HEADER (course.records.header, taken as the run started: when, where, at which commit), then
    per notebook its status, time, peak memory, the datasets the offline fallback stood in for, and its key figures
    as published."""
    notebooks = [
        {
            "notebook": r.notebook,
            "status": "ok" if r.ok else "failed",
            "error": r.error,
            "seconds": round(r.seconds, 1),
            "peak_memory_bytes": r.peak_memory,
            "fallbacks": r.fallbacks,
            "figures": [{"name": f["name"], "value": f["value"], "unit": f.get("unit", "")} for f in r.figures],
        }
        for r in results
    ]
    return {**header, "notebooks": notebooks}


def main(
    names: list[str], profile: str = "quick", out: str | os.PathLike = "run-output", record_to: str | None = None
) -> int:
    """Run the chosen notebooks with a progress bar; write the executed copies, the index, record.json and the
    record at RECORD_TO if given; 1 if any failed."""
    from nbconvert import HTMLExporter
    from tqdm import tqdm

    if profile not in ("quick", "full"):
        raise UserError(f"unknown profile {profile!r}; use quick or full")
    if record_to and Path(record_to).expanduser().is_dir():
        raise UserError(f"--record takes a file name, and {record_to} is a folder: e.g. {record_to}/run.json")
    paths = find(names)
    out_dir = Path(out).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    results, header = [], records.header(records.RUN, profile)
    for path in paths:
        cells = sum(c.cell_type == "code" for c in nbformat.read(path, as_version=4).cells)
        with tqdm(total=cells, desc=path.stem, unit="cell") as bar:
            result, executed = execute(path, profile, progress=bar)
        results.append(result)
        nbformat.write(executed, out_dir / f"{path.stem}.ipynb")
        (out_dir / f"{path.stem}.html").write_text(HTMLExporter().from_notebook_node(executed)[0])
        print(
            f"{'ok    ' if result.ok else 'FAILED'} {path.stem} in {result.seconds:.0f} s, "
            f"peak memory {memory.megabytes(result.peak_memory)}"
            + (f": {result.error}" if result.error else "")
            + (f" (offline fallback data for {', '.join(result.fallbacks)})" if result.fallbacks else ""),
            flush=True,
        )
    index = write_index(results, out_dir, profile)
    data = record(results, header)
    records.write(out_dir / "record.json", data)
    if record_to:
        print(f"record of the run: {records.write(record_to, data)}")
    failed = [r.notebook for r in results if not r.ok]
    print(f"{len(results) - len(failed)} of {len(results)} notebooks ran ({profile} profile); report: {index}")
    return 1 if failed else 0
