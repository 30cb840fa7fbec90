"""The class results table: the schema, concurrent appends, collecting good and bad rows, the plot."""

from __future__ import annotations

import csv
import errno
import multiprocessing
from pathlib import Path

import pytest

from course import UserError, results
from tests.conftest import run_course

GOOD = {
    "strategy": "sync",
    "dataset": "mnist",
    "network": "lenet",
    "workers": 2,
    "epochs": 3,
    "batch_size": 64,
    "elapsed_s": 12.5,
    "accuracy": 0.91,
    "engines": 2,
    "hardware": "2 CPU cores",
    "run": 1,
}


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_append_creates_header_then_appends_and_never_overwrites(tmp_path):
    file = tmp_path / "r.csv"
    results.append_row(file, GOOD)
    results.append_row(file, {**GOOD, "strategy": "2", "workers": 4})  # seed 000's numeric sync type
    text = file.read_text()
    assert text.splitlines()[0] == ",".join(results.FIELDS)
    rows = _rows(file)
    assert [r["strategy"] for r in rows] == ["sync", "full-async"]
    assert [r["workers"] for r in rows] == ["2", "4"]
    assert rows[0]["date"] and rows[0]["learner"], "date and learner are filled in"


@pytest.mark.parametrize(
    "change,message",
    [
        ({"workers": 0}, "workers"),
        ({"workers": "two"}, "workers"),
        ({"accuracy": 91}, "percentage"),
        ({"elapsed_s": -1}, "positive"),
        ({"strategy": None}, "strategy is missing"),
        ({"colour": "red"}, "unknown column"),
        ({"workers": 2.5}, "whole number >= 1"),
        ({"elapsed_s": "fast"}, "elapsed_s is 'fast', not a number"),
        ({"images_per_s": "inf"}, "not a finite number"),
        ({"accuracy": 1.5}, "accuracy is 1.5, outside"),
        ({"strategy": "my strategy!"}, "not a simple name"),
        ({"date": "yesterday"}, "not an ISO 8601"),
    ],
)
def test_append_refuses_bad_rows_and_leaves_the_file_alone(tmp_path, change, message):
    file = tmp_path / "r.csv"
    results.append_row(file, GOOD)
    before = file.read_bytes()
    with pytest.raises(UserError, match=message):
        results.append_row(file, {**GOOD, **change})
    assert file.read_bytes() == before


def test_append_refuses_a_file_with_another_header(tmp_path):
    file = tmp_path / "other.csv"
    file.write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="not a course results file"):
        results.append_row(file, GOOD)
    assert file.read_text() == "a,b\n1,2\n"


def _append_many(args):
    path, worker, count = args
    for i in range(count):
        results.append_row(
            path, {**GOOD, "learner": f"w{worker}", "run": i + 1, "hardware": "x" * 3000}
        )  # long lines: a torn write would show
    return worker


def _append_many_where_flock_is_refused(args):
    def no_locks_here(fd, operation):  # what flock answers on a Lustre or NFS mount without locking
        raise OSError(errno.ENOLCK, "No locks available")

    results.fcntl.flock = no_locks_here  # in this forked worker only
    return _append_many(args)


@pytest.mark.parametrize("writer", [_append_many, _append_many_where_flock_is_refused], ids=["flock", "no-flock"])
def test_concurrent_appends_are_all_present_and_well_formed(tmp_path, writer):
    file = tmp_path / "shared.csv"
    workers, each = 6, 25
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(writer, [(file, w, each) for w in range(workers)])
    lines = file.read_text().splitlines()
    assert lines.count(",".join(results.FIELDS)) == 1, "exactly one header"
    table = results.collect(file)
    assert not table.problems, [str(p) for p in table.problems]
    got = sorted((r["learner"], int(r["run"])) for r in table.rows)
    assert got == sorted((f"w{w}", i + 1) for w in range(workers) for i in range(each))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.csv"], "a lock file was left behind"


def _class_folder(folder: Path) -> None:
    (folder / "alice").mkdir(parents=True)
    results.append_row(folder / "alice" / "results.csv", GOOD)
    results.append_row(folder / "alice" / "results.csv", {**GOOD, "workers": 1, "elapsed_s": 20.0})
    results.append_row(folder / "bob.csv", {**GOOD, "strategy": "horovod", "accuracy": None})
    bad = folder / "carol.csv"
    header = ",".join(results.FIELDS)
    good_line = "2026-11-22T10:00:00,carol,async,mnist,lenet,2,3,64,15.0,0.88,,,2,,1"
    bad_lines = [
        "2026-11-22T10:00:00,carol,async,mnist,lenet,zero,3,64,15.0,0.88,,,2,,1",  # line 3: workers
        "2026-11-22T10:00:00,carol,async,mnist,lenet,2,3,64,15.0,1.5,,,2,,1",  # line 4: accuracy
        "2026-11-22T10:00:00,carol,async,mnist",  # line 5: short
        "yesterday,carol,async,mnist,lenet,2,3,64,15.0,0.8,,,2,,1",
    ]  # line 6: date
    bad.write_text("\n".join([header, good_line, *bad_lines]) + "\n")
    (folder / "notes.csv").write_text("name,comment\nx,y\n")


def test_collect_keeps_good_rows_and_reports_each_bad_one(tmp_path):
    _class_folder(tmp_path)
    table = results.collect(tmp_path)
    assert len(table.rows) == 4
    assert {r["strategy"] for r in table.rows} == {"sync", "horovod", "async"}
    where = sorted((Path(p.file).name, p.line) for p in table.problems)
    assert where == [("carol.csv", 3), ("carol.csv", 4), ("carol.csv", 5), ("carol.csv", 6), ("notes.csv", 1)]
    why = {p.line: p.why for p in table.problems if p.file.endswith("carol.csv")}
    assert "workers" in why[3] and "accuracy" in why[4] and "values for" in why[5] and "date" in why[6]
    summary = {(g["strategy"], g["workers"]): g for g in table.summary()}
    assert summary[("sync", 2)]["elapsed_s"] == pytest.approx(12.5)
    assert summary[("horovod", 2)]["accuracy"] is None


def test_cli_collect_and_plot(tmp_path):
    _class_folder(tmp_path / "class")
    merged = tmp_path / "class" / "merged.csv"
    done = run_course("results", "collect", str(tmp_path / "class"), "--out", str(merged), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "merged 4 row(s)" in done.stdout
    skipped = [line for line in done.stderr.splitlines() if line.startswith("skipped ")]
    assert len(skipped) == 5 and any("carol.csv:4:" in line and "accuracy" in line for line in skipped), done.stderr
    assert len(_rows(merged)) == 4 and "source" in _rows(merged)[0]
    again = run_course("results", "collect", str(tmp_path / "class"), "--out", str(merged), timeout=120)
    assert "merged 4 row(s)" in again.stdout, "the merged file itself is not merged again"
    png = tmp_path / "class.png"
    plotted = run_course("results", "plot", str(merged), "--out", str(png), timeout=180)
    assert plotted.returncode == 0, plotted.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_collect_of_an_empty_folder_is_one_line(tmp_path):
    done = run_course("results", "collect", str(tmp_path), timeout=120)
    assert done.returncode == 1 and done.stderr.startswith("course: error: no .csv files"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _workloads(folder: Path) -> None:
    """Three learners, four files: two workloads that must not be averaged together, one on the fallback data."""
    folder.mkdir(parents=True, exist_ok=True)
    cpu = {
        "dataset": "mnist",
        "network": "simple-mnist",
        "hardware": "2 CPU cores",
        "strategy": "horovod",
        "epochs": 1,
        "batch_size": 64,
    }
    for name, rows in {
        "alice-1": [{**cpu, "learner": "alice", "workers": 1, "elapsed_s": 10, "images_per_s": 100}],
        "alice-2": [{**cpu, "learner": "alice", "workers": 2, "elapsed_s": 6, "images_per_s": 180}],
        "bob": [
            {
                "learner": "bob",
                "strategy": "mirrored",
                "dataset": "digits",
                "network": "resnet50v2",
                "hardware": "4 GPU(s)",
                "workers": w,
                "elapsed_s": t,
            }
            for w, t in ((1, 100), (2, 60))
        ],
        "carol": [
            {**cpu, "learner": "carol", "hardware": "4 GPU(s)", "workers": 2, "elapsed_s": 1, "images_per_s": 1000}
        ],
    }.items():
        for row in rows:
            results.append_row(folder / f"{name}.csv", row)


def test_summary_compares_runs_only_within_a_workload_with_speedup_and_efficiency(tmp_path):
    _workloads(tmp_path)
    table = results.collect(tmp_path)
    groups = {(g["dataset"], g["hardware"], g["strategy"], g["workers"]): g for g in table.summary()}
    assert len(groups) == 5, "the same strategy on other hardware is another workload"
    cpu2 = groups[("mnist", "2 CPU cores", "horovod", 2)]
    assert (cpu2["runs"], cpu2["speedup"], cpu2["efficiency"]) == (1, pytest.approx(1.8), pytest.approx(0.9))
    mirrored = groups[("digits", "4 GPU(s)", "mirrored", 2)]  # no throughput recorded: elapsed 100 s -> 60 s
    assert mirrored["speedup"] == pytest.approx(100 / 60) and mirrored["efficiency"] == pytest.approx(100 / 120)
    gpu2 = groups[("mnist", "4 GPU(s)", "horovod", 2)]  # its own baseline, not the CPU runs
    assert gpu2["speedup"] == pytest.approx(1.0) and gpu2["elapsed_s"] == pytest.approx(1)
    assert "digits" in table.show() and "speed-up" in table.show()


def test_plot_counts_learners_and_captions_dataset_and_hardware(tmp_path):
    _workloads(tmp_path)
    fig = results.plot(results.collect(tmp_path), out=tmp_path / "class.png")
    assert fig._suptitle.get_text() == "class results: 5 runs by 3 learners"  # 4 files, 3 learners
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "offline fallback" in caption and "2 CPU cores" in caption and "4 GPU(s)" in caption, caption
    titles = [ax.get_title() for ax in fig.axes]
    assert any(t.startswith("speed-up") for t in titles) and any(t.startswith("efficiency") for t in titles)
    speed = next(ax for ax in fig.axes if ax.get_title().startswith("speed-up"))
    assert len([l for l in speed.get_lines() if l.get_label() != "linear"]) == 3, "one line per workload"
