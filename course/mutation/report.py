"""`python -m course mutation-report [NOTEBOOK ...]`: how many mutants of each answer the checks catch.

For each exercise (answer cell) of a solution notebook, mutants of its solution code (course.mutation.operators)
are tried in place in one run of the notebook (course.mutation.trials): the notebook runs once up to the exercise;
there the solution, with a probe before each statement, runs first (which statements the solution's run reaches,
and how long each cell takes), then each mutant runs with the exercise's check cells, then the solution's cells
again (so the next mutant starts from the state a right answer leaves); the files the solution's cells of the
exercise made are removed before each mutant, as a fresh run has none. A check cell runs as the learner has it
(hidden tests stripped, as nbgrader's release does), then its hidden tests: "visible" counts the mutants the
learner's check fails, "hidden" those the full check cell fails. A mutant that hangs is stopped after a time
well above the solution's own, counted as caught (grading's timeout fails it), and the kernel and its cluster
start again from the top of the notebook (as they do when the solution fails right after a mutant).

Beside the operators' single edits, each exercise's semantic mutants (course.mutation.semantic: the plausible wrong
answers listed for the notebook, what a learner might write instead) are tried the same way, all of them, and
counted in columns of their own; `semantic_only` runs only those (no probe, no operator mutants). `json_to` also
writes the table as data (rows(), in a course.records record) for the course's website.
"""

from __future__ import annotations

import copy
import re
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course import UserError, profile, records
from course.mutation import operators, semantic, trials

LIMIT = 12  # mutants per exercise, by default: spread over the operators
HIDDEN = "### BEGIN HIDDEN TESTS"


@dataclass
class Exercise:
    """One answer cell's mutants and what became of them."""

    notebook: str
    exercise: str
    run: list[operators.Mutant] = field(default_factory=list)
    equivalent: list[operators.Mutant] = field(default_factory=list)
    semantic: list[semantic.SemanticMutant] = field(default_factory=list)
    mutated: bool = True  # whether operator mutants were made (not with semantic_only)
    skipped: list[str] = field(default_factory=list)  # regions not mutated (not Python)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, what: str, kind: str = "run") -> int:
        """How many mutants of KIND ('run': the operators', or 'semantic') have WHAT in their outcome."""
        return sum(1 for m in getattr(self, kind) if m.outcome.get(what))


def find(names: list[str], solutions: Path) -> list[Path]:
    """Solution notebooks by name, stem or number ('07', '07_horovod'), or .ipynb paths; all when NAMES is empty."""
    from course.grading.release import course_notebooks
    from course.run import find as find_notebooks

    return find_notebooks(names, course_notebooks(solutions))


def _answers(nb) -> dict[str, int]:
    """answer grade_id -> its cell index (nbgrader solution cells that are not graded)."""
    return {
        trials.grade_id(c): i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution") and not trials.graded(c)
    }


def check_segments(source: Path, nb) -> dict[str, tuple[str, str]]:
    """check grade_id -> (the cell as the learner has it, what its hidden tests add when run right after it)."""
    from course.grading.release import student_version

    released = {trials.grade_id(c): c.source for c in student_version(nb, source.stem).cells if trials.graded(c)}
    segments = {}
    for cell in nb.cells:
        if not trials.graded(cell) or cell.cell_type != "code":
            continue
        visible, full = released[trials.grade_id(cell)], cell.source
        start = full.find(HIDDEN)
        tail = full[full.rfind("### END HIDDEN TESTS") :].partition("\n")[2] if start >= 0 else ""
        if start < 0:
            hidden = ""
        elif tail.strip() or full.count(HIDDEN) > 1:
            hidden = full  # hidden tests with code after them: the whole cell, run after the learner's
        else:
            magic = full.lstrip().split("\n")[0] if full.lstrip().startswith("%%") else ""
            hidden = (magic + "\n" if magic else "") + full[start:]
        segments[trials.grade_id(cell)] = (visible, hidden)
    return segments


_MPI_SESSION = re.compile(r"ompi\.|pmix|prte|openmpi|^reached-")  # MPI's session folders; the probe's own file


class _Hung(Exception):
    """A cell did not finish in time, or the kernel died: the run starts again."""


class NotebookRun:
    """One notebook's kernel, its solution cells run top to bottom, with detours for the mutants."""

    def __init__(self, source: Path, workdir: Path) -> None:
        self.source, self.workdir = source, workdir
        self.nb = nbformat.read(str(source), as_version=4)
        self.cells = copy.deepcopy(self.nb.cells)
        self.stack: ExitStack | None = None
        self.client = None
        self.done = 0  # the solution's cells run so far, in order

    def start(self) -> None:
        self.stack = ExitStack()
        nb = copy.deepcopy(self.nb)
        temporary = self.workdir / "t"  # the notebook's temporary folders (tempfile.mkdtemp) too: see `files`
        temporary.mkdir(exist_ok=True)
        kernel = trials.notebook_kernel(self.source, nb, self.workdir, TMPDIR=str(temporary))
        self.client = self.stack.enter_context(kernel)
        self.done = 0

    def files(self) -> set[Path]:
        """The files under the run's folder (its temporary folders included), but MPI's own session files."""
        return {
            p
            for p in self.workdir.rglob("*")
            if p.is_file() and not _MPI_SESSION.search(str(p.relative_to(self.workdir)))
        }

    def clear(self, before: set[Path]) -> None:
        """Remove the files made since BEFORE: a mutant must leave its own (a fresh run has none of the solution's)."""
        for path in self.files() - before:
            path.unlink(missing_ok=True)

    def close(self) -> None:
        if self.stack is not None:
            self.stack.close()
            self.stack = None

    def advance(self, upto: int) -> None:
        """Run the solution's own cells up to (not including) UPTO."""
        self.client.timeout, self.client.interrupt_on_timeout = trials.CELL_TIMEOUT, True
        while self.done < upto:
            trials.execute(self.client, copy.deepcopy(self.cells[self.done]), self.done)
            self.done += 1

    def restart(self, upto: int) -> None:
        """A new kernel and cluster, in an emptied folder (a fresh run's), the solution run again up to UPTO."""
        self.close()
        for path in self.workdir.iterdir():
            if not path.name.startswith("reached-"):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        self.start()
        self.advance(upto)

    def run_cell(self, cell, index: int, limit: float | None) -> float:
        """Execute CELL at INDEX; with LIMIT (seconds), a cell still running then raises _Hung."""
        from nbclient.exceptions import CellTimeoutError, DeadKernelError

        self.client.timeout = int(limit) if limit else trials.CELL_TIMEOUT
        self.client.interrupt_on_timeout = limit is None
        started = time.perf_counter()
        try:
            trials.execute(self.client, cell, index)
        except (CellTimeoutError, DeadKernelError) as exc:
            raise _Hung(f"{type(exc).__name__} in cell {index}") from None
        return time.perf_counter() - started

    def solution_detour(self, first: int, last: int) -> dict[str, str]:
        """The solution's cells FIRST..LAST again: the graded cells that failed (a right answer must not)."""
        self.client.timeout, self.client.interrupt_on_timeout = trials.CELL_TIMEOUT, True
        failures, _ = trials.detour(self.client, self.cells, {}, first, last)
        return failures

    def probe(self, trial: dict[str, str], first: int, last: int) -> dict[int, float]:
        """The solution's cells FIRST..LAST, with TRIAL's in place (the answer with probes, or none): how long each
        took."""
        trials.forget(self.client, self.cells, trial, first)
        took = {}
        for index in range(first, last + 1):
            cell = copy.deepcopy(self.cells[index])
            cell.source = trial.get(trials.grade_id(cell), cell.source)
            took[index] = self.run_cell(cell, index, None)
        return took

    def mutant(self, mutant: operators.Mutant, first: int, last: int, segments: dict, limits: dict) -> dict:
        """Run MUTANT's cell and the cells after it through LAST: which checks failed, visible and with hidden tests.
        A cell that hangs ends the detour: `hung` says where (the kernel must then start again)."""
        trial = mutant.trial
        outcome: dict = {"visible_cells": {}, "hidden_cells": {}, "answer": "", "hung": ""}
        trials.forget(self.client, self.cells, trial, first)
        try:
            for index in range(first, last + 1):
                self._mutant_cell(index, trial, segments, limits[index], outcome)
        except _Hung as exc:
            outcome["hung"] = str(exc)
            where = "hidden_cells" if outcome.get("in_hidden") else "visible_cells"
            outcome[where][outcome["at"]] = f"did not finish ({exc}): grading's time limit fails it"
        outcome["visible"] = bool(outcome["visible_cells"])
        outcome["hidden"] = outcome["visible"] or bool(outcome["hidden_cells"])
        return outcome

    def _mutant_cell(self, index: int, trial: dict, segments: dict, limit: float, outcome: dict) -> None:
        """One cell of a mutant's detour: a check cell as the learner has it, then (if that passed) its hidden tests."""
        cell = copy.deepcopy(self.cells[index])
        gid = trials.grade_id(cell)
        outcome["at"], outcome["in_hidden"] = gid or f"cell {index}", False
        if gid not in segments:
            cell.source = trial.get(gid, cell.source)
            self.run_cell(cell, index, limit)
            if gid in trial and trials.failed(cell):
                outcome["answer"] = trials.error(cell)
            return
        visible, hidden = segments[gid]
        cell.source = visible
        self.run_cell(cell, index, limit)
        if trials.failed(cell):
            outcome["visible_cells"][gid] = trials.error(cell)
        elif hidden:
            outcome["in_hidden"] = True
            rest = nbformat.v4.new_code_cell(hidden, metadata=cell.metadata)
            self.run_cell(rest, index, limit)
            if trials.failed(rest):
                outcome["hidden_cells"][gid] = trials.error(rest)


def _limits(took: dict[int, float]) -> dict[int, float]:
    """Seconds a mutant's cell may take: well above the solution's own time (a hang is a deadlock, not slowness)."""
    return {index: max(30.0, 3 * seconds + 30) for index, seconds in took.items()}


def measure(
    source: Path,
    exercises: list[str] | None = None,
    limit: int = LIMIT,
    say=print,
    semantic_only: bool = False,
    wrong_answers: Path = semantic.FOLDER,
) -> list[Exercise]:
    """Mutate and try every chosen exercise of SOURCE in one run of it, with its semantic mutants (the list for
    SOURCE in WRONG_ANSWERS); SEMANTIC_ONLY: those alone. SAY reports progress as it goes."""
    nb = nbformat.read(str(source), as_version=4)
    answers = _answers(nb)
    chosen = exercises or list(answers)
    unknown = [e for e in chosen if e not in answers]
    if unknown:
        raise UserError(f"{source.name} has no answer cell {unknown[0]!r}; its exercises: {', '.join(answers)}")
    checks = trials.exercise_checks(source)
    index = {trials.grade_id(c): i for i, c in enumerate(nb.cells) if trials.grade_id(c)}
    last_check = {a: max([answers[a]] + [index[g] for g in checks[a]]) for a in answers}
    solution = {a: nb.cells[i].source for a, i in sorted(answers.items(), key=lambda item: item[1])}
    written = semantic.mutants(source.stem, solution, wrong_answers)
    segments = check_segments(source, nb)
    results = []
    with tempfile.TemporaryDirectory(prefix="mut-") as work:  # short: MPI's socket paths are under it
        run = NotebookRun(source, Path(work))
        try:
            run.start()
            for answer in sorted(chosen, key=lambda a: answers[a]):
                result = Exercise(source.stem, answer, semantic=written.get(answer, []), mutated=not semantic_only)
                spans = {m.key: (answers[answer], max(last_check[g] for g in m.trial)) for m in result.semantic}
                spans[""] = (answers[answer], last_check[answer])  # the exercise's own, the operator mutants'
                results.append(_exercise(run, result, spans, segments, limit, say))
        finally:
            run.close()
    return results


def _exercise(run: NotebookRun, result: Exercise, spans: dict, segments, limit: int, say) -> Exercise:
    """One exercise's probe, operator mutants and semantic mutants, with the solution run again after each. SPANS:
    the cells each mutant runs (by key; '' for the operator mutants: the exercise's answer through its checks)."""
    notebook, answer = result.notebook, result.exercise
    first, last = spans[""]
    reach = max(end for _, end in spans.values())  # a semantic mutant may write later exercises' cells too
    started = time.perf_counter()
    source = run.cells[first].source
    mutants: list[operators.Mutant] = []
    if result.mutated:
        mutants, result.skipped = operators.cell_mutants(answer, source)
        result.equivalent = [m for m in mutants if m.equivalent]
    run.advance(first)
    before = run.files()
    hits = Path(run.workdir) / f"reached-{answer}.txt"
    probe = {answer: operators.probed(source, answer, str(hits))} if result.mutated else {}
    try:
        took = run.probe(probe, first, reach)
    except _Hung as exc:
        raise UserError(f"{notebook}: the solution of {answer} did not finish ({exc})") from None
    reached = set(hits.read_text().split()) if hits.exists() else set()
    reached |= operators.unprobed_sites(source, answer)
    for mutant in mutants:
        if not mutant.equivalent and f"{answer}:{mutant.region}:{mutant.site}" not in reached:
            mutant.equivalent = "the solution's run never reaches this statement"
            result.equivalent.append(mutant)
    result.run = operators.select([m for m in mutants if not m.equivalent], limit)
    limits = _limits(took)
    tried = [(m, "", f"{k}/{len(result.run)}") for k, m in enumerate(result.run, 1)]
    tried += [(m, m.key, f"semantic {k}/{len(result.semantic)}") for k, m in enumerate(result.semantic, 1)]
    for mutant, span, place in tried:
        began = time.perf_counter()
        run.clear(before)  # the files the solution's cells of this exercise made
        restarted = _try(run, mutant, spans[span], segments, limits, result)
        if restarted:  # the notebook ran again from the top, in an emptied folder
            before = run.files()
        spent = f"{time.perf_counter() - began:.0f} s"
        say(f"  {notebook} {answer} [{place}] {_verdict(mutant.outcome)} ({spent}): {mutant.what}")
    failures = run.solution_detour(first, reach)  # also replaces the probed definitions
    if failures:
        result.notes.append(f"the solution, run again after the mutants, failed {sorted(failures)}")
    run.done = reach + 1  # the solution's own cells through the exercise (and those its semantic mutants wrote)
    result.seconds = time.perf_counter() - started
    counts = []
    if result.mutated:
        counts.append(
            f"{len(result.run)} mutants, the visible check caught {result.count('visible')}, "
            f"with hidden tests {result.count('hidden')} ({len(result.equivalent)} set aside)"
        )
    counts.append(
        f"{len(result.semantic)} semantic, the visible check caught {result.count('visible', 'semantic')}, "
        f"with hidden tests {result.count('hidden', 'semantic')}"
    )
    say(f"{notebook} {answer}: {'; '.join(counts)} ({result.seconds:.0f} s)")
    return result


def _try(run: NotebookRun, mutant, span, segments, limits, result: Exercise) -> bool:
    """Run MUTANT, then the solution's cells again; whether the notebook had to start again from the top (a hang,
    a mutant that left a state the solution fails in: messages left in flight, engines in error; or a mutant the
    visible check let through, tried again in a fresh run: one run's state must not answer for it)."""
    first, last = span
    mutant.outcome = run.mutant(mutant, first, last, segments, limits)
    fresh = not (mutant.outcome["visible"] or mutant.outcome["hung"])
    if fresh:  # it may pass only on what the solution's run left (a cluster it stopped): again, from a fresh start
        run.restart(first)
        mutant.outcome = run.mutant(mutant, first, last, segments, limits)
    if mutant.outcome["hung"]:
        run.restart(first)  # engines stuck in a deadlock: the notebook again, from the top
        return True
    failures = run.solution_detour(first, last)
    if failures:
        result.notes.append(
            f"the solution failed {sorted(failures)} right after the mutant `{mutant.what}`: started again from the top"
        )
        run.restart(first)
        return True
    return fresh


def _verdict(outcome: dict) -> str:
    if outcome.get("hung"):
        return f"hung, stopped (caught by {'the visible check' if outcome['visible'] else 'the hidden tests'})"
    if outcome.get("visible"):
        return "caught by the visible check"
    return "caught by the hidden tests" if outcome.get("hidden") else "SURVIVED"


def table(results: list[Exercise]) -> str:
    """One row per exercise: operator mutants run, set aside as equivalent, caught by the visible check, with hidden
    tests; those that hung (of both kinds); semantic mutants tried, caught by the visible check, with hidden tests."""
    rows = [
        ("notebook", "exercise", "mutants", "equivalent", "visible", "hidden", "hung")
        + ("semantic", "s-visible", "s-hidden", "time")
    ]
    for r in results:
        n, k = len(r.run), len(r.semantic)
        rows.append(
            (
                r.notebook.split("_")[0],
                r.exercise,
                str(n) if r.mutated else "-",
                str(len(r.equivalent)) if r.mutated else "-",
                _share(r.count("visible"), n),
                _share(r.count("hidden"), n),
                str(r.count("hung") + r.count("hung", "semantic")),
                str(k),
                _share(r.count("visible", "semantic"), k),
                _share(r.count("hidden", "semantic"), k),
                f"{r.seconds / 60:.1f} min",
            )
        )
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def rows(results: list[Exercise]) -> list[dict]:
    """The table's rows as data: per exercise the counts of table() (None where no operator mutants were made),
    the minutes it took, and the mutants no check caught (their kind and what they change)."""
    return [
        {
            "notebook": r.notebook,
            "exercise": r.exercise,
            "mutants": len(r.run) if r.mutated else None,
            "equivalent": len(r.equivalent) if r.mutated else None,
            "visible": r.count("visible") if r.mutated else None,
            "hidden": r.count("hidden") if r.mutated else None,
            "hung": r.count("hung") + r.count("hung", "semantic"),
            "semantic": len(r.semantic),
            "semantic_visible": r.count("visible", "semantic"),
            "semantic_hidden": r.count("hidden", "semantic"),
            "minutes": round(r.seconds / 60, 1),
            "survivors": [
                {"kind": _kind(m), "what": m.what} for m in r.run + r.semantic if not m.outcome.get("hidden")
            ],
        }
        for r in results
    ]


def _share(caught: int, total: int) -> str:
    return f"{caught}/{total} ({100 * caught // total}%)" if total else "-"


def details(results: list[Exercise]) -> str:
    """What an instructor should look at: the survivors (diffs; a semantic one with its `why`), those only hidden
    tests catch, the equivalents, and where the list's `hidden_only` disagrees with what the run found."""
    out = []
    for r in results:
        survivors = [m for m in r.run + r.semantic if not m.outcome.get("hidden")]
        hidden_only = [m for m in r.run + r.semantic if m.outcome.get("hidden") and not m.outcome.get("visible")]
        if not (survivors or hidden_only or r.equivalent or r.skipped or r.notes):
            continue
        out.append(f"\n{r.notebook} {r.exercise}")
        for m in survivors:
            out.append(f"  survived ({_kind(m)}): {m.what}")
            out.append("\n".join("      " + line for line in _clip(m.diff)))
        for m in hidden_only:
            out.append(f"  caught only by the hidden tests ({_kind(m)}): {m.what}")
        for m in r.equivalent:
            out.append(f"  set aside ({m.operator}: {m.what}): {m.equivalent}")
        out += [f"  {note}" for note in r.skipped + r.notes + _disagreements(r)]
    return "\n".join(out)


def _kind(mutant: operators.Mutant) -> str:
    """The operator, or which entry of the notebook's list of wrong answers a semantic mutant is."""
    return f"semantic, entry {mutant.number}" if isinstance(mutant, semantic.SemanticMutant) else mutant.operator


def _disagreements(result: Exercise) -> list[str]:
    """The semantic mutants whose list entry says otherwise than the run about which check catches them."""
    notes = []
    for m in result.semantic:
        if m.hidden_only and m.outcome.get("visible"):
            notes.append(f"entry {m.number}: the list says only the hidden tests catch it, but the visible check did")
        elif not m.hidden_only and m.outcome.get("hidden") and not m.outcome.get("visible"):
            notes.append(f"entry {m.number}: only the hidden tests caught it, and the list does not say `hidden_only`")
    return notes


def _clip(diff: str, lines: int = 6) -> list[str]:
    text = diff.splitlines()
    return text[:lines] + ([f"... ({len(text) - lines} more lines)"] if len(text) > lines else [])


def main(
    names: list[str],
    exercise: str | None = None,
    limit: int = LIMIT,
    solutions: str | None = None,
    semantic_only: bool = False,
    wrong_answers: str | None = None,
    json_to: str | None = None,
) -> int:
    """The command: progress on stderr, then the table and the details on stdout; with JSON_TO, the table as data
    there too (course.records)."""
    from course.grading import solutions_dir

    if limit < 1:
        raise UserError(f"--limit takes a number of mutants per exercise (1 or more), not {limit}")
    listed = Path(wrong_answers) if wrong_answers else semantic.FOLDER
    if wrong_answers and not listed.is_dir():
        raise UserError(f"--wrong-answers takes a folder of <notebook>.json lists; {listed} is not one")
    sources = find(names, solutions_dir(solutions))
    if exercise and len(sources) != 1:
        raise UserError("--exercise names one answer cell: give the one notebook it is in")
    if exercise and exercise not in _answers(nbformat.read(str(sources[0]), as_version=4)):
        raise UserError(f"{sources[0].name} has no answer cell {exercise!r}")
    if json_to and Path(json_to).expanduser().is_dir():
        raise UserError(f"--json takes a file name, and {json_to} is a folder: e.g. {json_to}/mutation-report.json")
    header = records.header(records.MUTATION, profile.name())
    header["options"] = {"limit": limit, "exercise": exercise, "semantic_only": semantic_only}
    results: list[Exercise] = []
    for source in sources:
        started = time.perf_counter()
        which = "its semantic mutants" if semantic_only else "the mutants"
        print(f"{source.stem}: running the notebook once, with {which} of each exercise", file=sys.stderr)
        if not (listed / f"{source.stem}.json").is_file():
            print(f"{source.stem}: no semantic mutants (no {listed / source.stem}.json)", file=sys.stderr)
        say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
        found = measure(source, [exercise] if exercise else None, limit, say, semantic_only, listed)
        results += found
        print(f"{source.stem}: done in {(time.perf_counter() - started) / 60:.1f} min", file=sys.stderr)
    print(table(results))
    print(details(results))
    if json_to:
        written = records.write(json_to, {**header, "exercises": rows(results)})
        print(f"the table as data: {written}", file=sys.stderr)
    return 0
