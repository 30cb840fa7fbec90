"""The course's table of contents: each notebook's number, title and estimated time, read from its first cell
(solutions/NN_name.ipynb: `# NN - Title` and `**Estimated time:** N minutes`), and README's table of them.

The notebook is the one place for those facts; README's "The notebooks" table repeats them, generated here
(`python -m course readme-table --write`). Its Topic and Needs columns are README's own: no notebook says them in a
line. tests/test_contents.py fails, naming the notebook and the file to change, when README and a notebook disagree.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from course import UserError

ROOT = Path(__file__).resolve().parents[1]
TITLE = re.compile(r"^# (\d\d) - (.+)$", re.M)
TIME = re.compile(r"\*\*Estimated time:\*\* (\d+) minutes")
HEADER = ("| # | Notebook | Topic | Time | Needs |", "|---|---|---|---|---|")
TO_WRITE = "?"  # the Topic and Needs of a notebook README has no row for yet
SESSION = 90  # minutes of a workshop session: no notebook asks more (a longer one is split in parts)


@dataclass(frozen=True)
class Notebook:
    """What README's table says of a notebook, as the notebook says it."""

    number: str
    name: str
    title: str
    minutes: int


def read(path: Path) -> Notebook:
    """The number, title and time of the notebook at PATH, from its first cell."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    first = "".join(cells[0]["source"]) if cells else ""
    title, time = TITLE.search(first), TIME.search(first)
    if not title or not time:
        raise UserError(f"{path}: its first cell needs a `# NN - Title` line and `**Estimated time:** N minutes`")
    if title.group(1) != path.stem[:2]:
        raise UserError(f"{path}: its title says notebook {title.group(1)}, its file name {path.stem[:2]}")
    return Notebook(title.group(1), path.stem, title.group(2).strip(), int(time.group(1)))


def notebooks(solutions: Path | None = None) -> list[Notebook]:
    """Every solution notebook's entry, in order (solutions/*.ipynb of the checkout unless SOLUTIONS is given)."""
    folder = Path(solutions) if solutions is not None else ROOT / "solutions"
    found = [read(p) for p in sorted(folder.glob("[0-9][0-9]_*.ipynb"))]
    if not found:
        raise UserError(f"no solution notebooks in {folder}: run this in the course's checkout")
    return found


def row(notebook: Notebook, topic: str = TO_WRITE, needs: str = TO_WRITE) -> str:
    """README's table row for NOTEBOOK: its title linked to the student notebook, with README's TOPIC and NEEDS."""
    link = f"[{notebook.title}](notebooks/{notebook.name}.ipynb)"
    return f"| {notebook.number} | {link} | {topic} | {notebook.minutes} min | {needs} |"


def table_lines(readme: str) -> list[str]:
    """The lines of README's notebook table: its header line to its last row."""
    lines = readme.splitlines()
    if HEADER[0] not in lines:
        raise UserError(f"README.md has no notebook table (a line `{HEADER[0]}`)")
    start = lines.index(HEADER[0])
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def readme_columns(readme: str) -> dict[str, tuple[str, str]]:
    """README's own columns, Topic and Needs, by notebook file name (read from each row's link)."""
    columns = {}
    for line in table_lines(readme)[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        name = re.search(r"notebooks/(\w+)\.ipynb", cells[1]) if len(cells) == 5 else None
        if name:
            columns[name.group(1)] = (cells[2], cells[4])
    return columns


def table(readme: str, found: list[Notebook]) -> list[str]:
    """README's notebook table as it should be: a row per notebook FOUND, Topic and Needs kept from README."""
    columns = readme_columns(readme)
    return [*HEADER, *(row(nb, *columns.get(nb.name, (TO_WRITE, TO_WRITE))) for nb in found)]


def main(write: bool = False, readme: Path | None = None, solutions: Path | None = None) -> int:
    """Print README's notebook table made from the notebooks; WRITE: put it in README.md instead."""
    path = Path(readme) if readme is not None else ROOT / "README.md"
    text = path.read_text(encoding="utf-8")
    found = notebooks(solutions)
    new = table(text, found)
    if not write:
        print("\n".join(new))
        return 0
    old = "\n".join(table_lines(text))
    path.write_text(text.replace(old, "\n".join(new), 1), encoding="utf-8")
    missing = [nb.name for nb in found if nb.name not in readme_columns(text)]
    print(f"wrote the notebook table of {path}" + (f"; write the Topic and Needs of {missing}" if missing else ""))
    return 0
