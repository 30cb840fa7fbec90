"""The course as a website (`make docs`): Sphinx with MyST-NB and the book theme, the stack of Jupyter Book 1.

    python -m website.build [OUT]        # default build/site; open OUT/index.html

Learner pages come from the student copy (`python -m course student-copy`), never from solutions/, so no answer
and no hidden test can reach the HTML: one page per notebook, not executed here, with a box saying how long it takes,
what it needs (README's table) and where to launch it, and its teaching cells' outputs from a recorded run of the
solutions (DOCS_RUN, a folder of `python -m course run --out`; website/outputs.py), with a note saying which run.
The instructor guide's pages (docs/guide/) are copied as they are, in the order its index lists them; the command
line's reference is printed by its own argparse parser; what each exercise must do, from one data file per notebook
(website/exercises.py); the expected results and the mutation report's table, from recorded runs
(website/results.py). Where the launch links point is set in one place, `launch()` below, from environment
variables; website/conf.py gives the same values to the theme's launch buttons.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

from course import UserError, contents
from website import exercises, outputs, results

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "website"
GUIDE = ROOT / "docs" / "guide"  # the instructor guide: index.md lists its pages in order
GITHUB = "https://github.com/"
MATHJAX = ROOT / "build" / "mathjax"  # scripts/setup-mathjax.sh puts MathJax 3 here, as mathjax/; the site serves it
NOTEBOOKS = "<!-- notebooks -->"  # where website/index.md gets its table of notebooks
LAUNCH = "<!-- launch -->"  # ... its links to notebook 00
PAGES = "<!-- pages -->"  # ... and its table of contents' notebook pages
# What sphinx-build's messages name: the pages it reads are written in a temporary folder from these
SOURCES = (
    "Its pages are made from: index.md <- website/index.md; notebooks/NN_name.ipynb <- solutions/ through the "
    "student copy (two cells, the box and the note on outputs, added after the first; outputs from DOCS_RUN's "
    "run); instructors/*.md <- docs/guide/*.md (the same lines; "
    "index.md gains a toctree of the pages its list links to); reference/cli.md <- the course's argparse parsers "
    "(course/cli.py); reference/exercises*.md <- solutions/exercises/NN_name.yml and the notebooks' headings "
    "(website/exercises.py); reference/recorded-results.md and reference/mutation-report.md <- docs/guide/records/*.json "
    "and docs/guide/key-figures.yml (website/results.py)."
)
OOD_APP = "Distributed Deep Learning on HPC"  # deploy/ondemand/ddl-hpc/manifest.yml's name
OOD_FOLDER = "~/ddl-hpc"  # where the OnDemand app puts the student copy (its template/before.sh)


@dataclass(frozen=True)
class Launch:
    """Where learners launch the notebooks: the repository whose BRANCH holds the student copy, a BinderHub, and a
    JupyterHub with nbgitpuller ("" where the site has none: the links that need it are then left out)."""

    repository: str
    branch: str
    binder: str
    hub: str

    @property
    def folder(self) -> str:
        """The folder nbgitpuller clones the repository into: its name."""
        return self.repository.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1]

    def binder_url(self, path: str) -> str:
        """Binder's link opening PATH (e.g. notebooks/00_x.ipynb) of the student branch in JupyterLab; the same URL
        as the book theme's Binder button builds."""
        if self.repository.startswith(GITHUB):
            where = f"gh/{self.repository.removeprefix(GITHUB).strip('/').removesuffix('.git')}"
        else:
            where = f"git/{quote(self.repository)}"
        return f"{self.binder.rstrip('/')}/v2/{where}/{self.branch}?urlpath=lab/tree/{path}"

    def hub_url(self, path: str) -> str:
        """The nbgitpuller link that clones (first click) or merges (later clicks) the student branch into the
        learner's home on the hub and opens PATH; the same URL as the book theme's JupyterHub button builds."""
        query = urlencode(
            {"repo": self.repository, "urlpath": f"lab/tree/{self.folder}/{path}", "branch": self.branch}, safe="/"
        )
        return f"{self.hub.rstrip('/')}/hub/user-redirect/git-pull?{query}"


def launch() -> Launch:
    """The launch settings: DOCS_REPOSITORY_URL, DOCS_BRANCH, DOCS_BINDER_URL and DOCS_HUB_URL, else the defaults
    (no repository: its links are left out)."""
    return Launch(
        repository=os.environ.get("DOCS_REPOSITORY_URL", ""),
        branch=os.environ.get("DOCS_BRANCH") or "student",
        binder=os.environ.get("DOCS_BINDER_URL") or "https://mybinder.org",
        hub=os.environ.get("DOCS_HUB_URL", ""),
    )


def launch_lines(where: Launch, path: str) -> list[str]:
    """Markdown list items: where to open PATH of the student copy (Binder, the hub, Open OnDemand, a laptop); a
    site built without a repository has no Binder or hub link, rather than a placeholder's."""
    hub = (
        f"[Open on your JupyterHub]({where.hub_url(path)}): puts the course in your home (nbgitpuller); a later "
        "click brings your instructor's updates without overwriting your work"
        if where.hub and where.repository
        else "**JupyterHub**: open the link your instructor gives you (it puts the course in your home)"
    )
    clone = (
        f"`git clone --branch {where.branch} {where.repository} ddl-hpc`"
        if where.repository
        else f"get the course's `{where.branch}` branch from your instructor as `ddl-hpc`"
    )
    binder = (
        f"[Launch on Binder]({where.binder_url(path)}): nothing to install, CPU only; the first start takes a while"
    )
    return ([f"- {binder}"] if where.repository else []) + [
        f"- {hub}",
        f"- **Open OnDemand**: Interactive Apps, *{OOD_APP}*, Launch; then **Connect to JupyterLab** and open "
        f"`{OOD_FOLDER}/{path}`",
        f"- **Your own machine** (Debian or Ubuntu, or WSL; Python 3.11): {clone}, then `make lab` in `ddl-hpc` "
        f"sets everything up in `.venv` (about 10 minutes the first time) and prints JupyterLab's address; open "
        f"`{path}` there",
    ]


def notebook_box(needs: str, where: Launch, path: str) -> str:
    """The box a notebook page shows after its first cell (title, objectives, time): what PATH needs and where
    to run it."""
    return "\n".join(
        ["```{admonition} Run this notebook", ":class: tip", "", f"**Needs:** {needs}.", "", *launch_lines(where, path)]
        + ["```"]
    )


def notebook_pages(
    student: Path, source: Path, where: Launch, run: outputs.Run | None = None
) -> list[contents.Notebook]:
    """Copy the student copy's notebooks into SOURCE/notebooks, each with its box after its first cell (title,
    objectives, time), then the note on its outputs (from RUN, if given); returns them in order."""
    import nbformat

    needs = {name: columns[1] for name, columns in contents.readme_columns((ROOT / "README.md").read_text()).items()}
    found = contents.notebooks(student / "notebooks")
    (source / "notebooks").mkdir(parents=True)
    for notebook in found:
        if notebook.name not in needs:
            raise UserError(f"README's notebook table has no row for {notebook.name}: python -m course readme-table")
        nb = nbformat.read(str(student / "notebooks" / f"{notebook.name}.ipynb"), as_version=4)
        box = notebook_box(needs[notebook.name], where, f"notebooks/{notebook.name}.ipynb")
        note = outputs.show(nb, notebook.name, run)
        nb.cells[1:1] = [
            nbformat.v4.new_markdown_cell(box, id="site-run-this-notebook"),
            nbformat.v4.new_markdown_cell(note, id="site-outputs"),
        ]
        # IPython's lexer, as a notebook that has run says: cells with %%px, %%writefile or !commands are no Python
        nb.metadata.setdefault("language_info", {})["pygments_lexer"] = "ipython3"
        nbformat.write(nb, str(source / "notebooks" / f"{notebook.name}.ipynb"))
    return found


def start_page(found: list[contents.Notebook], where: Launch) -> str:
    """website/index.md with its table of notebooks and its launch links filled in."""
    columns = contents.readme_columns((ROOT / "README.md").read_text())
    table = ["| # | Notebook | Time | Needs |", "|---|---|---|---|"]
    table += [
        f"| {nb.number} | [{nb.title}](notebooks/{nb.name}.ipynb) | {nb.minutes} min | {columns[nb.name][1]} |"
        for nb in found
    ]
    first = f"notebooks/{found[0].name}.ipynb"
    text = (HERE / "index.md").read_text(encoding="utf-8")
    text = text.replace(LAUNCH, "\n".join(launch_lines(where, first)))
    text = text.replace(NOTEBOOKS, "\n".join(table))
    return text.replace(PAGES, "\n".join(f"notebooks/{nb.name}" for nb in found))


def cli_reference() -> str:
    """The command line's reference page: every parser's own --help, from `python -m course` down."""
    from course.cli import build_parser, job_action_parser

    lines = [
        "# Command line",
        "",
        "Every command's `--help`, printed by the course's own parser when the site was built.",
        "",
    ]

    def walk(parser: argparse.ArgumentParser, title: str, depth: int) -> None:
        lines.extend([f"{'#' * depth} {title}", "", "```text", parser.format_help().rstrip(), "```", ""])
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in dict.fromkeys(action.choices.values()):  # aliases share one parser
                    walk(sub, sub.prog, min(depth + 1, 4))

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "88"  # argparse wraps to the terminal: the same width on every build
    try:
        walk(build_parser(), "python -m course", 2)
        walk(job_action_parser(), "python -m course job ACTION JOBID", 2)
    finally:
        if columns is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(lines)


def guide_pages(index: str) -> list[str]:
    """The guide's pages in the order its index.md (the text INDEX) links to them: their names without `.md`."""
    linked = re.findall(r"\]\(([\w.-]+)\.md(?:#[\w-]*)?\)", index)
    return list(dict.fromkeys(linked))


def guide_sources(folder: Path) -> None:
    """The instructor guide's pages in FOLDER, as they are, and its index with a hidden toctree of them in order (so
    the site's sidebar nests them under it, and a page the index leaves out fails the build)."""
    folder.mkdir()
    for page in sorted(GUIDE.glob("*.md")):
        shutil.copy2(page, folder / page.name)
    index = (GUIDE / "index.md").read_text(encoding="utf-8")
    toctree = ["", "```{toctree}", ":hidden:", "", *guide_pages(index), "```", ""]
    (folder / "index.md").write_text(index.rstrip("\n") + "\n" + "\n".join(toctree), encoding="utf-8")


def write_sources(source: Path, student: Path, where: Launch, run: outputs.Run | None = None) -> None:
    """Sphinx's source folder SOURCE: the start page, the notebook pages (with RUN's outputs), the instructor guide,
    the reference."""
    found = notebook_pages(student, source, where, run)
    (source / "index.md").write_text(start_page(found, where), encoding="utf-8")
    guide_sources(source / "instructors")
    (source / "reference").mkdir()
    (source / "reference" / "cli.md").write_text(cli_reference(), encoding="utf-8")
    exercises.write_pages(source)
    results.write_pages(source)


def build(out: Path) -> int:
    """Build the site into OUT (new, empty or an earlier site, which is replaced), its notebook pages with the outputs
    of the run in DOCS_RUN; sphinx-build's exit status."""
    from course.grading import student_copy

    out = Path(out).resolve()
    if not (MATHJAX / "mathjax" / "tex-mml-chtml.js").is_file():
        raise UserError(
            f"no MathJax in {MATHJAX} for the site to serve: bash scripts/setup-mathjax.sh (make docs runs it)"
        )
    if out.is_dir() and any(out.iterdir()) and not (out / ".buildinfo").is_file():
        raise UserError(f"{out} is not empty and is not an earlier site; give a new or empty folder")
    run = outputs.load(os.environ["DOCS_RUN"]) if os.environ.get("DOCS_RUN") else None
    if run is None:
        print("website: no recorded run given (DOCS_RUN=DIR of `course run --out DIR`): no outputs shown", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="course-site-") as tmp:
        student, source = Path(tmp) / "student", Path(tmp) / "source"
        student_copy.build(student)
        write_sources(source, student, launch(), run)
        # -W: a warning (a broken link or reference, a page left out) fails the build; -n: every reference checked
        command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", "-n", "-E"]
        command += ["-c", str(HERE), "-d", str(Path(tmp) / "doctrees"), str(source), str(out)]
        return subprocess.run(command).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m website.build", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(ROOT / "build" / "site"), help="default build/site")
    args = parser.parse_args(argv)
    try:
        status = build(Path(args.out))
    except UserError as exc:
        print(f"website: error: {exc}", file=sys.stderr)
        return 1
    if status == 0:
        print(f"website: {Path(args.out) / 'index.html'}")
    else:
        print(f"website: error: the build failed. {SOURCES}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
