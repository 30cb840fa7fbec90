"""`python -m course grade SUBMISSIONS --out DIR`: autograde a class folder, in parallel, incrementally.

SUBMISSIONS/<student>/<notebook>.ipynb is read (never written, moved or deleted); each file's bytes
are read once up front and graded from memory in worker processes (course.grading.autograde).
Results go to DIR/grades.csv (one row per graded cell, plus rows for problems), DIR/totals.csv (each
student's points per notebook and in all) and DIR/feedback/<student>/<notebook>.txt. DIR/.grading-state.json
remembers what was graded with which limits and which version of what grading depends on (the graded and
test cells of solutions/, not its prose), so a second run grades only what changed (unless regrade=True).
"""

from __future__ import annotations

import csv
import difflib
import hashlib
import io
import json
import multiprocessing
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from course import UserError
from course.grading import number, row, solutions_dir
from course.grading.out_folder import refuse_pending, writing
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # nbgrader is imported only once there is something to grade
    from course.grading.autograde import Job, Result, Spec

STATE = ".grading-state.json"
GRADER_VERSION = "2"  # bump when grading changes meaning, so old results are not reused
TOTALS = ("student", "notebook", "points", "max_points", "note")


@dataclass
class Plan:
    """What a run will do: jobs to grade, and rows known without running anything."""

    jobs: list[Job] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    students: list[str] = field(default_factory=list)


def _normal(name: str) -> str:
    """A notebook name without the usual accidents: case, spaces, ' (1)', '-Copy1', 'copy of'."""
    name = name.lower().strip()
    name = re.sub(r"^copy of ", "", name)
    name = re.sub(r"(\s*\(\d+\)|[-_ ]copy\d*)+$", "", name)
    return re.sub(r"[\s\-]+", "_", name)


def _grade_ids(data: bytes) -> set[str]:
    try:
        raw = json.loads(data.decode("utf-8"))
        return {
            c["metadata"]["nbgrader"]["grade_id"]
            for c in raw["cells"]
            if isinstance(c, dict) and "grade_id" in c.get("metadata", {}).get("nbgrader", {})
        }
    except Exception:
        return set()


def identify(file: Path, data: bytes, names: list[str], ids: dict[str, set[str]]) -> tuple[str | None, str]:
    """Which course notebook a file is: (name or None, how it was recognised if not by its name)."""
    stem = file.stem
    if stem in names:
        return stem, ""
    by_name = [n for n in names if _normal(n) == _normal(stem)]
    if len(by_name) == 1:
        return by_name[0], f"the file was named {file.name!r}; it was graded as {by_name[0]}.ipynb"
    found = _grade_ids(data)
    overlap = sorted(((len(found & ids[n]) / max(1, len(ids[n])), n) for n in names), reverse=True)
    if overlap and overlap[0][0] >= 0.5:
        name = overlap[0][1]
        return name, f"the file was named {file.name!r}; its cells show it is {name}, and it was graded as that"
    close = difflib.get_close_matches(_normal(stem), [_normal(n) for n in names], n=1, cutoff=0.8)
    if close:
        name = names[[_normal(n) for n in names].index(close[0])]
        return name, f"the file was named {file.name!r}; it was graded as {name}.ipynb"
    return None, ""


def plan(submissions: Path, solutions: Path, workdir: Path, timeout: float, memory: int) -> tuple[Plan, dict]:
    """Read the class folder (bytes only) and decide what to grade."""
    from course.grading import autograde

    if not submissions.is_dir():
        raise UserError(f"no submissions folder at {submissions}; expected SUBMISSIONS/<student>/<notebook>.ipynb")
    sources, names, ids = _course(solutions)
    result = Plan()
    specs: dict[str, Spec] = {}
    wanted: dict[str, dict[str, tuple[Path, bytes, str]]] = {}
    empty_folders: set[str] = set()
    for entry in sorted(p for p in submissions.iterdir() if not p.name.startswith(".")):
        if not entry.is_dir():
            result.rows.append(
                row(
                    "",
                    entry.name,
                    "misplaced",
                    f"{entry.name} is not in a student folder; put it in {submissions.name}/<student>/",
                )
            )
            continue
        student = entry.name
        result.students.append(student)
        files = sorted(p for p in entry.iterdir() if not p.name.startswith(".") and p.is_file())
        if not files:
            empty_folders.add(student)
        wanted[student] = _choose(student, files, names, ids, result.rows)
        for name in wanted[student]:
            if name not in specs:
                _check_kernel(sources[name])
                specs[name] = autograde.gradebook(sources[name], workdir)
    for student, chosen in wanted.items():
        for name, (file, data, how) in chosen.items():
            result.jobs.append(
                autograde.Job(student, f"{student}/{file.name}", specs[name], data, timeout, memory, how)
            )
        result.rows += _missing(student, set(chosen), specs, student in empty_folders)
    return result, {name: fingerprint(p) for name, p in sources.items()}


def _course(solutions: Path) -> tuple[dict[str, Path], list[str], dict[str, set[str]]]:
    """The notebooks to grade against: each one's path by name, the names in order, each one's grade ids."""
    from course.grading.release import course_notebooks

    sources = {p.stem: p for p in course_notebooks(solutions)}
    if not sources:
        raise UserError(f"{solutions} has no notebooks to grade against")
    return sources, sorted(sources), {name: _grade_ids(path.read_bytes()) for name, path in sources.items()}


def _choose(
    student: str, files: list[Path], names: list[str], ids: dict[str, set[str]], rows: list[dict]
) -> dict[str, tuple[Path, bytes, str]]:
    """The file graded for each course notebook in a student's folder; a row in `rows` for each file that is not."""
    chosen: dict[str, tuple[Path, bytes, str]] = {}
    for file in files:
        if file.suffix.lower() != ".ipynb":
            rows.append(
                row(
                    student,
                    file.name,
                    "not a notebook",
                    f"{file.name} is not a notebook (.ipynb), so it was not graded",
                )
            )
            continue
        data = file.read_bytes()
        name, how = identify(file, data, names, ids)
        if name is None:
            rows.append(
                row(
                    student,
                    file.stem,
                    "unknown",
                    f"{file.name} is not a notebook of this course, so it was not graded; "
                    f"the course notebooks are: {', '.join(n + '.ipynb' for n in names)}",
                )
            )
            continue
        if name in chosen and (how or not chosen[name][2]):
            rows.append(
                row(
                    student,
                    name,
                    "warning",
                    f"{file.name} was not graded: {chosen[name][0].name} was graded for {name}",
                )
            )
            continue
        if name in chosen:
            rows.append(
                row(
                    student,
                    name,
                    "warning",
                    f"{chosen[name][0].name} was not graded: {file.name} was graded for {name}",
                )
            )
        chosen[name] = (file, data, how)
    return chosen


def _missing(student: str, submitted: set[str], specs: dict[str, Spec], empty: bool) -> list[dict]:
    """Rows for the notebooks being graded that a student did not hand in (zero points for each graded cell)."""
    rows = []
    for name in sorted(set(specs) - submitted):
        why = f"the folder {student}/ is empty" if empty else f"no {name}.ipynb in {student}/"
        for cell in specs[name].graded:
            rows.append(row(student, name, "missing", why, cell.grade_id, 0, number(cell.points)))
    if empty and not specs:
        rows.append(row(student, "", "empty", f"the folder {student}/ has no notebooks"))
    return rows


def fingerprint(source: Path) -> str:
    """What grading depends on in an instructor notebook: its kernel, and the graded and locked code cells
    (tests, hidden tests, points, set-up the learner cannot change), in order. Prose, answer cells (the
    learner's replace them) and outputs are left out, so editing them does not regrade the class."""
    nb = json.loads(source.read_text())
    kept = [nb.get("metadata", {}).get("kernelspec", {}).get("name", "")]
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") or (meta.get("locked") and cell.get("cell_type") == "code"):
            source_text = cell.get("source", "")
            kept.append(
                [
                    meta.get("grade_id"),
                    cell.get("cell_type"),
                    bool(meta.get("grade")),
                    bool(meta.get("solution")),
                    meta.get("points", 0),
                    "".join(source_text) if isinstance(source_text, list) else source_text,
                ]
            )
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()


def _check_kernel(source: Path) -> None:
    """Stop before grading anything if the notebook's kernel is not installed (a set-up problem)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    name = json.loads(source.read_text()).get("metadata", {}).get("kernelspec", {}).get("name", "python3")
    try:
        KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        raise UserError(
            f"{source.name} runs on the Jupyter kernel {name!r}, which is not installed here; "
            f"run `make setup` (it registers the course kernel)"
        ) from None


def _key(job: Job, solution_hash: str) -> str:
    h = hashlib.sha256(job.data)
    h.update(json.dumps([solution_hash, job.timeout, job.memory, job.note, GRADER_VERSION]).encode())
    return h.hexdigest()


def _work(job: Job) -> Result:
    from course.grading import autograde

    return autograde.grade(job)


def _init_worker(threads: int) -> None:
    # N kernels on N cores: one thread each unless told otherwise (the placement lesson of the course)
    from course import devices

    devices.default_threads(os.environ, threads)


def run_jobs(
    jobs: list[Job],
    workers: int,
    progress: bool = True,
    cores: int | None = None,
    on_result: Callable[[int, Result], None] | None = None,
) -> dict[int, Result]:
    """Grade jobs in `workers` processes sharing `cores` (default: this machine's); a crashed worker costs only
    the jobs it held (retried alone). `on_result(i, result)` is called as each job is graded."""
    from tqdm import tqdm

    from course.grading.autograde import _whole

    results: dict[int, Result] = {}
    pending = list(range(len(jobs)))
    threads = max(1, (cores or os.cpu_count() or 1) // workers)
    # fork: workers start at once with nbgrader already imported (the parent never runs a kernel)
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    bar = tqdm(total=len(jobs), unit="notebook", desc="grading", disable=not progress or None, leave=False)

    def done(i: int, result: Result) -> None:
        results[i] = result
        bar.update(1)
        if on_result is not None:
            on_result(i, result)

    alone = False
    try:
        while pending:
            size = 1 if alone else workers
            with ProcessPoolExecutor(size, mp_context=context, initializer=_init_worker, initargs=(threads,)) as pool:
                batch = pending[:1] if alone else pending
                futures = {pool.submit(_work, jobs[i]): i for i in batch}
                broken = []
                for future in as_completed(futures):
                    i = futures[future]
                    try:
                        done(i, future.result())
                    except BrokenProcessPool:
                        broken.append(i)
                    except Exception as exc:  # never lose the class for one job
                        done(i, _whole(jobs[i], "error", f"the grader failed on this file: {exc}"))
            if alone and broken:  # this job alone kills its worker
                done(broken[0], _whole(jobs[broken[0]], "error", "grading this file crashed the grader's worker"))
            pending = [i for i in pending if i not in results]
            alone = alone or bool(broken)
    finally:
        bar.close()
    return results


def totals(rows: list[dict], students: list[str]) -> list[dict]:
    """Each student's points per notebook and in all (notebook "TOTAL"), from the per-check rows. A notebook the
    grading machinery failed on has no points, and neither has the student's total until it is graded."""
    per: dict[str, dict[str, list]] = {s: {} for s in students}
    for r in rows:
        if r["student"] in per and r["cell"]:
            got = per[r["student"]].setdefault(r["notebook"], [0.0, 0.0, False])
            got[0] += float(r["points"]) if r["points"] != "" else 0.0
            got[1] += float(r["max_points"])
            got[2] = got[2] or r["points"] == ""
    out = []
    for student, notebooks in per.items():
        ungraded = [name for name, (_, _, failed) in notebooks.items() if failed]
        for name, (got, total, failed) in sorted(notebooks.items()):
            out.append(
                dict(
                    student=student,
                    notebook=name,
                    points="" if failed else number(got),
                    max_points=number(total),
                    note="not graded: the grading machinery failed; run course grade again" if failed else "",
                )
            )
        got = sum(v[0] for v in notebooks.values())
        total = sum(v[1] for v in notebooks.values())
        out.append(
            dict(
                student=student,
                notebook="TOTAL",
                points="" if ungraded else number(got),
                max_points=number(total),
                note=f"incomplete: {', '.join(ungraded)} not graded yet" if ungraded else "",
            )
        )
    return out


def _csv(rows: list[dict], fields: tuple[str, ...] | None = None) -> str:
    from course.grading import FIELDS

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields or FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


@dataclass
class Grading:
    """One run between its plan and its output: what to grade (`todo`, indices into plan.jobs) and what is known."""

    submissions: Path
    out: Path
    timeout: float
    memory: int
    workers: int
    plan: Plan
    keys: list[str]
    todo: list[int]
    state: dict
    started: float = field(default_factory=time.time)  # wall clock: a Slurm grading is finished by another process


@dataclass(frozen=True)
class Options:
    """A grading's options, checked and resolved: the folders, seconds per cell, workers, memory in bytes."""

    submissions: Path
    out: Path
    solutions: Path
    timeout: float
    workers: int
    memory: int


def check_options(
    submissions: Path,
    out: Path,
    solutions: Path | None = None,
    timeout: float | None = None,
    workers: int | None = None,
    memory: str | int | None = None,
) -> Options:
    """Refuse, before anything is written, options no grading could run with (one line each); returns them
    resolved."""
    from course.grading import CELL_TIMEOUT, MEMORY_LIMIT, parse_memory

    submissions, out = Path(submissions).resolve(), Path(out).resolve()
    solutions = solutions_dir(solutions).resolve()
    timeout = CELL_TIMEOUT if timeout is None else timeout
    if timeout <= 0:
        raise UserError(f"--timeout must be a positive number of seconds, not {timeout:g}")
    workers = max(1, os.cpu_count() or 1) if workers is None else workers
    if workers < 1:
        raise UserError(f"--workers must be at least 1, not {workers}")
    memory_bytes = parse_memory(MEMORY_LIMIT if memory is None else memory)
    if out == submissions or submissions in out.parents:
        raise UserError(f"--out {out} is inside the submissions folder; choose a folder outside {submissions}")
    if not submissions.is_dir():
        raise UserError(f"no submissions folder at {submissions}; expected SUBMISSIONS/<student>/<notebook>.ipynb")
    if not solutions.is_dir():
        raise UserError(f"no solutions folder at {solutions}; run from the course checkout or pass --solutions DIR")
    return Options(submissions, out, solutions, timeout, workers, memory_bytes)


def prepare(o: Options, workdir: Path, regrade: bool = False) -> Grading:
    """Read the class (bytes only) and what an earlier run graded; decide what to grade. The instructor
    notebooks' gradebooks go into `workdir`, which the graders must be able to read."""
    started = time.time()
    state_path = o.out / STATE
    try:
        state = json.loads(state_path.read_text()) if state_path.exists() and not regrade else {}
    except (OSError, json.JSONDecodeError):
        state = {}
    the_plan, hashes = plan(o.submissions, o.solutions, workdir, o.timeout, o.memory)
    keys = [_key(job, hashes[job.spec.notebook]) for job in the_plan.jobs]
    todo = [i for i, job in enumerate(the_plan.jobs) if state.get(job.file, {}).get("key") != keys[i]]
    return Grading(o.submissions, o.out, o.timeout, o.memory, o.workers, the_plan, keys, todo, state, started)


def grade(options: Options, regrade: bool = False, progress: bool = True) -> str:
    """Grade a class folder into its output folder on this machine, with options from `check_options` (which
    refuses bad ones before anything is written); returns the summary line."""
    import tempfile

    with writing(options.out), tempfile.TemporaryDirectory(prefix="course-gradebooks-") as workdir:
        refuse_pending(options.out)
        g = prepare(options, Path(workdir), regrade)
        todo = [g.plan.jobs[i] for i in g.todo]
        fresh = run_jobs(todo, g.workers, progress) if todo else {}
        return finish(g, fresh)


def finish(g: Grading, fresh: dict[int, Result], where: str = "") -> str:
    """Merge this run's results (by position in g.todo) with what is kept, write grades.csv, totals.csv, the
    feedback and the state; returns the summary line."""
    from course.grading import size_words

    out, state, the_plan = g.out, g.state, g.plan
    new_state = {}
    for n, i in enumerate(g.todo):
        job = the_plan.jobs[i]
        # a failure of the grading machinery is kept for this run's report but never reused: no key
        new_state[job.file] = {
            "key": "" if fresh[n].machinery else g.keys[i],
            "notebook": job.spec.notebook,
            "rows": fresh[n].rows,
            "feedback": fresh[n].feedback,
        }
    for i, job in enumerate(the_plan.jobs):
        if job.file not in new_state:
            new_state[job.file] = state[job.file]
    rows = [r for entry in new_state.values() for r in entry["rows"]] + the_plan.rows
    order = {s: n for n, s in enumerate(the_plan.students)}
    rows.sort(
        key=lambda r: (
            order.get(r["student"], -1),
            r["notebook"],
            r["cell"] == "",
        )
    )
    _write(out / "grades.csv", _csv(rows))
    _write(out / "totals.csv", _csv(totals(rows, the_plan.students), TOTALS))
    for file, entry in new_state.items():
        student = file.split("/", 1)[0]
        _write(out / "feedback" / student / f"{entry['notebook']}.txt", entry["feedback"])
    for file, entry in state.items():  # feedback for submissions that are gone
        if file not in new_state:
            stale = out / "feedback" / file.split("/", 1)[0] / f"{entry.get('notebook', '')}.txt"
            if stale.is_file() and not any(
                e["notebook"] == entry.get("notebook") and k.split("/")[0] == file.split("/")[0]
                for k, e in new_state.items()
            ):
                stale.unlink()
    _write(out / STATE, json.dumps(new_state, indent=1, sort_keys=True))
    where = where or f"{g.workers} worker(s)"
    return _summary(rows, the_plan, len(g.todo), time.time() - g.started, out, where, g.timeout, g.memory, size_words)


def _summary(rows, the_plan, graded, seconds, out, where, timeout, memory, size_words) -> str:
    reused = len(the_plan.jobs) - graded
    per = {}
    ungraded = set()
    for r in rows:
        if r["student"] and r["cell"]:
            if r["points"] == "":  # the grading machinery failed: no score, graded again next run
                ungraded.add((r["student"], r["notebook"]))
                continue
            got, total = per.get((r["student"], r["notebook"]), (0.0, 0.0))
            per[(r["student"], r["notebook"])] = (got + float(r["points"]), total + float(r["max_points"]))
    full = sum(1 for key, (got, total) in per.items() if total and got >= total and key not in ungraded)
    problems = sum(1 for r in rows if r["status"] not in ("passed", "failed", "partial", "warning"))
    failed = (
        f"; {len(ungraded)} notebook(s) NOT GRADED because the grading machinery failed (see their rows): "
        f"run course grade again"
        if ungraded
        else ""
    )
    return (
        f"graded {graded} submission(s) in {seconds:.0f} s on {where}"
        f"{f', reused {reused} unchanged' if reused else ''}; {len(the_plan.students)} student(s), "
        f"{full} of {len(per | dict.fromkeys(ungraded))} notebook(s) with full marks, {problems} row(s) with problems "
        f"(limits: {timeout:g} s per cell, {size_words(memory)} per kernel); "
        f"wrote {out / 'grades.csv'} and {out / 'feedback'}/{failed}"
    )
