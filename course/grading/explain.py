"""Errors and outcomes in plain words, for learners and for grade reports (never a traceback)."""

from __future__ import annotations

import re

from nbformat import NotebookNode

from course.grading.execute import Outcome, size_words

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_error(cell: NotebookNode) -> NotebookNode | None:
    """The first error output of a code cell, if any."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return output
    return None


def stderr_text(cell: NotebookNode) -> str:
    """What the cell wrote to stderr (nbgrader counts that as a failed check)."""
    return "".join(
        o.get("text", "")
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stderr"
    )


def one_line(text: str, limit: int = 200) -> str:
    """Text squeezed to one line of at most `limit` characters."""
    text = " ".join(ANSI.sub("", str(text)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_words(ename: str, evalue: str, timeout: float | None = None) -> str:
    """An exception as a sentence a learner can act on."""
    evalue = one_line(evalue)
    if ename == "AssertionError":
        return f"check failed: {evalue}" if evalue else "check failed (an assert without a message)"
    if ename == "NotImplementedError":
        return "not answered yet (the answer cell still raises NotImplementedError)"
    if ename == "NameError":
        name = re.search(r"name '([^']+)'", evalue)
        what = f"`{name.group(1)}`" if name else "a name"
        return f"{what} is not defined: did its answer cell run without errors, and is it spelled as asked?"
    if ename == "CellTimeoutError":
        limit = f" {timeout:g} s" if timeout else " its time limit"
        return f"stopped: the cell ran longer than{limit} (an endless loop, or too much work)"
    if ename == "KeyboardInterrupt":
        return "stopped: the cell was interrupted"
    if ename == "MemoryError":
        return "ran out of memory"
    return f"{ename}: {evalue}" if evalue else ename


def cell_error_words(cell: NotebookNode, timeout: float | None = None) -> str:
    """Why a code cell failed, in words ('' when it did not fail)."""
    error = first_error(cell)
    if error is not None:
        return error_words(error.get("ename", "Error"), error.get("evalue", ""), timeout)
    err = stderr_text(cell).strip()
    if err:
        return f"the check wrote to stderr (which counts as a failure): {one_line(err.splitlines()[-1])}"
    return ""


def stop_words(outcome: Outcome, cell_label: str, timeout: float, memory: int) -> str:
    """Why a run ended early, naming the cell it ended in."""
    where = f" while running {cell_label}" if cell_label else ""
    if outcome.stopped == "memory":
        return f"the kernel was stopped{where}: it used more than {size_words(memory)} of memory"
    if outcome.stopped == "timeout":
        return (
            f"the kernel was stopped{where}: a cell kept running past its {timeout:g} s limit and ignored the interrupt"
        )
    if outcome.stopped == "nostart":
        return f"the grader could not start a kernel ({outcome.detail}); no cell ran, grade it again"
    return f"the kernel died{where} (a crash, os._exit, or a killed process); later cells did not run"
