"""README's table of notebooks is the notebooks' own: each one's number, title and time come from its first cell
(course.contents); README keeps only the Topic and Needs columns. Fast: no notebook runs."""

from __future__ import annotations

import nbformat
import pytest

from course import UserError, contents
from tests.conftest import ROOT

FIX = "change the notebook (its first cell is the one place), then run `python -m course readme-table --write`"


def _differs(readme: str, notebook: str) -> str:
    """The cells of two table rows that differ: README's, then what solutions/NAME.ipynb says."""
    cells = [[c.strip() for c in line.strip().strip("|").split(" | ")] if line else [] for line in (readme, notebook)]
    pairs = [(a, b) for a, b in zip(*cells) if a != b] if all(cells) else [(readme or "no row", notebook or "none")]
    return "; ".join(f"{a!r} where the notebook says {b!r}" for a, b in pairs)


def test_readme_table_says_what_each_notebook_says():
    readme = (ROOT / "README.md").read_text()
    found = contents.notebooks()
    assert [nb.name for nb in found] == sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb"))
    have = {line.split("](notebooks/")[-1].split(".ipynb")[0]: line for line in contents.table_lines(readme)[2:]}
    want = dict(zip((nb.name for nb in found), contents.table(readme, found)[2:], strict=True))
    wrong = [
        f"{name}: README.md says {_differs(have.get(name, ''), want.get(name, ''))}"
        for name in sorted(have | want)
        if have.get(name) != want.get(name)
    ]
    assert not wrong, "\n".join(wrong) + f"\nREADME's notebook table differs from the notebooks: {FIX}"
    assert contents.table_lines(readme) == contents.table(readme, found), f"README's table is out of order: {FIX}"
    assert f"| {contents.TO_WRITE} |" not in "\n".join(have.values()), "write the Topic and Needs in README.md"


def test_every_notebook_fits_a_workshop_session():
    longer = [f"{nb.name}: {nb.minutes} min" for nb in contents.notebooks() if nb.minutes > contents.SESSION]
    assert not longer, f"longer than a {contents.SESSION}-minute session, split or cut: {longer}"


def _notebook(folder, name: str, first: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(first), nbformat.v4.new_code_cell("print(1)")]
    nbformat.write(nb, str(folder / f"{name}.ipynb"))


def test_a_notebook_without_a_title_or_time_is_named(tmp_path):
    with pytest.raises(UserError, match="no solution notebooks in"):  # the student copy has no solutions/
        contents.notebooks(tmp_path)
    _notebook(tmp_path, "00_first", "# 00 - First\n\nNo time given.")
    with pytest.raises(UserError, match="00_first.ipynb: its first cell needs"):
        contents.notebooks(tmp_path)
    _notebook(tmp_path, "00_first", "# 01 - First\n\n**Estimated time:** 5 minutes (quick).")
    with pytest.raises(UserError, match="title says notebook 01, its file name 00"):
        contents.notebooks(tmp_path)


def test_write_takes_title_and_time_from_the_notebooks_and_keeps_readmes_columns(tmp_path, capsys):
    _notebook(tmp_path, "00_first", "# 00 - The first one\n\n**Estimated time:** 45 minutes (quick: 1).")
    _notebook(tmp_path, "01_second", "# 01 - A second\n\n**Estimated time:** 20 minutes.")
    readme = tmp_path / "README.md"
    old = "| 00 | [Old title](notebooks/00_first.ipynb) | what it teaches | 30 min | CPU |"
    readme.write_text(f"# Course\n\n{contents.HEADER[0]}\n{contents.HEADER[1]}\n{old}\n\nAfter the table.\n")
    assert contents.main(write=True, readme=readme, solutions=tmp_path) == 0
    assert "write the Topic and Needs of ['01_second']" in capsys.readouterr().out
    assert readme.read_text().splitlines()[4:] == [
        "| 00 | [The first one](notebooks/00_first.ipynb) | what it teaches | 45 min | CPU |",
        "| 01 | [A second](notebooks/01_second.ipynb) | ? | 20 min | ? |",
        "",
        "After the table.",
    ]
