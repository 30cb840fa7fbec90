"""The class results table (the DeepHealth HPC lab's shared spreadsheet, done properly): one CSV schema, safe appends, merging.

Every training run a learner does (`python -m course train`, Horovod, MirroredStrategy) appends one row with
`append_row`; many learners may append to one shared file at once (an exclusive `fcntl` lock around each
append, or a lock file where the filesystem has no flock; a file is only ever appended to, never rewritten). `collect` merges a folder of such files into one
table, reporting every bad row (file, line, why) and skipping it. Runs are compared only within one
workload (dataset, network, hardware and strategy): `summary` gives each workload's speed-up and efficiency
against its own smallest worker count, and `plot` draws speed-up, efficiency, accuracy and elapsed time
against workers, one line per workload, captioned with the datasets (and whether the offline fallback
stood in) and the hardware.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import errno
import fcntl
import getpass
import io
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from course import UserError
from course.sync_types import LAB_NUMBERS

# The schema, in column order. Required columns must be present and valid in every row.
FIELDS = (
    "date",
    "learner",
    "strategy",
    "dataset",
    "network",
    "workers",
    "epochs",
    "batch_size",
    "elapsed_s",
    "accuracy",
    "epoch_time_s",
    "images_per_s",
    "engines",
    "hardware",
    "run",
)
REQUIRED = ("date", "strategy", "workers", "elapsed_s")
DESCRIPTIONS = {
    "date": "when the run ended, ISO 8601 (filled in by append_row)",
    "learner": "who ran it (default: the login name)",
    "strategy": "sync, async, full-async (parameter averaging), horovod, mirrored, ... (lower case)",
    "dataset": "mnist, fashion_mnist, cifar10, digits (the offline fallback)",
    "network": "simple-mnist, lenet, vgg16, resnet50v2, ...",
    "workers": "parallel workers: engines, Horovod ranks or MirroredStrategy replicas (integer >= 1)",
    "epochs": "epochs trained (integer >= 1)",
    "batch_size": (
        "batch size (integer >= 1): global for gradient averaging (horovod, mirrored: per worker x "
        "workers), per worker for parameter averaging, where each worker takes its own steps"
    ),
    "elapsed_s": "total elapsed training time in seconds (> 0)",
    "accuracy": "test accuracy in [0, 1] (empty when the run did not evaluate)",
    "epoch_time_s": "median epoch time without the first epoch, seconds (> 0)",
    "images_per_s": "training throughput, images per second (> 0)",
    "engines": "engines or processes the run had (integer >= 1)",
    "hardware": "free text, e.g. '2 CPU cores' or '4 x V100'",
    "run": "repetition number of the same configuration (integer >= 1)",
}
_INTS = ("workers", "epochs", "batch_size", "engines", "run")
_POSITIVE = ("elapsed_s", "epoch_time_s", "images_per_s")
_STRATEGY = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def _whole(name: str, text: str) -> str:
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{name} is {text!r}, not a whole number") from None
    if not number.is_integer() or number < 1:
        raise ValueError(f"{name} is {text!r}: it must be a whole number >= 1")
    return str(int(number))


def _finite(name: str, text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{name} is {text!r}, not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} is {text!r}, not a finite number")
    return number


def _positive(name: str, text: str) -> str:
    number = _finite(name, text)
    if number <= 0:
        raise ValueError(f"{name} is {text}: it must be positive")
    return repr(number)


def _accuracy(name: str, text: str) -> str:
    number = _finite(name, text)
    if not 0.0 <= number <= 1.0:
        hint = " (a percentage? write it as a fraction)" if 1.0 < number <= 100.0 else ""
        raise ValueError(f"accuracy is {text}, outside [0, 1]{hint}")
    return f"{number:.6g}"


def _strategy(name: str, text: str) -> str:
    text = LAB_NUMBERS.get(text, text.lower())  # the DeepHealth lab's run script numbers them 0, 1, 2
    if not _STRATEGY.match(text):
        raise ValueError(f"strategy {text!r} is not a simple name such as sync, horovod or mirrored")
    return text


def _date(name: str, text: str) -> str:
    try:
        _dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"date {text!r} is not an ISO 8601 date/time") from None
    return text


# How each checked column's text is read and written back; the other columns are kept as written.
_NORMALISE: dict[str, Callable[[str, str], str]] = {
    **{name: _whole for name in _INTS},
    **{name: _positive for name in _POSITIVE},
    "accuracy": _accuracy,
    "strategy": _strategy,
    "date": _date,
}


def _check(row: dict[str, Any]) -> dict[str, str]:
    """The row with every value as its CSV text, or ValueError saying what is wrong (first problem only)."""
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown column(s) {', '.join(unknown)} (the schema: {', '.join(FIELDS)})")
    out: dict[str, str] = {}
    for name in FIELDS:
        value = row.get(name)
        text = "" if value is None else str(value).strip()
        if not text and name in REQUIRED:
            raise ValueError(f"{name} is missing")
        normalise = _NORMALISE.get(name)
        out[name] = normalise(name, text) if text and normalise else text
    return out


def validate(row: dict[str, Any]) -> dict[str, str]:
    """Check one row against the schema; returns it as CSV text values, or raises UserError saying what is wrong."""
    try:
        return _check(row)
    except ValueError as exc:
        raise UserError(f"bad results row: {exc}") from None


def _writable_place(path: str | os.PathLike) -> Path:
    """`path` as a Path, if a results file could be there (not a folder, in a folder that exists)."""
    file = Path(path)
    if file.is_dir():
        raise UserError(f"the results file {file} is a directory: give a file name such as {file / 'results.csv'}")
    if not file.parent.is_dir():
        raise UserError(f"cannot write results to {file}: the folder {file.parent} does not exist")
    return file


def check_file(path: str | os.PathLike) -> None:
    """Fail now, before any training, when runs could not be appended to `path` (a results CSV)."""
    file = _writable_place(path)
    existed = file.exists()
    try:
        with open(file, "a+", newline="") as handle:
            handle.seek(0)
            header = next(csv.reader([handle.readline()]), []) if existed else []
    except OSError as exc:
        raise UserError(f"cannot write results to {file}: {exc.strerror}") from None
    if header and tuple(h.strip() for h in header) != FIELDS:
        raise UserError(
            f"{file} is not a course results file (its header is {','.join(header)[:80]!r}); give a new file name"
        )


def hardware() -> str:
    """What the workers ran on, for the results table: GPUs if any, else CPU cores."""
    from course.devices import visible_gpus

    gpus = visible_gpus()
    return f"{len(gpus)} GPU(s)" if gpus else f"{os.cpu_count()} CPU cores"


def append_row(path: str | os.PathLike, row: dict[str, Any]) -> dict[str, str]:
    """Append one run to the results CSV at `path` (created with a header if new); returns the row written.

    Safe when many processes append to the same file at once: each append holds an exclusive lock and writes
    the whole line in one call. The file is never truncated or rewritten. `date` and `learner` are filled in.
    """
    filled = dict(row)
    filled.setdefault("date", _dt.datetime.now().isoformat(timespec="seconds"))
    if not filled.get("learner"):
        try:
            filled["learner"] = getpass.getuser()
        except Exception:  # no login name (some containers)
            filled["learner"] = ""
    checked = validate(filled)
    file = _writable_place(path)
    line = io.StringIO()
    csv.writer(line, lineterminator="\n").writerow([checked[name] for name in FIELDS])
    try:
        handle = open(file, "a+", newline="")
    except OSError as exc:
        raise UserError(f"cannot write results to {file}: {exc.strerror}") from None
    with handle, _exclusive(handle, file):
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            text = ",".join(FIELDS) + "\n" + line.getvalue()
        else:
            handle.seek(0)
            header = next(csv.reader([handle.readline()]), [])
            if tuple(header) != FIELDS:
                raise UserError(
                    f"{file} is not a course results file (its header is {','.join(header)[:80]!r}); "
                    f"append to a new file instead"
                )
            handle.seek(size - 1)
            text = ("" if handle.read(1) == "\n" else "\n") + line.getvalue()
        handle.seek(0, os.SEEK_END)
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return checked


NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)  # e.g. Lustre mounted without flock
STALE_LOCK_SECONDS = 60


@contextlib.contextmanager
def _exclusive(handle, file: Path):
    """Hold an exclusive lock on the open results file: flock, or where the filesystem has none (Lustre mounted
    without it, some NFS), a lock file created atomically beside it (removed after, or taken over when stale)."""
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    except OSError as exc:
        if exc.errno not in NO_FLOCK:
            raise
    else:
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return
    lock = file.with_name(file.name + ".lock")
    while True:
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            break
        except FileExistsError:
            try:
                if time.time() - lock.stat().st_mtime > STALE_LOCK_SECONDS:  # its writer died holding it
                    lock.unlink(missing_ok=True)
            except FileNotFoundError:
                pass
            time.sleep(0.01)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------ collecting


@dataclass
class Problem:
    """A row (or file) that was skipped, and why."""

    file: str
    line: int  # 1-based line in the file (the header is line 1); 0 for the whole file
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.why}" if self.line else f"{self.file}: {self.why}"


@dataclass
class Table:
    """The merged class results: good rows (each with its `source` file) and the problems skipped."""

    rows: list[dict[str, str]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def write(self, path: str | os.PathLike) -> Path:
        """Write the merged table as CSV (the schema's columns plus `source`)."""
        file = Path(path)
        with open(file, "w", newline="") as handle:
            self._write(handle)
        return file

    def to_csv(self) -> str:
        handle = io.StringIO()
        self._write(handle)
        return handle.getvalue()

    def _write(self, handle) -> None:
        writer = csv.DictWriter(handle, fieldnames=[*FIELDS, "source"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)

    @property
    def learners(self) -> list[str]:
        """The learners who contributed runs (a learner may hand in several files)."""
        return sorted({r["learner"] or Path(r["source"]).stem for r in self.rows})

    def summary(self) -> list[dict[str, Any]]:
        """Per workload (dataset, network, hardware, strategy) and workers: runs, learners, mean accuracy, mean
        elapsed time, and the speed-up and efficiency over the same workload's smallest worker count."""
        groups: dict[tuple, list[dict[str, str]]] = {}
        for row in self.rows:
            groups.setdefault((*workload(row), int(row["workers"])), []).append(row)
        result = []
        for key, rows in sorted(groups.items()):
            *load, workers = key
            base_workers = min(k[-1] for k in groups if list(k[:-1]) == load)
            speed = _speedup(groups[(*load, base_workers)], rows)
            scale = workers / base_workers
            result.append(
                {
                    "dataset": load[0],
                    "network": load[1],
                    "hardware": load[2],
                    "strategy": load[3],
                    "workers": workers,
                    "runs": len(rows),
                    "learners": len({r["learner"] or r["source"] for r in rows}),
                    "accuracy": _mean([float(r["accuracy"]) for r in rows if r["accuracy"]]),
                    "elapsed_s": _mean([float(r["elapsed_s"]) for r in rows]),
                    "baseline_workers": base_workers,
                    "speedup": speed,
                    "efficiency": speed / scale if speed is not None else None,
                }
            )
        return result

    def show(self) -> str:
        """The summary as aligned text, one block per workload."""

        def num(value, spec):
            return format(value, spec) if value is not None else "-".rjust(int(spec.split(".")[0].lstrip(">")))

        lines = [
            f"{'dataset':<14} {'network':<13} {'hardware':<14} {'strategy':<10} {'workers':>7} {'runs':>4} "
            f"{'accuracy':>8} {'elapsed s':>9} {'speed-up':>8} {'efficiency':>10}"
        ]
        for g in self.summary():
            lines.append(
                f"{g['dataset']:<14} {g['network']:<13} {g['hardware']:<14} {g['strategy']:<10} "
                f"{g['workers']:>7} {g['runs']:>4} {num(g['accuracy'], '>8.3f')} {g['elapsed_s']:>9.2f} "
                f"{num(g['speedup'], '>8.2f')} {num(g['efficiency'], '>10.2f')}"
            )
        return "\n".join(lines)

    def caption(self) -> str:
        """What the runs trained on and where: datasets (saying when the offline fallback stood in), hardware."""
        datasets = sorted({r["dataset"] or "?" for r in self.rows})
        words = [FALLBACK_WORDS if d == FALLBACK else d for d in datasets]
        hardware = sorted({r["hardware"] or "?" for r in self.rows})
        return f"dataset: {', '.join(words)}; hardware: {', '.join(hardware)}"


FALLBACK = "digits"  # what course.data loads when the real dataset cannot be (no internet, no site data)
FALLBACK_WORDS = "digits (the offline fallback: scikit-learn's 8x8 digits stood in for the real dataset)"


def workload(row: dict[str, str]) -> tuple[str, str, str, str]:
    """What makes runs comparable: the same dataset, network, hardware and strategy."""
    return (row["dataset"] or "?", row["network"] or "?", row["hardware"] or "?", row["strategy"])


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _speedup(baseline: list[dict[str, str]], rows: list[dict[str, str]]) -> float | None:
    """Throughput over the baseline's where both recorded it (fair for strong and weak scaling alike), else
    the baseline's elapsed time over these runs' (strong scaling: the same work)."""
    ips = _mean([float(r["images_per_s"]) for r in rows if r["images_per_s"]])
    base_ips = _mean([float(r["images_per_s"]) for r in baseline if r["images_per_s"]])
    if ips is not None and base_ips is not None:
        return ips / base_ips
    return _mean([float(r["elapsed_s"]) for r in baseline]) / _mean([float(r["elapsed_s"]) for r in rows])


def _inputs(source: str | os.PathLike | Iterable[str | os.PathLike], exclude: Path | None) -> list[Path]:
    if isinstance(source, (str, os.PathLike)):
        root = Path(source)
        if root.is_dir():
            files = sorted(p for p in root.rglob("*.csv") if p.is_file())
        elif root.is_file():
            files = [root]
        else:
            raise UserError(f"no results folder or file at {root}")
    else:
        files = [Path(p) for p in source]
    if exclude is not None:
        files = [p for p in files if p.resolve() != exclude.resolve()]
    return files


def collect(source: str | os.PathLike | Iterable[str | os.PathLike], exclude: str | os.PathLike | None = None) -> Table:
    """Merge the results CSVs in a folder (recursively) or a list of files; bad rows are recorded, not kept."""
    files = _inputs(source, Path(exclude) if exclude else None)
    if not files:
        raise UserError(f"no .csv files in {source}: learners' runs write them (e.g. --results results.csv)")
    table = Table()
    for file in files:
        name = str(file)
        table.files.append(name)
        try:
            with open(file, newline="") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            table.problems.append(Problem(name, 0, f"cannot read it ({exc.__class__.__name__}: {exc})"))
            continue
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        if not header:
            table.problems.append(Problem(name, 0, "empty file (no header)"))
            continue
        header = [h.strip() for h in header]
        missing = [f for f in REQUIRED if f not in header]
        if missing:
            table.problems.append(Problem(name, 1, f"not a results file: the header lacks {', '.join(missing)}"))
            continue
        extra = [k for k in header if k not in FIELDS and k != "source"]
        if extra:
            table.problems.append(Problem(name, 1, f"ignored unknown column(s) {', '.join(extra)} (its rows are kept)"))
        for values in reader:
            line = reader.line_num
            if not any(v.strip() for v in values):
                continue  # a blank line
            if len(values) != len(header):
                table.problems.append(Problem(name, line, f"{len(values)} values for {len(header)} columns"))
                continue
            row = {k: v for k, v in zip(header, values) if k in FIELDS}
            try:
                checked = _check(row)
            except ValueError as exc:
                table.problems.append(Problem(name, line, str(exc)))
                continue
            checked["source"] = name
            table.rows.append(checked)
    return table


# --------------------------------------------------------------------------------------------- plotting


def plot(table: Table | str | os.PathLike, out: str | os.PathLike | None = None):
    """Speed-up, efficiency, accuracy and elapsed time against workers: one line per workload (dataset, network,
    hardware, strategy), means of its runs, every run as a dot; captioned with the datasets and hardware."""
    import matplotlib

    if out is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    if not isinstance(table, Table):
        table = collect(table)
    if not table.rows:
        raise UserError(
            "no good rows to plot" + (f" ({len(table.problems)} bad rows skipped)" if table.problems else "")
        )
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    speed_ax, eff_ax = axes.flat[:2]
    groups = table.summary()
    loads = sorted({(g["dataset"], g["network"], g["hardware"], g["strategy"]) for g in groups})
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, load in enumerate(loads):
        colour = palette[index % len(palette)]
        label = " / ".join(load[i] for i in (3, 1, 0, 2) if len({l[i] for l in loads}) > 1 or i == 3)
        mine = [g for g in groups if (g["dataset"], g["network"], g["hardware"], g["strategy"]) == load]
        _plot_workload(axes.flat, mine, [r for r in table.rows if workload(r) == load], colour, label)
    all_workers = sorted({int(r["workers"]) for r in table.rows})
    speed_ax.plot(all_workers, [w / all_workers[0] for w in all_workers], ":", color="grey", label="linear")
    eff_ax.axhline(1.0, linestyle=":", color="grey")
    titles = (
        "speed-up (over the workload's fewest workers)",
        "efficiency (speed-up per worker)",
        "test accuracy",
        "elapsed time (s)",
    )
    for ax, title in zip(axes.flat, titles):
        ax.set_title(title)
        ax.set_xlabel("workers")
        if not ax.has_data():  # e.g. MirroredStrategy runs do not evaluate: no accuracy
            ax.text(0.5, 0.5, "not recorded by these runs", ha="center", va="center", transform=ax.transAxes)
            continue
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_workers, [str(w) for w in all_workers])
        ax.grid(alpha=0.3)
    speed_ax.legend(title="workload", fontsize="small")
    learners = len(table.learners)
    fig.suptitle(f"class results: {len(table.rows)} runs by {learners} learner{'s' if learners != 1 else ''}")
    fig.text(0.5, 0.01, table.caption(), ha="center", fontsize="small", wrap=True)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    if out is not None:
        fig.savefig(out, dpi=100)
    return fig


def _plot_workload(axes: Any, mine: list[dict], runs: list[dict], colour: str, label: str) -> None:
    """One workload's lines on the four panels (means per worker count; accuracy and time also each run's dot)."""
    speed_ax, eff_ax, acc_ax, time_ax = axes
    workers = [g["workers"] for g in mine]
    speed_ax.plot(workers, [g["speedup"] for g in mine], "o-", color=colour, label=label)
    eff_ax.plot(workers, [g["efficiency"] for g in mine], "o-", color=colour, label=label)
    for ax, key in ((acc_ax, "accuracy"), (time_ax, "elapsed_s")):
        means = [(g["workers"], g[key]) for g in mine if g[key] is not None]
        if means:
            ax.plot([w for w, _ in means], [v for _, v in means], "o-", color=colour, label=label)
        dots = [(int(r["workers"]), float(r[key])) for r in runs if r[key]]
        if dots:
            ax.scatter([w for w, _ in dots], [v for _, v in dots], s=12, alpha=0.5, color=colour)
