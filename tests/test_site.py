"""The course's website (`make docs`, website/build.py) as a reader meets it: built once, offline, warnings as errors;
its start page, a notebook's page and the instructor guide's pages opened in Chromium from a local web server; the launch
links followed to the addresses they name (a stub answers there, not Binder or a hub); a notebook's page with the
figures of a recorded quick-profile run of it; formulas typeset by the site's own MathJax with the network off; and
not one answer or hidden test anywhere in what was built, outputs included, by the student copy's own scan."""

from __future__ import annotations

import functools
import html
import html.parser
import http.server
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from course import UserError, contents
from tests.conftest import ROOT, run_course
from tests.jupyterlab_ui import patient
from tests.test_student_copy import answers_in
from website import exercises, outputs, results
from website.build import guide_pages, launch, start_page

pytestmark = pytest.mark.slow
REPOSITORY = "https://github.com/example-org/ddl-course"  # where the test's build says the student branch is
HUB = "https://hub.example.edu"
NOTEBOOK = "07_horovod"  # the notebook page opened
GUIDE = ROOT / "docs" / "guide"  # the instructor guide's pages
GUIDE_PAGE = "06-slurm"  # the guide's page opened from its index
FIRST = "00_environment_and_cluster"  # the start page's launch links open this one
RUN = "01_task_graphs"  # the recorded run's notebook: the cheapest with figures (14 in ~15 s on 2 cores)
# The calls that draw a figure in the notebooks' cells: a teaching cell with one must show an image
DRAWS = re.compile(r"\bplt\.show\(|\bplots\.\w+\(|\bresults\.plot\(|\btasks\.(?:graph|trace)\(")
IMAGES = ("image/png", "image/svg+xml", "image/jpeg")


def binder(name: str) -> str:
    """Binder's address for notebook NAME of the student branch, written out as a learner's link must be."""
    return f"https://mybinder.org/v2/gh/example-org/ddl-course/student?urlpath=lab/tree/notebooks/{name}.ipynb"


def nbgitpuller(name: str) -> str:
    """The hub's nbgitpuller address for notebook NAME: clone or merge the student branch into ~/ddl-course, open it."""
    return (
        f"{HUB}/hub/user-redirect/git-pull?repo=https%3A//github.com/example-org/ddl-course"
        f"&urlpath=lab/tree/ddl-course/notebooks/{name}.ipynb&branch=student"
    )


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
    """A recorded quick-profile run of one notebook's solution (`python -m course run --out`): its folder."""
    out = tmp_path_factory.mktemp("run")
    ran = run_course("run", RUN, "--profile", "quick", "--out", str(out), timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory, recorded_run):
    """The site, built once as `make docs` builds it, with the launch settings above and the outputs of the run."""
    out = tmp_path_factory.mktemp("site") / "html"
    env = {**os.environ, "DOCS_REPOSITORY_URL": REPOSITORY, "DOCS_HUB_URL": HUB, "DOCS_RUN": str(recorded_run)}
    for name in ("DOCS_BINDER_URL", "DOCS_BRANCH"):  # their defaults: mybinder.org and the student branch
        env.pop(name, None)
    started = time.monotonic()
    subprocess.run(["bash", "scripts/setup-mathjax.sh"], cwd=ROOT, check=True)  # as make docs does; once per machine
    result = subprocess.run(
        [sys.executable, "-m", "website.build", str(out)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == "", result.stderr  # not one warning (-W makes them errors; nothing else may print)
    print(f"site built in {time.monotonic() - started:.0f} s")
    return out


@pytest.fixture(scope="module")
def served(site):
    """The site over HTTP on the loopback, as a reader's browser gets it: its address."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the test's output is for failures
        pass


class _Text(html.parser.HTMLParser):
    """A page's text as a reader sees it: every element's text, a line break at each block, scripts and styles out."""

    INLINE = {"a", "span", "code", "em", "strong", "b", "i", "abbr", "sub", "sup", "kbd", "var", "small"}

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs) -> None:
        if tag in ("script", "style"):
            self.hidden += 1
        if tag not in self.INLINE:
            self.parts.append("\n")

    def handle_endtag(self, tag) -> None:
        if tag in ("script", "style"):
            self.hidden = max(0, self.hidden - 1)
        if tag not in self.INLINE:
            self.parts.append("\n")

    def handle_data(self, data) -> None:
        if not self.hidden:
            self.parts.append(data)


def lines_of(path: Path) -> set[str]:
    """The stripped lines a file shows: a page's text, a notebook's cell sources, any other text file as it is."""
    if path.suffix == ".html":
        parser = _Text()
        parser.feed(path.read_text("utf-8"))
        text = "".join(parser.parts)
    elif path.suffix == ".ipynb" or path.name.endswith(".ipynb.txt"):
        cells = nbformat.reads(path.read_text("utf-8"), as_version=4).cells
        text = "\n".join(cell.source + "\n" + outputs_text(cell) for cell in cells)
    else:
        try:
            text = path.read_text("utf-8")
        except UnicodeDecodeError:  # images and fonts
            return set()
    return {line.strip() for line in text.splitlines() if line.strip()}


def outputs_text(cell) -> str:
    """What a cell's outputs show as text: streams, plain text, HTML, tracebacks."""
    parts = []
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        parts += [output.get("text", ""), data.get("text/plain", ""), data.get("text/html", "")]
        parts += output.get("traceback", [])
    return "\n".join(parts)


def public_lines() -> set[str]:
    """Every line of the released notebooks (notebooks/): what a learner has anyway."""
    return {
        line.strip()
        for path in (ROOT / "notebooks").glob("*.ipynb")
        for cell in nbformat.read(str(path), as_version=4).cells
        for line in cell.source.splitlines()
    }


def test_no_answer_or_hidden_test_is_anywhere_in_the_site(site):
    files = {str(p.relative_to(site)): lines_of(p) for p in site.rglob("*") if p.is_file()}
    pages = [name for name in files if name.endswith(".html")]
    guide = {f"instructors/{p.stem}.html" for p in GUIDE.glob("*.md")}
    assert f"notebooks/{NOTEBOOK}.html" in pages and guide <= set(pages), sorted(pages)
    leaks = answers_in(files, public_lines())
    assert not leaks, "the website gives answers away:\n" + "\n".join(leaks[:20])


SMART = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})  # Sphinx's smart quotes, undone


def test_a_notebook_page_shows_the_figures_of_the_recorded_run_and_says_which(site, recorded_run):
    """The page of the notebook the run executed shows every figure and printed result of its teaching cells (each
    cell that draws shows an image), none of an answer's or a check's, and says which run they come from; a page
    of a notebook the run did not execute says it has no outputs."""
    executed = nbformat.read(str(recorded_run / f"{RUN}.ipynb"), as_version=4)

    def teaching(cell) -> bool:
        grading = cell.metadata.get("nbgrader", {})
        return cell.cell_type == "code" and not grading.get("solution") and not grading.get("grade")

    def images(cell) -> int:
        return sum(any(kind in output.get("data", {}) for kind in IMAGES) for output in cell.outputs)

    taught = [cell for cell in executed.cells if teaching(cell)]
    drawing = [cell for cell in taught if DRAWS.search(cell.source)]
    assert len(drawing) >= 8 and all(images(cell) for cell in drawing), [c.source for c in drawing if not images(c)]
    assert any(c.get("outputs") for c in executed.cells if not teaching(c))  # answers and checks printed: none show
    page = (site / "notebooks" / f"{RUN}.html").read_text("utf-8")
    figures = re.findall(r'<img[^>]* src="(\.\./_images/[^"]+)"', page)  # not the launch menu's logos
    assert len(figures) == sum(map(images, taught)) >= len(drawing)
    assert all((site / "notebooks" / image).resolve().is_file() for image in figures), figures
    assert page.count('class="cell_output') == sum(bool(cell.outputs) for cell in taught)
    record = json.loads((recorded_run / "record.json").read_text())
    said = " ".join(" ".join(lines_of(site / "notebooks" / f"{RUN}.html")).translate(SMART).split())
    assert "come from a run of the solutions" in said
    assert f"Recorded {record['date'].replace('T', ' ')} at commit {record['commit'][:12]}" in said
    assert "quick profile" in said
    other = " ".join(lines_of(site / "notebooks" / f"{FIRST}.html"))
    assert "without outputs: the recorded run the site was built from did not run it" in other
    assert 'class="cell_output' not in (site / "notebooks" / f"{FIRST}.html").read_text("utf-8")


def test_only_unchanged_teaching_cells_get_the_runs_outputs():
    """Outputs go onto the student copy's cells by id: a teaching cell's where its code is the one that ran; never
    an answer's or a check's (though the run gave them outputs), nor a cell whose code changed since."""
    executed = nbformat.read(str(ROOT / "solutions" / f"{RUN}.ipynb"), as_version=4)
    for cell in executed.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"ran {cell.id}\n")]
    student = nbformat.read(str(ROOT / "notebooks" / f"{RUN}.ipynb"), as_version=4)
    edited = next(cell for cell in student.cells if outputs.teaching(cell) and cell.source)
    edited.source += "\n# edited since the run"
    assert outputs.copy_outputs(student, executed) == 1
    for cell in (c for c in student.cells if c.cell_type == "code"):
        grading = cell.metadata.get("nbgrader", {})
        answer_or_check = grading.get("solution") or grading.get("grade")
        assert bool(cell.outputs) == (not answer_or_check and cell is not edited), (cell.id, grading)


def test_a_folder_that_holds_no_run_is_refused_in_one_line(tmp_path):
    (tmp_path / "record.json").write_text('{"schema": 1, "kind": "mutation report"}')
    with pytest.raises(UserError, match="is not the record of a `course run`"):
        outputs.load(tmp_path)
    with pytest.raises(UserError, match="no record.json in"):
        outputs.load(tmp_path / "elsewhere")


def test_every_notebook_has_its_exercise_reference_page(site):
    """The generated pages of what each exercise must do: one per notebook, each exercise under the notebook's own
    `## Exercise` heading with its graded cell named, and the index page listing them all."""
    index = " ".join(lines_of(site / "reference" / "exercises.html"))
    found = contents.notebooks()
    for notebook in found:
        name = exercises.label(notebook, found)  # the number; a notebook in parts: each part's name
        path = site / "reference" / f"exercises-{name}.html"
        assert path.is_file(), f"no reference page for notebook {name}"
        shown = " ".join(" ".join(lines_of(path)).translate(SMART).split())
        cells = nbformat.read(str(ROOT / "solutions" / f"{notebook.name}.ipynb"), as_version=4).cells
        for cell in cells:
            for heading in re.findall(r"^## (Exercise\b.*)$", cell.source, re.M):
                words = " ".join(re.sub(r"[`*]", "", heading).split())
                assert words in shown, f"exercises-{name}.html lacks the notebook's heading {words!r}"
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if cell.metadata.get("nbgrader", {}).get("grade"):
                assert grade_id in shown, f"exercises-{name}.html does not name the graded cell {grade_id}"
        assert f"Notebook {name}: what each exercise must do" in index


def test_the_recorded_results_pages_show_the_newest_records(site):
    """The expected results and the mutation report's table, generated from the committed records: per notebook
    the newest record's commit and date, and every key figure's name and value (each a cell of the page's table),
    or every exercise measured."""
    found = results.load_records()

    def shown(page: str) -> set[str]:
        return {" ".join(line.translate(SMART).split()) for line in lines_of(site / "reference" / page)}

    def recorded(record: dict, lines: set[str]) -> bool:
        said = f"Recorded {record['date'].replace('T', ' ')} at commit {record['commit'][:12]}"
        return any(line.startswith(said) for line in lines)

    page = shown("recorded-results.html")
    names = {notebook.name for notebook in contents.notebooks()}  # a record of a notebook since split is history
    for notebook in contents.notebooks():
        assert f"{notebook.number} {notebook.title}" in page, f"no section for {notebook.name}"
    for name, (record, entry) in results.newest_runs(found).items():
        if name not in names:
            continue
        assert recorded(record, page), name
        for figure in entry["figures"]:
            assert {figure["name"], results.shown(figure["value"], figure["unit"])} <= page, figure
    report = shown("mutation-report.html")
    for name, (record, rows) in results.newest_reports(found).items():
        if name not in names:
            continue
        assert recorded(record, report), name
        assert {row["exercise"] for row in rows} <= report, name


def _git(*args, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *map(str, args)], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_make_publish_pushes_the_site_as_gh_pages_and_keeps_its_history(site, tmp_path):
    """`make publish` as README's publishing part has an instructor run it, from a checkout whose remote is a real
    git repository: the built site becomes its gh-pages branch, with .nojekyll (GitHub Pages' Jekyll would hide
    Sphinx's _static), and a second publication is a commit on top of the first."""
    remote = tmp_path / "remote.git"
    _git("init", "-q", "--bare", remote)
    identity = {"GIT_AUTHOR_NAME": "An Instructor", "GIT_AUTHOR_EMAIL": "instructor@example.edu"}
    env = {**os.environ, **identity, "GIT_COMMITTER_NAME": "An Instructor", "GIT_COMMITTER_EMAIL": "i@example.edu"}

    def checkout(name: str) -> Path:
        """A checkout of the course whose origin is the remote (set up: its .venv)."""
        path = tmp_path / name
        _git("init", "-q", path)
        (path / ".venv").symlink_to(ROOT / ".venv")
        _git("remote", "add", "origin", remote, cwd=path)
        _git("commit", "-q", "--allow-empty", "-m", "the course", cwd=path)
        return path

    def publish(out: Path, where: Path) -> subprocess.CompletedProcess:
        command = ["make", "-s", "-f", str(ROOT / "Makefile"), "publish", f"OUT={out}"]
        return subprocess.run(command, cwd=where, env=env, capture_output=True, text=True)

    mine = checkout("checkout")
    built_from = _git("rev-parse", "--short", "HEAD", cwd=mine).strip()
    first = publish(site, mine)
    assert first.returncode == 0, first.stdout + first.stderr
    published = set(_git("ls-tree", "-r", "--name-only", "gh-pages", cwd=remote).split())
    built = {str(path.relative_to(site)) for path in site.rglob("*") if path.is_file()}
    assert published == built | {".nojekyll"}, published ^ (built | {".nojekyll"})
    assert built_from in _git("log", "-1", "--format=%s", "gh-pages", cwd=remote)

    again = tmp_path / "again"
    shutil.copytree(site, again)
    (again / "index.html").write_text((site / "index.html").read_text() + "<!-- published again -->")
    second = publish(again, checkout("another"))  # a fresh checkout: the branch is fetched first
    assert second.returncode == 0, second.stdout + second.stderr
    history = _git("rev-list", "gh-pages", cwd=remote).split()
    assert len(history) == 2, f"a second publication, from another checkout, is a commit on top of the first: {history}"
    assert _git("show", "gh-pages:index.html", cwd=remote).endswith("<!-- published again -->")

    nothing = publish(tmp_path / "not-built", mine)
    assert nothing.returncode != 0
    said = f"make publish: no site in {tmp_path / 'not-built'}: run make docs first"
    assert nothing.stderr.splitlines()[0] == said, nothing.stderr  # (then make's own "Error 2" line)
    assert _git("rev-list", "gh-pages", cwd=remote).split() == history, "nothing published without a site"


def test_the_scan_finds_an_answer_put_in_a_page(tmp_path):
    """The scan reads a page's text through its markup: a solution cell rendered as the site renders code (each
    word in a span of its own) is found."""
    solution = next(
        cell
        for cell in nbformat.read(str(ROOT / "solutions" / f"{NOTEBOOK}.ipynb"), as_version=4).cells
        if "### BEGIN SOLUTION" in cell.source
    )
    spans = "\n".join(
        "".join(f'<span class="n">{html.escape(word)}</span> ' for word in line.split(" "))
        for line in solution.source.splitlines()
    )
    page = tmp_path / "page.html"
    page.write_text(f"<html><body><div class='cell'><pre>{spans}</pre></div></body></html>")
    assert answers_in({"page.html": lines_of(page)}, public_lines())


def test_start_page_says_where_to_run_and_its_links_launch_notebook_00(served, chromium):
    from playwright.sync_api import expect

    context, opened, _ = _context(chromium)
    try:
        page = patient(context.new_page())
        page.goto(f"{served}/index.html")
        expect(page.locator("article h1")).to_have_text(re.compile("Distributed Deep Learning on HPC"))
        expect(page.get_by_role("heading", name="Where to run it")).to_be_visible()
        found = contents.notebooks()
        rows = page.locator("table tbody tr")
        expect(rows).to_have_count(len(found))
        needs = contents.readme_columns((ROOT / "README.md").read_text())[FIRST][1]
        expect(rows.first).to_contain_text(f"{found[0].title}")
        expect(rows.first).to_contain_text(f"{found[0].minutes} min")
        expect(rows.first).to_contain_text(needs)
        for name, address in (("Launch on Binder", binder(FIRST)), ("Open on your JupyterHub", nbgitpuller(FIRST))):
            page.get_by_role("link", name=name).click()
            expect(page).to_have_url(address)
            expect(page.locator("body")).to_have_text("launch stub")
            page.go_back()
            expect(page.get_by_role("heading", name="Where to run it")).to_be_visible()
        assert opened == [binder(FIRST), nbgitpuller(FIRST)]
        expect(page.get_by_text(f"~/ddl-hpc/notebooks/{FIRST}.ipynb")).to_be_visible()  # the Open OnDemand note
        expect(page.get_by_text(f"git clone --branch student {REPOSITORY} ddl-hpc")).to_be_visible()
    finally:
        context.close()


def test_a_notebook_page_shows_its_objectives_time_needs_and_launches(served, chromium):
    from playwright.sync_api import expect

    notebook = contents.read(ROOT / "notebooks" / f"{NOTEBOOK}.ipynb")
    needs = contents.readme_columns((ROOT / "README.md").read_text())[NOTEBOOK][1]
    context, opened, _ = _context(chromium)
    try:
        page = patient(context.new_page())
        page.goto(f"{served}/index.html")
        page.locator("table").get_by_role("link", name=notebook.title).click()  # as a reader gets there
        expect(page).to_have_url(f"{served}/notebooks/{NOTEBOOK}.html")
        expect(page.locator("article h1")).to_have_text(re.compile(re.escape(f"{notebook.number} - {notebook.title}")))
        main = page.locator("article")
        expect(main.get_by_text("Learning objectives")).to_be_visible()
        expect(main.locator("p").filter(has_text="Estimated time:")).to_contain_text(f"{notebook.minutes} minutes")
        box = main.locator(".admonition").filter(has_text="Run this notebook")
        expect(box).to_contain_text(f"Needs: {needs}.")
        expect(box).to_contain_text(f"~/ddl-hpc/notebooks/{NOTEBOOK}.ipynb")
        # the box's links, then the theme's launch menu (the rocket), which opens them in a new tab
        for name, address in (
            ("Launch on Binder", binder(NOTEBOOK)),
            ("Open on your JupyterHub", nbgitpuller(NOTEBOOK)),
        ):
            box.get_by_role("link", name=name).click()
            expect(page).to_have_url(address)
            page.go_back()
            expect(box).to_be_visible()
        for name, address in (("Binder", binder(NOTEBOOK)), ("JupyterHub", nbgitpuller(NOTEBOOK))):
            page.get_by_role("button", name="Launch interactive content").click()
            with context.expect_page() as tab:
                page.locator(".dropdown-launch-buttons").get_by_role("link", name=name).click()
            expect(tab.value).to_have_url(address)
            tab.value.close()
        assert opened == [binder(NOTEBOOK), nbgitpuller(NOTEBOOK)] * 2
        code = main.locator("div.cell pre")  # the cells, as released: stubs to fill in, not run here
        expect(code.filter(has_text="PROFILE = profile.name()").first).to_be_visible()
        assert main.locator(".cell_output").count() == 0
    finally:
        context.close()


MATH_NOTEBOOK = "02_sgd"  # a notebook page with formulas


def test_the_site_serves_its_own_mathjax(site):
    """A page with formulas loads MathJax from the site itself (_static/mathjax/, from its npm package), and no page
    loads a script from elsewhere."""
    with_math = []
    for page in sorted(site.rglob("*.html")):
        sources = re.findall(r'<script[^>]* src="([^"]+)"', page.read_text("utf-8"))
        assert not [s for s in sources if "://" in s or s.startswith("//")], (page, sources)
        mathjax = [s.split("?")[0] for s in sources if "mathjax" in s.lower()]
        assert all(s.endswith("_static/mathjax/tex-mml-chtml.js") for s in mathjax), (page, mathjax)
        assert all((page.parent / s).resolve().is_file() for s in mathjax), (page, mathjax)
        with_math += [page.relative_to(site).as_posix()] if mathjax else []
    assert f"notebooks/{MATH_NOTEBOOK}.html" in with_math, with_math
    assert 'class="math' in (site / "notebooks" / f"{MATH_NOTEBOOK}.html").read_text("utf-8")


def test_a_formula_is_typeset_with_the_network_off(served, chromium):
    """MathJax typesets a notebook page's formulas in Chromium, where every address outside the loopback fails."""
    from playwright.sync_api import expect

    context, _, blocked = _context(chromium)
    try:
        page = patient(context.new_page())
        page.goto(f"{served}/notebooks/{MATH_NOTEBOOK}.html")
        expect(page.locator("article mjx-container").first).to_be_visible()
        assert page.locator("article .math").count() == page.locator("article .math mjx-container").count()
        assert not blocked, blocked
    finally:
        context.close()


def test_without_a_repository_the_pages_leave_its_links_out(monkeypatch):
    """A site built with no DOCS_REPOSITORY_URL: no Binder or hub link, no launch button and no placeholder
    repository (github.com/OWNER/REPOSITORY) in what its pages are made from; the box says whom to ask."""
    for name in ("DOCS_REPOSITORY_URL", "DOCS_BRANCH", "DOCS_BINDER_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCS_HUB_URL", HUB)  # a hub, but nothing for nbgitpuller to pull
    text = start_page(contents.notebooks(), launch())
    for said in ("OWNER", "REPOSITORY", "mybinder.org", "git-pull", "git clone"):
        assert said not in text, said
    assert "get the course's `student` branch from your instructor" in text
    theme = runpy.run_path(str(ROOT / "website" / "conf.py"))["html_theme_options"]
    assert theme["launch_buttons"] == {} and not theme["use_repository_button"], theme


def test_the_instructor_guide_and_the_command_reference_are_pages(served, chromium):
    from playwright.sync_api import expect

    order = guide_pages((GUIDE / "index.md").read_text())
    source = re.sub(r"^```.*?^```", "", (GUIDE / f"{GUIDE_PAGE}.md").read_text(), flags=re.M | re.S)
    title = re.search(r"^# (.+)$", source, re.M).group(1)  # code blocks' comments left out
    sections = re.findall(r"^## (.+)$", source, re.M)
    context, _, _ = _context(chromium)
    try:
        page = patient(context.new_page())
        page.goto(f"{served}/index.html")
        page.locator(".bd-sidebar-primary").get_by_role("link", name="Instructor guide").click()
        expect(page).to_have_url(f"{served}/instructors/index.html")
        expect(page.locator("article h1")).to_have_text(re.compile("Instructor guide"))
        listed = page.locator("article a.reference.internal").evaluate_all("links => links.map(a => a.href)")
        assert [link.rsplit("/", 1)[-1].removesuffix(".html") for link in listed] == order, listed  # in order
        page.locator("article").get_by_role("link", name=title).click()
        expect(page).to_have_url(f"{served}/instructors/{GUIDE_PAGE}.html")
        expect(page.locator("article h1")).to_have_text(re.compile(re.escape(title)))
        expect(page.locator("article h2")).to_have_count(len(sections))  # the whole page, every section
        nested = page.locator(".bd-sidebar-primary").get_by_role("link", name=title)
        expect(nested).to_have_count(1)  # the sidebar lists the guide's pages too
        page.locator(".bd-sidebar-primary").get_by_role("link", name="Command line").click()
        main = page.locator("article")
        expect(main.get_by_text("usage: python -m course grade").first).to_be_visible()
        expect(main.get_by_text("usage: python -m course job wait").first).to_be_visible()
    finally:
        context.close()


def _context(chromium):
    """A browser context where every address outside the loopback is answered by a stub (the test runs offline and
    checks where the launch links go, not Binder or a hub); the list of those addresses, in the order opened, and of
    what else the pages asked of the network (refused)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    opened: list[str] = []
    blocked: list[str] = []

    def route(request_route) -> None:
        url = request_route.request.url
        if url.startswith("http://127.0.0.1:"):
            request_route.continue_()
        elif request_route.request.resource_type == "document":
            opened.append(url)
            request_route.fulfill(status=200, content_type="text/html", body="launch stub")
        else:  # a script, font or style from elsewhere: the site must not need one
            blocked.append(url)
            request_route.abort()

    context.route("**/*", route)
    return context, opened, blocked
