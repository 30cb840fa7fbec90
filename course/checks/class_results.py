"""Notebook 10's check of the row a learner appends to the class results table for a Horovod run: the file read back
as the instructor's `collect` reads it (course.results), each column against the run's own summary, which
course.programs.horovod_mnist printed, never against what the row claims about itself.

    class_results.horovod_row(MINE, hvd_summary)     # None, or what is wrong
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from course import results
from course.checks import check, expect


@check
def horovod_row(path: str | os.PathLike, summary: Mapping[str, Any]) -> None:
    """Exercise `ex4`: the file at `path` holds exactly one valid row, for the Horovod MNIST run of `summary`: its
    strategy, dataset, network, size, epochs, global batch and test accuracy, the whole run's elapsed time, and
    its steady epoch time and throughput within 1% (rounding is fine)."""
    table = results.collect(path)
    expect(not table.problems, f"the file has problems: {[str(p) for p in table.problems]}")
    expect(len(table.rows) == 1, "append exactly one row for the run")
    row = table.rows[0]
    expect(row["strategy"] == "horovod", "the strategy should be horovod")
    expect(
        (row["dataset"], row["network"]) == ("mnist", "simple-mnist"),
        f"dataset and network are {row['dataset']!r} and {row['network']!r}: the run trained simple-mnist on mnist",
    )
    expect(row["workers"] == str(summary["size"]), 'workers is the run\'s size: hvd_summary["size"]')
    expect(
        row["epochs"] == str(len(summary["epoch_times"])),
        f"epochs is {row['epochs']}, but the run trained {len(summary['epoch_times'])} epochs",
    )
    expect(
        abs(float(row["accuracy"]) - summary["test_accuracy"]) < 1e-4,
        "accuracy is the run's test accuracy (a fraction)",
    )
    expect(
        row["batch_size"] == str(summary["global_batch"]),
        f"batch_size is {row['batch_size']}: the class table compares global batches, every rank's batch together "
        '(hvd_summary["global_batch"])',
    )
    total = sum(summary["epoch_times"])
    expect(
        abs(float(row["elapsed_s"]) - total) < 1e-3,
        f"elapsed_s is {row['elapsed_s']}, but the run's {len(summary['epoch_times'])} epochs took {total:.2f} s in "
        "all: the whole run, every epoch counted",
    )
    # The times and the throughput against the run's own measurements, within 1% (rounding is fine).
    epoch = summary["epoch_time"]
    expect(
        abs(float(row["epoch_time_s"]) - epoch) <= max(0.01 * epoch, 0.005),
        f"epoch_time_s is {row['epoch_time_s']}, not the run's epoch time: the median epoch, the first one (which "
        "also builds the model) left out, as hvd_summary has it",
    )
    rate = summary["images_per_second"]
    expect(
        abs(float(row["images_per_s"]) - rate) <= 0.01 * rate,
        f"images_per_s is {row['images_per_s']}, not the run's throughput: images of one epoch over all ranks per "
        "second of a steady epoch, as hvd_summary has it",
    )
