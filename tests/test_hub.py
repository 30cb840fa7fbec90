"""The course on a real JupyterHub, as deploy/jupyterhub/ and scripts/setup-hub.sh set it up: configurable-http-proxy
on 127.0.0.1, PAM login with real Unix accounts (three learners, one instructor), LocalProcessSpawner, and headless
Chromium driving the hub's pages as the class would.

One hub serves every test here (session fixture); the last two start a second one for the same class, configured as
deploy/jupyterhub/jupyterhub_config_slurm.py (each server a Slurm job on the two-node virtual cluster). The accounts
and groups are made for the test and removed after; the exchange and the hubs' state live in a temporary folder; the
shared environment is the one `make test` builds (/opt/ddl-hpc, or HUB_PREFIX), brought up to date by running
scripts/setup-hub.sh, which is under test too.
"""

from __future__ import annotations

import html
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil
import pytest

from course import lab
from tests.conftest import ROOT, wait_until
from tests.grading_support import WRONG, course_answers, graded_cells
from tests.jupyterlab_ui import CHROMIUM, add_cell_and_run, patient, run_cell

pytestmark = pytest.mark.slow
PREFIX = Path(os.environ.get("HUB_PREFIX", "/opt/ddl-hpc"))
LEARNERS = ("ddlhub-ada", "ddlhub-ben", "ddlhub-cy")
FULL_NAMES = {"ddlhub-ada": "Ada Lovelace"}  # the others have none: Formgrader shows their account names
INSTRUCTOR = "ddlhub-teach"
SECOND_INSTRUCTOR = "ddlhub-teach2"  # a site's second instructor, made and removed by one test
GROUPS = {"learners": "ddlhub-learners", "instructors": "ddlhub-instructors"}
PASSWORD = "Course-hub-test-1"
ASSIGNMENT, NB = "02-sgd", "02_sgd"
NOTEBOOK_00 = "ddl-hpc/notebooks/00_environment_and_cluster.ipynb"
ARTIFACTS = ROOT / "test-artifacts"
GUIDE = ROOT / "docs" / "guide" / "02-deploy.md"  # the hub, the Slurm-spawned JupyterLab and Open OnDemand
SECTION = "## Deploying on JupyterHub"
# The guide's names, and the test's (a site's real groups are never touched)
NAMES = {
    "ddl-hpc-learners": GROUPS["learners"],
    "ddl-hpc-instructors": GROUPS["instructors"],
    "/opt/ddl-hpc": str(PREFIX),
}


def guide_blocks() -> list[list[str]]:
    """The command lines of each ```bash block in the guide's hub section (comments and blank lines dropped)."""
    blocks, inside, section = [], False, False
    for line in GUIDE.read_text().splitlines():
        if not inside and line.startswith("## "):
            section = line.strip() == SECTION
        elif section and line.strip().startswith("```bash"):
            inside, lines = True, []
        elif inside and line.strip() == "```":
            inside = False
            blocks.append(lines)
        elif inside:
            lines.append(line.rstrip())
    return blocks


def as_here(line: str) -> str:
    """A guide line with the test's names, and without sudo (the test runs as root)."""
    line = line.split("  #", 1)[0].strip()
    for given, here in NAMES.items():
        line = line.replace(given, here)
    return re.sub(r"(^|&& )sudo ", r"\1", line)


def _missing() -> str:
    if os.geteuid() != 0:
        return "needs root: the hub logs real Unix accounts in and starts their servers as them (make test as root)"
    for tool in ("useradd", "chpasswd", "groupadd", "userdel"):
        if shutil.which(tool) is None:
            return f"needs {tool} (Debian's passwd package) to make the class's accounts"
    if not os.path.exists(CHROMIUM):
        return "Chromium is not installed (make test installs it as root: apt-get install chromium)"
    if shutil.which("configurable-http-proxy") is None:
        return "configurable-http-proxy is not installed (make test installs it: bash scripts/setup-proxy.sh)"
    if not Path("/usr/bin/python3.11").exists():
        return "the hub's environment needs Debian's python3.11 (make test installs python3.11-venv)"
    return ""


@dataclass
class Hub:
    url: str
    base: Path
    exchange: Path
    state: Path
    process: subprocess.Popen
    log: Path
    command: list[str] = field(default_factory=list)  # how it was started: a restart starts it the same way
    env: dict = field(default_factory=dict)
    checkout: Path = field(init=False)  # the instructor's checkout, in their home
    grading: Path = field(init=False)  # the instructor's nbgrader course directory

    def __post_init__(self) -> None:
        home = Path(pwd.getpwnam(INSTRUCTOR).pw_dir)
        self.checkout, self.grading = home / "ddl-hpc-course", home / "ddl-hpc-grading"


def home(user: str) -> Path:
    return Path(pwd.getpwnam(user).pw_dir)


def run_as(user: str, argv: list[str], cwd: Path, env: dict | None = None, check: bool = True, input: str = ""):
    """ARGV as the Unix USER (no other groups), with the hub environment's bin on PATH, as their terminal has it."""
    entry = pwd.getpwnam(user)
    environment = {
        "PATH": f"{PREFIX / 'bin'}:/usr/bin:/bin",
        "HOME": entry.pw_dir,
        "USER": user,
        "LOGNAME": user,
        "LANG": "C.UTF-8",
        "COURSE_PROFILE": "quick",
        "COURSE_OFFLINE": "1",
        **(env or {}),
    }
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=environment,
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=[],
        input=input,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if check:
        assert done.returncode == 0, f"{user}: {' '.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _left_by_an_interrupted_run() -> list[tuple[str, str]]:
    """The test's own accounts and groups (every name starts with ddlhub-) that a killed earlier run left behind."""
    users = [("user", u) for u in (*LEARNERS, INSTRUCTOR, SECOND_INSTRUCTOR) if _exists("passwd", u)]
    groups = [("group", g) for g in GROUPS.values() if _exists("group", g)]
    return groups + users  # _remove goes backwards: the users (and their processes) first


def _exists(database: str, name: str) -> bool:
    return subprocess.run(["getent", database, name], capture_output=True).returncode == 0


def _accounts(created: list[tuple[str, str]]) -> None:
    """The class's Unix accounts with a password (the guide's block then puts them in the two groups)."""
    _remove(_left_by_an_interrupted_run())  # else useradd refuses: "user 'ddlhub-ada' already exists"
    for user in (*LEARNERS, INSTRUCTOR):
        name = ["-c", FULL_NAMES[user]] if user in FULL_NAMES else []
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", *name, user], check=True, capture_output=True)
        created.append(("user", user))
    subprocess.run(
        ["chpasswd"],
        input="".join(f"{u}:{PASSWORD}\n" for u in (*LEARNERS, INSTRUCTOR)),
        text=True,
        check=True,
        capture_output=True,
    )


def _set_up_as_the_guide_says(exchange: Path, created: list[tuple[str, str]]) -> list[str]:
    """The guide's first block, line by line, as root; returns the command that starts the hub (its last line)."""
    lines = [as_here(line) for line in guide_blocks()[0] if line.strip() and not line.lstrip().startswith("#")]
    *steps, start = lines
    assert "jupyterhub -f deploy/jupyterhub/jupyterhub_config.py" in start, start
    created += [("group", g) for g in GROUPS.values() if not _exists("group", g)]
    env = {**os.environ, "HUB_PREFIX": str(PREFIX), "COURSE_NBGRADER_EXCHANGE": str(exchange)}
    for step in steps:
        users = LEARNERS if "LEARNER" in step else [INSTRUCTOR] if "INSTRUCTOR" in step else [""]
        for user in users:
            command = step.replace("LEARNER", user).replace("INSTRUCTOR", user)
            started = time.perf_counter()
            done = subprocess.run(
                ["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600
            )
            assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            print(f"{command}: {time.perf_counter() - started:.0f} s")
    return start.split()


def _remove(created: list[tuple[str, str]]) -> None:
    """Stop what the test accounts still run (each process by its id), then remove the accounts and groups."""
    users = {name for kind, name in created if kind == "user"}
    left = [p for p in psutil.process_iter(["username"]) if p.info["username"] in users]
    for process in left:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=20)
    for kind, name in reversed(created):
        if kind == "user":
            subprocess.run(["userdel", "-r", name], capture_output=True)
        else:
            subprocess.run(["groupdel", name], capture_output=True)


def _start_hub(base: Path, exchange: Path, command: list[str], extra: dict | None = None, first: int = 18600) -> Hub:
    """COMMAND (a hub) with the test's names and ports, and EXTRA in its environment; once its pages answer."""
    port = lab.free_port("127.0.0.1", first)
    api, proxy_api = lab.free_port("127.0.0.1", port + 1), lab.free_port("127.0.0.1", port + 11)
    state = base / "state"
    env = {
        "PATH": f"{PREFIX / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "COURSE_HUB_PORT": str(port),
        "COURSE_HUB_API_PORT": str(api),
        "COURSE_HUB_PROXY_API_PORT": str(proxy_api),
        "COURSE_HUB_STATE": str(state),
        "COURSE_HUB_LEARNERS": GROUPS["learners"],
        "COURSE_HUB_INSTRUCTORS": GROUPS["instructors"],
        "COURSE_NBGRADER_EXCHANGE": str(exchange),
        "COURSE_PROFILE": "quick",
        "COURSE_OFFLINE": "1",
        **(extra or {}),
    }
    hub = Hub(f"http://127.0.0.1:{port}", base, exchange, state, None, base / "hub.log", command, env)
    return _launch(hub)


LAUNCHED: list[Hub] = []  # every hub this module started, for the test that must end them all


def _launch(hub: Hub) -> Hub:
    """Start HUB's command (again: its log goes on), once its pages answer."""
    LAUNCHED.append(hub)
    process = subprocess.Popen(
        hub.command,
        cwd=ROOT,
        env=hub.env,
        stdout=hub.log.open("a"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    hub.process = process
    for _ in range(120):
        try:
            with urllib.request.urlopen(f"{hub.url}/hub/health", timeout=5) as answer:
                if answer.status == 200:
                    return hub
        except OSError:
            pass
        if process.poll() is not None:
            break
        time.sleep(1)
    raise AssertionError(f"the hub did not answer:\n{hub.log.read_text()[-3000:]}")


def _stop_hub(hub: Hub, keep_servers: bool = False) -> None:
    """SIGTERM: JupyterHub stops its proxy and exits, leaving users' servers running (cleanup_servers = False);
    unless KEEP_SERVERS, the test then ends what the hub started (each process by its id). A hub already stopped
    (the guide's way, by the last test) is left as it is."""
    if hub.process.poll() is not None:
        return
    descendants = psutil.Process(hub.process.pid).children(recursive=True)
    hub.process.send_signal(signal.SIGTERM)
    try:
        hub.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        hub.process.kill()
        hub.process.wait()
    if not keep_servers:
        for process in descendants:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(descendants, timeout=30)


@pytest.fixture(scope="module")  # it ends with this module: its servers and pages do not outlive the tests
def hub():
    """The set-up run as `make setup HUB=1` runs it, the class's accounts, and a hub serving them."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="course-hub-"))
    base.chmod(0o755)  # the exchange inside must be reachable by every user
    exchange = base / "exchange"
    created: list[tuple[str, str]] = []
    running = None
    checkout_mode = stat.S_IMODE(ROOT.stat().st_mode)  # the guide's first line closes the site's checkout (ROOT)
    try:
        _accounts(created)
        command = _set_up_as_the_guide_says(exchange, created)
        running = _start_hub(base, exchange, command)
        yield running
    finally:
        if running is not None:
            _stop_hub(running)
            ARTIFACTS.mkdir(exist_ok=True)
            shutil.copy(running.log, ARTIFACTS / "jupyterhub.log")
        _remove(created)
        shutil.rmtree(base, ignore_errors=True)
        ROOT.chmod(checkout_mode)


@pytest.fixture(scope="module")
def browser(hub, chromium):
    """The run's Chromium, once the hub is up. The pages this module opened close with it: an open JupyterLab page
    keeps polling its server (four of them, with their servers, took half a core for the rest of a full run)."""
    yield chromium
    for context in chromium.contexts:
        context.close()


def log_in(browser, hub: Hub, user: str):
    """A fresh browser session logged in as USER through the hub's login page, on their spawned JupyterLab."""
    from playwright.sync_api import expect

    page = patient(browser.new_context(viewport={"width": 1400, "height": 1000}).new_page())
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", PASSWORD)
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf"/user/{user}/lab"), timeout=240_000)
    expect(page.locator(".jp-LabShell")).to_be_visible(timeout=180_000)
    return page


def nbgrader_menu(page) -> list[str]:
    """The items of JupyterLab's Nbgrader menu (empty without one)."""
    from playwright.sync_api import expect

    menu = page.locator(".lm-MenuBar-item").filter(has_text="Nbgrader").first
    expect(menu).to_be_visible(timeout=120_000)  # every account has one: the extension may still be loading
    menu.click()
    opened = page.locator(".lm-Menu")
    expect(opened).to_be_visible(timeout=60_000)
    items = opened.locator(".lm-Menu-itemLabel").all_inner_texts()
    menu.click()  # closed as it was opened: a key would go to whatever holds the focus
    expect(opened).to_have_count(0, timeout=60_000)
    return [item.strip() for item in items if item.strip()]


@pytest.fixture(scope="module")
def pages(hub, browser):
    """Every account logged in once (their servers spawned by the hub); the pages by user."""
    return {user: log_in(browser, hub, user) for user in (*LEARNERS, INSTRUCTOR)}


def test_each_login_spawns_a_server_with_the_student_copy(hub, pages):
    from playwright.sync_api import expect

    student = PREFIX / "share" / "ddl-hpc" / "student"
    for user in LEARNERS:
        page, folder = pages[user], home(user) / "ddl-hpc"
        expect(page.locator(".jp-DirListing-item").filter(has_text="ddl-hpc")).to_have_count(1, timeout=60_000)
        shipped = sorted(p.relative_to(student) for p in student.rglob("*.ipynb"))
        assert shipped and sorted(p.relative_to(folder) for p in folder.rglob("*.ipynb")) == shipped
        assert not (folder / "solutions").exists() and not (folder / "tests").exists()
        first = nbformat.read(str(folder / "notebooks" / f"{NB}.ipynb"), as_version=4).cells[0].source
        assert first.startswith("**Practice copy.**") and "Assignment List" in first, first
        owner = {pwd.getpwuid(p.stat().st_uid).pw_name for p in folder.rglob("*")}
        assert owner == {user}, f"{user}'s copy belongs to {owner}"
        assert stat.S_IMODE(home(user).stat().st_mode) == 0o700, f"{user}'s home is readable by others"
    ARTIFACTS.mkdir(exist_ok=True)
    pages[LEARNERS[0]].screenshot(path=str(ARTIFACTS / "hub-learner-lab.png"))


def test_a_second_start_never_overwrites_a_learners_work(hub, pages):
    """The spawn hook copies only what a learner lacks: an edited notebook stays as they left it."""
    from playwright.sync_api import expect

    user = LEARNERS[2]
    mine = home(user) / NOTEBOOK_00
    run_as(user, ["sh", "-c", f"printf ' ' >> {mine}"], home(user))
    edited = mine.read_text()
    gone = home(user) / "ddl-hpc" / "notebooks" / "01_task_graphs.ipynb"
    gone.unlink()
    page = pages[user]
    stop_from_home(page, hub)
    page.goto(f"{hub.url}/hub/spawn/{user}")  # what "Start My Server" opens
    page.wait_for_url(re.compile(rf"/user/{user}/lab"), timeout=240_000)
    expect(page.locator(".jp-LabShell")).to_be_visible(timeout=180_000)
    assert mine.read_text() == edited
    assert gone.exists(), "a notebook the learner lacked was not copied again"


def stop_from_home(page, hub: Hub) -> None:
    """Press "Stop My Server" on the hub's home page once its scripts have loaded (the button's handler is bound by
    them: a click before does nothing, and the button stayed for 120 s in a loaded full run), and wait until the
    page says the server stopped."""
    from playwright.sync_api import expect

    page.goto(f"{hub.url}/hub/home")
    page.wait_for_load_state("networkidle")  # the page's modules are in, so its buttons answer
    page.click("#stop")
    expect(page.locator("#stop")).to_be_hidden(timeout=120_000)


def _servers_of(user: str) -> list[psutil.Process]:
    """The JupyterLab server processes the Unix USER runs."""
    return [
        p
        for p in psutil.process_iter(["username", "cmdline"])
        if p.info["username"] == user and "jupyterhub-singleuser" in " ".join(p.info["cmdline"] or [])
    ]


def test_a_hub_restart_leaves_learners_servers_running(hub, pages):
    """The hub stopped and started again, as after a configuration change: a learner's server (and the kernel it
    runs) is the same process before and after, and answers through the restarted hub."""
    user, page = LEARNERS[2], pages[LEARNERS[2]]
    kernel = page.request.post(
        f"{hub.url}/user/{user}/api/kernels", headers=_xsrf(page, user), data={"name": "ddl-hpc"}
    )
    assert kernel.ok, kernel.status
    kernel_id = kernel.json()["id"]
    before = _server_and_kernel(user, kernel_id)  # not every child: a server runs short-lived helpers too
    assert len(before) == 2, f"{user}'s server and kernel {kernel_id}: {before}"
    _stop_hub(hub, keep_servers=True)
    _launch(hub)
    after = _server_and_kernel(user, kernel_id)
    assert before == after, f"the restart ended {user}'s server or kernel: {before} -> {after}"
    # the restarted hub gives the new proxy the server's route once it has found the server
    answer = wait_until(
        lambda: page.request.get(f"{hub.url}/user/{user}/api/kernels/{kernel_id}"), 300, f"{user}'s kernel's route"
    )
    assert answer.json()["name"] == "ddl-hpc", answer.json()
    for name, other in pages.items():  # every open JupyterLab lost its hub meanwhile: loaded again, as a learner would
        _reload_lab(hub, name, other)


def _reload_lab(hub: Hub, user: str, page) -> None:
    """USER's JupyterLab loaded again once the restarted hub routes to their server, with its Nbgrader menu."""
    from playwright.sync_api import expect

    wait_until(lambda: page.request.get(f"{hub.url}/user/{user}/api/status").ok, 300, f"{user}'s server's route")
    page.goto(f"{hub.url}/user/{user}/lab")
    expect(page.locator(".jp-LabShell")).to_be_visible(timeout=180_000)
    expect(page.locator(".lm-MenuBar-item").filter(has_text="Nbgrader").first).to_be_visible(timeout=120_000)


def _server_and_kernel(user: str, kernel_id: str) -> set[int]:
    """The pids of USER's server and of its kernel KERNEL_ID (named in the kernel's connection file)."""
    servers, kernels = _servers_of(user), []
    for process in (p for s in servers for p in s.children(True)):
        try:
            if any(kernel_id in part for part in process.cmdline()):
                kernels.append(process)
        except psutil.Error:  # a helper that ended meanwhile
            pass
    return {p.pid for p in servers + kernels}


def _xsrf(page, user: str) -> dict:
    """The header a JupyterLab page sends with a request that changes something (Jupyter Server's XSRF check)."""
    cookies = [c for c in page.context.cookies() if c["name"] == "_xsrf"]
    own = [c for c in cookies if c["path"].startswith(f"/user/{user}")] or cookies
    return {"X-XSRFToken": own[0]["value"] if own else ""}


def test_learners_get_assignments_and_only_instructors_formgrader(hub, pages):
    for user in LEARNERS:
        items = nbgrader_menu(pages[user])
        assert "Assignment List" in items, f"{user}'s Nbgrader menu: {items}"
        assert not any("Formgrader" in i or "Create" in i for i in items), f"{user} sees {items}"
    items = nbgrader_menu(pages[INSTRUCTOR])
    assert any("Formgrader" in i for i in items), f"the instructor's Nbgrader menu: {items}"


def test_jupyterlab_asks_no_news_question(hub, pages):
    page = pages[LEARNERS[0]]
    answer = page.request.get(
        f"{hub.url}/user/{LEARNERS[0]}/lab/api/settings/@jupyterlab/apputils-extension:notification"
    )
    assert answer.ok, answer.status
    found = answer.json()  # the defaults (with the site's overrides) and what the learner changed
    composite = {k: v.get("default") for k, v in found["schema"]["properties"].items()} | found["settings"]
    assert composite["fetchNews"] == "false" and composite["checkForUpdates"] is False, composite
    # one kernel to choose, and it is the default of a new notebook
    kernels = page.request.get(f"{hub.url}/user/{LEARNERS[0]}/api/kernelspecs").json()
    assert kernels["default"] == "ddl-hpc" and set(kernels["kernelspecs"]) == {"ddl-hpc"}, kernels


def test_a_terminal_finds_the_course_and_nbgrader(hub, pages):
    """A terminal opened in a learner's JupyterLab (a login shell, as under any spawner) has the course's tools."""
    from playwright.sync_api import expect

    user, page = LEARNERS[0], pages[LEARNERS[0]]
    answer = home(user) / "on-path.txt"
    page.goto(f"{hub.url}/user/{user}/lab")
    expect(page.locator(".jp-LabShell")).to_be_visible(timeout=120_000)
    page.locator(".lm-MenuBar-item").filter(has_text="File").first.click()
    page.locator(".lm-Menu-item").filter(has_text="New").first.hover()
    page.locator(".lm-Menu-itemLabel").filter(has_text=re.compile("^Terminal$")).first.click()
    terminal = page.locator(".jp-Terminal")
    expect(terminal.first).to_be_visible(timeout=60_000)
    terminal.first.click()
    page.keyboard.type(f"command -v course nbgrader horovodrun > {answer}\n")
    wait_until(
        lambda: answer.exists() and len(answer.read_text().splitlines()) == 3, 300, f"{answer} from the terminal"
    )
    found = answer.read_text().split()
    assert found == [str(PREFIX / "bin" / n) for n in ("course", "nbgrader", "horovodrun")], found


def test_two_learners_run_notebook_00_on_their_own_clusters(hub, pages):
    """Two learners run notebook 00's first cells at once: each gets hello lines from their own two engines, and
    each engine cluster runs as that learner."""
    from playwright.sync_api import expect

    pair = LEARNERS[:2]
    for user in pair:
        page = pages[user]
        page.goto(f"{hub.url}/user/{user}/lab/tree/{NOTEBOOK_00}")
        expect(page.locator(".jp-KernelName").first).to_have_text("Python (DDL on HPC)", timeout=120_000)
        expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=120_000)
    for user in pair:  # both start their clusters before either waits
        for text in ("PROFILE = profile.name()", "cluster = course.cluster.start("):
            run_cell(pages[user], text)
    for user in pair:
        hello = run_cell(pages[user], 'print(f"hello from process')
        expect(hello.locator(".jp-OutputArea-output").filter(has_text="hello from process")).to_have_count(
            2, timeout=300_000
        )
    engines = {user: _engines_of(user) for user in pair}
    assert all(len(pids) >= 2 for pids in engines.values()), engines
    assert not set(engines[pair[0]]) & set(engines[pair[1]])
    for user in pair:  # nothing of a learner's session listens beyond the loopback, their mpiexec included
        mine = [p for p in psutil.process_iter(["username", "name"]) if p.info["username"] == user]
        assert any(p.info["name"] == "mpiexec" for p in mine), [p.info["name"] for p in mine]
        assert not _off_loopback({p.pid for p in mine}), (
            f"{user}'s processes listen: {_off_loopback({p.pid for p in mine})}"
        )
    pages[pair[0]].screenshot(path=str(ARTIFACTS / "hub-notebook-00.png"))
    for user in pair:
        page = pages[user]
        add_cell_and_run(page, "cluster.stop(); print('stopped')")
        expect(page.locator(".jp-OutputArea-output").filter(has_text="stopped")).to_have_count(1, timeout=120_000)


def _off_loopback(pids: set[int]) -> list[str]:
    """`ss -ltnp`'s lines for the processes PIDS that listen at an address other than 127.0.0.1 or ::1."""
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    return [
        line
        for line in lines
        if line.split()[3].rsplit(":", 1)[0].strip("[]") not in ("127.0.0.1", "::1")
        and {int(pid) for pid in re.findall(r"pid=(\d+),", line)} & pids
    ]


def _engines_of(user: str) -> list[int]:
    """The ipyparallel engine processes the Unix USER runs."""
    found = []
    for process in psutil.process_iter(["username", "cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if process.info["username"] == user and "ipyparallel" in line and "engine" in line:
            found.append(process.pid)
    return found


# --- nbgrader's exchange with the whole class ------------------------------------------------------------------


def _answers(source: Path) -> dict[str, str]:
    return {
        c.metadata.nbgrader["grade_id"]: c.source
        for c in nbformat.read(str(source), as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }


def _answer(user: str, answers: dict[str, str]) -> None:
    """Fill the learner's fetched notebook with ANSWERS, written as the learner."""
    path = home(user) / ASSIGNMENT / f"{NB}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    run_as(user, ["sh", "-c", f"cat > {path}"], home(user), input=nbformat.writes(nb))


@pytest.fixture(scope="module")
def graded(hub, pages):
    """The instructor releases 02, every learner fetches and submits (one through the Assignments tab), the
    instructor collects, autogrades, exports and releases feedback from a read-only checkout, every learner fetches
    their feedback. Returns the results of the steps that tests look at."""
    from playwright.sync_api import expect

    teacher = INSTRUCTOR
    learn = {"COURSE_NBGRADER_EXCHANGE": str(hub.exchange)}  # what the spawner gives every server and terminal
    teach = {  # and instructors
        **learn,
        "COURSE_NBGRADER_ROOT": str(hub.grading),
        "JUPYTER_CONFIG_PATH": str(PREFIX / "etc" / "ddl-hpc-instructors"),
    }
    # The instructor's checkout (what grading needs of it), theirs alone, as the guide asks.
    hub.checkout.mkdir()
    shutil.copytree(ROOT / "solutions", hub.checkout / "solutions")
    shutil.copy(ROOT / "nbgrader_config.py", hub.checkout / "nbgrader_config.py")
    subprocess.run(["chown", "-R", f"{teacher}:{teacher}", str(hub.checkout)], check=True)
    before_learners, after_learners = _instructor_steps()
    doctor = run_as(teacher, ["bash", "-c", before_learners], home(teacher), teach)
    subprocess.run(["chmod", "-R", "a-w", str(hub.checkout)], check=True)  # read-only from here on
    before = sorted(p.relative_to(hub.checkout) for p in hub.checkout.rglob("*"))

    # One learner through the Assignments tab: fetch, then (after answering) submit.
    first, page = LEARNERS[0], pages[LEARNERS[0]]
    released, fetched = _assignment_list(page, hub, first)
    expect(released.get_by_text(ASSIGNMENT)).to_be_visible(timeout=120_000)
    released.get_by_role("button", name="Fetch").click()
    expect(fetched.get_by_text(ASSIGNMENT)).to_be_visible(timeout=120_000)
    for user in LEARNERS[1:]:
        run_as(user, ["nbgrader", "fetch_assignment", ASSIGNMENT], home(user), learn)
    solutions = _answers(ROOT / "solutions" / f"{NB}.ipynb")
    wrong = next(a for a in json.loads((WRONG / f"{NB}.json").read_text()) if "ex2-answer" in a)
    _answer(LEARNERS[0], solutions)
    _answer(LEARNERS[1], {**solutions, "ex2-answer": wrong["ex2-answer"]})
    _answer(LEARNERS[2], solutions)
    # Too much in the assignment's folder (a sparse file counts at its full size): refused in one line.
    big = home(first) / ASSIGNMENT / "checkpoint.bin"
    run_as(first, ["truncate", "-s", "101000000", str(big)], home(first))
    fetched.get_by_role("button", name="Submit").first.click()
    message = page.locator("#submission-message")  # the Assignment List's "Invalid Submission" dialog
    expect(message).to_contain_text("is not submitted", timeout=120_000)
    refusal = message.inner_text()
    # closed with its own button: Escape reaches a JupyterLab dialog only while it holds the focus
    page.locator(".jp-Dialog").filter(has=message).locator("button.jp-mod-accept").click()
    expect(message).to_be_hidden(timeout=60_000)
    big.unlink()
    released, fetched = _assignment_list(page, hub, first)
    fetched.get_by_role("button", name="Submit").first.click()
    expect(page.locator("#submitted_assignments_list").get_by_text(ASSIGNMENT)).to_be_visible(timeout=120_000)
    for user in LEARNERS[1:]:
        run_as(user, ["nbgrader", "submit", ASSIGNMENT], home(user), learn)

    inbound = hub.exchange / "ddl-hpc" / "inbound"
    peeking = {
        "list inbound": run_as(LEARNERS[1], ["ls", str(inbound)], home(LEARNERS[1]), check=False),
        "read ada's home": run_as(LEARNERS[1], ["ls", str(home(LEARNERS[0]))], home(LEARNERS[1]), check=False),
    }
    run_as(teacher, ["bash", "-c", after_learners], hub.checkout, teach)  # the same terminal: still in the checkout
    feedback = {}
    for user in LEARNERS:
        run_as(user, ["nbgrader", "fetch_feedback", ASSIGNMENT], home(user), learn)
        feedback[user] = sorted((home(user) / ASSIGNMENT / "feedback").rglob("*.html"))
    peeking["ada's feedback"] = run_as(
        LEARNERS[1],
        ["sh", "-c", f"cat {home(LEARNERS[0])}/{ASSIGNMENT}/feedback/*/*.html"],
        home(LEARNERS[1]),
        check=False,
    )
    after = sorted(p.relative_to(hub.checkout) for p in hub.checkout.rglob("*"))
    header = nbformat.read(str(home(LEARNERS[1]) / ASSIGNMENT / f"{NB}.ipynb"), as_version=4).cells[0].source
    return {
        "peeking": peeking,
        "feedback": feedback,
        "checkout": (before, after),
        "doctor": doctor.stdout,
        "refusal": refusal,
        "header": header,
    }


def _assignment_list(page, hub: Hub, user: str):
    """JupyterLab's Nbgrader > Assignment List, opened afresh on USER's page: its released and fetched lists."""
    from playwright.sync_api import expect

    page.goto(f"{hub.url}/user/{user}/lab")
    expect(page.locator(".jp-LabShell")).to_be_visible(timeout=120_000)
    page.locator(".lm-MenuBar-item").filter(has_text="Nbgrader").first.click()
    page.locator(".lm-Menu-itemLabel").filter(has_text="Assignment List").first.click()
    return page.locator("#released_assignments_list"), page.locator("#fetched_assignments_list")


def test_learners_are_told_which_copy_is_graded_and_why_a_submit_was_refused(hub, graded):
    """The fetched notebook opens with the header saying it is the copy to submit; a submission too large for the
    exchange showed one line in the Assignment List, not nbgrader's traceback."""
    assert graded["header"].startswith("**Your assignment copy.**") and "Submit" in graded["header"], graded["header"]
    refusal = graded["refusal"]
    assert "Traceback" not in refusal and re.search(r"holds 101 MB, more than the 100 MB", refusal), refusal


def _instructor_steps() -> tuple[str, str]:
    """The guide's instructor block as two scripts: before the learners submit, and after."""
    parts, current = [], []
    for line in guide_blocks()[1]:
        if line.lstrip().startswith("#   learners"):
            parts.append(current)
            current = []
        elif line.strip():
            current.append(as_here(line))
    assert len(parts) == 2 and not current, parts
    return tuple("set -e\n" + "\n".join(lines) for lines in parts)


def test_every_learner_submits_and_gets_only_their_own_feedback(hub, graded):
    hidden = hidden_lines()
    for user in LEARNERS:
        files = graded["feedback"][user]
        assert len(files) == 1, f"{user} fetched {files}"
        own = hub.grading / "feedback" / user / ASSIGNMENT / f"{NB}.html"
        assert files[0].read_text() == own.read_text(), f"{user} fetched feedback that is not theirs"
        text = visible_text(own.read_text())
        assert "ex2-check" in text, f"{own} does not look like feedback on {NB}"
        shown = [line for line in hidden if " ".join(line.split()) in text]
        assert not shown, f"{user}'s feedback shows hidden tests: {shown[:3]}"
    for what, done in graded["peeking"].items():
        assert done.returncode != 0 and "Permission denied" in done.stderr, f"ben could {what}: {done.stdout[:300]}"


def test_the_instructor_grades_from_a_read_only_checkout(hub, graded):
    import csv

    before, after = graded["checkout"]
    assert before == after, "grading wrote into the checkout"
    with open(hub.grading / "grades.csv", newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle) if r["assignment"] == ASSIGNMENT}
    assert set(rows) == set(LEARNERS), rows
    scores = {user: float(rows[user]["score"]) for user in LEARNERS}
    top = float(rows[LEARNERS[0]]["max_score"])
    assert scores[LEARNERS[0]] == scores[LEARNERS[2]] == top > scores[LEARNERS[1]], scores


def test_autograde_takes_points_only_where_the_answer_is_wrong(hub, graded):
    """Per cell, in nbgrader's gradebook: ben's ex2 answer (a plain mean) fails its hidden test and scores zero;
    his other answers, the solution's, keep their points, as every cell of ada's and cy's does."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{hub.grading / 'gradebook.db'}", "ddl-hpc") as gradebook:
        scores = {
            user: {
                g.name: (g.score, g.max_score) for g in gradebook.find_submission_notebook(NB, ASSIGNMENT, user).grades
            }
            for user in LEARNERS
        }
    checks = set(graded_cells(ROOT / "solutions" / f"{NB}.ipynb"))
    for user in LEARNERS:
        assert set(scores[user]) == checks, scores[user]
        full = {cell for cell, (score, top) in scores[user].items() if score == top}
        assert full == (checks - {"ex2-check"} if user == LEARNERS[1] else checks), (user, scores[user])
    assert scores[LEARNERS[1]]["ex2-check"][0] == 0, scores[LEARNERS[1]]


def test_formgrader_shows_the_class(hub, pages, graded):
    from playwright.sync_api import expect

    page = pages[INSTRUCTOR]
    page.goto(f"{hub.url}/user/{INSTRUCTOR}/formgrader/gradebook/{ASSIGNMENT}/{NB}")
    points = graded_cells(ROOT / "solutions" / f"{NB}.ipynb")
    top = sum(points.values())
    rows = page.locator("table tbody tr")
    expect(rows.filter(has_text=f"/ {top:g}")).to_have_count(3, timeout=120_000)
    page.get_by_text("Show All Names").click()  # Formgrader hides learners' names at first
    page.screenshot(path=str(ARTIFACTS / "hub-formgrader.png"), full_page=True)
    shown = {user: "Lovelace, Ada" if user in FULL_NAMES else user for user in LEARNERS}  # from their accounts
    scores = {}
    for user in LEARNERS:
        row = rows.filter(has_text=shown[user])
        expect(row).to_have_count(1, timeout=120_000)
        found = re.search(r"(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)", row.first.inner_text())
        assert found, f"no score in Formgrader's row for {user}: {row.first.inner_text()!r}"
        scores[user] = (float(found.group(1)), float(found.group(2)))
    # ben's ex2 fails a hidden test; the others answered as the solution does
    expected = {LEARNERS[0]: (top, top), LEARNERS[1]: (top - points["ex2-check"], top), LEARNERS[2]: (top, top)}
    assert scores == expected, scores
    # Manage Submissions lists each learner as "last, first": from their account, never "None, None"
    page.goto(f"{hub.url}/user/{INSTRUCTOR}/formgrader/manage_submissions/{ASSIGNMENT}")
    table = page.locator("table tbody")
    expect(table.locator("tr")).to_have_count(3, timeout=120_000)
    expect(table).to_contain_text("Lovelace, Ada", timeout=60_000)
    assert "None" not in table.inner_text(), table.inner_text()


# --- what a learner can read ------------------------------------------------------------------------------------

SCAN = r"""
import json, os, sys
patterns = set(json.loads(sys.stdin.read()))
markers = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS")
read, found = 0, []
for root in sys.argv[1:]:
    for folder, dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path) or os.stat(path).st_uid == os.getuid():
                continue  # a learner's own work holds their own answers
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            read += 1
            if b"\0" in data[:8192]:
                continue  # a library or data, not text
            text = data.decode("utf-8", "replace")
            if name.endswith(".ipynb"):
                try:
                    cells = json.loads(text).get("cells", [])
                    text = "\n".join("".join(c.get("source", "")) for c in cells)
                except (ValueError, AttributeError):
                    pass
                if '"ddl-hpc"' in data.decode("utf-8", "replace") and any(m in text for m in markers):
                    found.append(f"{path}: an answer or hidden-test block")
            found += [f"{path}: {line[:60]}" for line in patterns & {x.strip() for x in text.splitlines()}]
print(json.dumps({"read": read, "found": found}))
"""


def visible_text(page: str) -> str:
    """An HTML page as the words a reader sees: tags dropped (syntax highlighting splits code), entities decoded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())


def hidden_lines() -> list[str]:
    """Every line of the course's hidden tests that no released notebook has (12+ characters, imports aside)."""
    public = {
        line.strip()
        for path in (ROOT / "notebooks").glob("*.ipynb")
        for cell in nbformat.read(str(path), as_version=4).cells
        for line in cell.source.splitlines()
    }
    lines, inside = set(), False
    for path in (ROOT / "solutions").glob("*.ipynb"):
        for cell in nbformat.read(str(path), as_version=4).cells:
            for line in cell.source.splitlines():
                if "BEGIN HIDDEN TESTS" in line or "END HIDDEN TESTS" in line:
                    inside = "BEGIN" in line
                elif inside and len(line.strip()) >= 12 and line.strip() not in public:
                    lines.add(line.strip())
    return sorted(line for line in lines if not re.match(r"(import|from) \S+", line))  # an import tells nothing


def answer_lines() -> list[str]:
    """The code lines of the course's own answers (course.answers.ALL, through course_answers) that
    nothing a learner gets holds (the released notebooks, the rest of the package), long enough (30+ characters) that
    no library in the shared environment holds one by chance: `return centroids` gives nothing away."""
    public = {
        line.strip()
        for path in (ROOT / "notebooks").glob("*.ipynb")
        for cell in nbformat.read(str(path), as_version=4).cells
        for line in cell.source.splitlines()
    }
    public |= {
        line.strip()
        for path in (ROOT / "course").rglob("*.py")
        if path.name != "answers.py"
        for line in path.read_text().splitlines()
    }
    lines = {line for code in course_answers().values() for line in code}
    return sorted(line for line in lines - public if len(line) >= 30 and not line.startswith(("#", "import ", "from ")))


def test_no_file_a_learner_can_read_holds_an_answer(hub, graded):
    """As a learner, read every file under the site's paths (the shared environment, the exchange, every home of
    the class, the hub's state, the site's checkout) but their own: no course notebook with answer blocks, no
    hidden-test line, no line of the course's own answers. The instructor's checkout and course directory hold
    plenty, and the learner can read neither; nor the site's checkout, closed as the guide says."""
    patterns = hidden_lines() + answer_lines()
    assert len(patterns) > 10 and answer_lines(), patterns
    roots = [PREFIX, hub.exchange, hub.state, ROOT, *(home(u) for u in (*LEARNERS, INSTRUCTOR))]
    done = run_as(
        LEARNERS[1],
        [str(PREFIX / "bin" / "python"), "-c", SCAN, *map(str, roots)],
        Path("/"),
        input=json.dumps(patterns),
    )
    seen = json.loads(done.stdout)
    assert seen["read"] > 1000, seen["read"]  # the environment, the learner's own work, the exchange's releases
    assert not seen["found"], seen["found"][:10]
    as_root = json.loads(
        subprocess.run(
            [sys.executable, "-c", SCAN, str(hub.checkout), str(hub.grading)],
            input=json.dumps(patterns),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert as_root["found"], "the instructor's folders hold no answers: this scan could not fail"


def test_doctor_checks_the_hub(hub, graded):
    env = {
        **os.environ,
        "COURSE_NBGRADER_EXCHANGE": str(hub.exchange),
        "COURSE_NBGRADER_ROOT": str(hub.grading),
    }
    # as the guide's instructor ran it
    for name in ("hub-env", "hub-kernel", "exchange", "checkout", "records", "answers"):
        assert re.search(rf"ok\s+{name}\s", graded["doctor"]), graded["doctor"]
    command = [str(PREFIX / "bin" / "python"), "-m", "course", "doctor", "--hub", str(PREFIX)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=hub.base)
    assert done.returncode == 0, done.stdout + done.stderr
    leak = hub.exchange / "leaked.ipynb"
    shutil.copy(ROOT / "solutions" / f"{NB}.ipynb", leak)
    leak.chmod(0o644)
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=hub.base)
    finally:
        leak.unlink()
    assert done.returncode == 1 and re.search(r"FAIL\s+answers\s.*leaked\.ipynb", done.stdout), done.stdout
    # the site's checkout opened to others: named from outside it (make setup HUB=1 recorded it), with the fix
    mode = stat.S_IMODE(ROOT.stat().st_mode)
    ROOT.chmod(0o755)
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=hub.base)
    finally:
        ROOT.chmod(mode)
    assert done.returncode == 1 and re.search(rf"FAIL\s+checkout\s.*{ROOT}", done.stdout), done.stdout
    assert f"checkout: chmod 700 {ROOT}" in done.stdout, done.stdout


GIT_WATCH = """#!/bin/sh
# git, watched: at a clone, what other users could do with its destination at that moment (then the real git)
if [ "$1" = clone ]; then
  for dest; do :; done
  printf '%s %s\\n' "$(stat -c '%a %U' "$dest")" "$(setpriv --reuid=LEARNER --regid=LEARNER --clear-groups \\
    ls -A "$dest" >/dev/null 2>&1 && echo listed || echo refused)" >> LOG
fi
exec /usr/bin/git "$@"
"""


def test_an_instructors_copy_is_never_readable_by_learners(hub, tmp_path):
    """The guide's recipe for an instructor's copy of the site's checkout, run as root for an instructor who has
    not logged in yet (home 755, as Debian makes it): the copy's folder is theirs and closed before git writes a
    file into it (a learner cannot even list it at that moment), stays closed, and `course doctor --hub` knows it:
    ok while closed, and naming it with the fix once it is opened."""
    text = GUIDE.read_text()
    line = re.search(r"`(bash scripts/instructor-copy\.sh INSTRUCTOR)`", text).group(1)
    user, learner = SECOND_INSTRUCTOR, LEARNERS[0]
    record = PREFIX / "share" / "ddl-hpc" / "instructor-copies"
    recorded = record.read_text() if record.exists() else None
    watch = tmp_path / "bin"
    watch.mkdir()
    log = tmp_path / "git.log"
    (watch / "git").write_text(GIT_WATCH.replace("LEARNER", learner).replace("LOG", str(log)))
    (watch / "git").chmod(0o755)
    subprocess.run(["useradd", "-m", "-s", "/bin/bash", user], check=True, capture_output=True)
    try:
        assert stat.S_IMODE(home(user).stat().st_mode) == 0o755, "the test needs a home still open to others"
        env = {**os.environ, "PATH": f"{watch}:{os.environ['PATH']}", "HUB_PREFIX": str(PREFIX)}
        done = subprocess.run(
            ["bash", "-c", line.replace("INSTRUCTOR", user)], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
        copy = home(user) / "ddl-hpc-course"
        assert log.read_text() == f"700 {user} refused\n", log.read_text()  # at the clone: closed, theirs
        assert (copy / "course" / "answers.py").is_file() and (copy / "solutions").is_dir()
        peek = run_as(learner, ["cat", str(copy / "course" / "answers.py")], home(learner), check=False)
        assert peek.returncode != 0 and "Permission denied" in peek.stderr, peek.stdout[:200]
        assert str(copy) in record.read_text().splitlines()

        env = {**os.environ, "COURSE_NBGRADER_EXCHANGE": str(hub.exchange)}
        doctor = [str(PREFIX / "bin" / "python"), "-m", "course", "doctor", "--hub", str(PREFIX)]
        closed = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=300, cwd="/")
        assert re.search(rf"ok\s+checkout\s.*{copy}", closed.stdout), closed.stdout
        copy.chmod(0o755)  # opened by mistake: named, with the fix
        opened = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=300, cwd="/")
        assert opened.returncode == 1 and re.search(rf"FAIL\s+checkout\s.*{copy}", opened.stdout), opened.stdout
        assert f"chmod 700 {copy}" in opened.stdout, opened.stdout
    finally:
        subprocess.run(["userdel", "-r", user], capture_output=True)
        if recorded is None:
            record.unlink(missing_ok=True)
        else:
            record.write_text(recorded)


def test_setup_refuses_a_python_other_users_cannot_run(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("setup-hub.sh runs as root (it writes the shared environment)")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    shutil.copy("/usr/bin/python3.11", private / "python3.11")
    done = subprocess.run(
        ["bash", "scripts/setup-hub.sh"],
        cwd=ROOT,
        env={**os.environ, "HUB_PYTHON": str(private / "python3.11"), "HUB_PREFIX": str(tmp_path / "hub")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and not (tmp_path / "hub").exists()
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(private) in done.stderr and "HUB_PYTHON=/usr/bin/python3.11" in done.stderr, done.stderr


def test_doctor_hub_says_what_a_machine_without_a_hub_lacks(tmp_path):
    """No root needed: a prefix without JupyterHub and a missing exchange are each one line with the fix."""
    from tests.conftest import run_course

    env = {**os.environ, "COURSE_NBGRADER_EXCHANGE": str(tmp_path / "exchange")}
    done = run_course("doctor", "--hub", str(tmp_path / "nowhere"), env=env, timeout=120)
    assert done.returncode == 1 and not done.stderr.strip(), done.stderr
    assert re.search(r"FAIL\s+hub-env\s+no JupyterHub in .*nowhere", done.stdout), done.stdout
    assert re.search(r"FAIL\s+hub-kernel\s", done.stdout), done.stdout
    assert f"exchange: as root: mkdir -p {tmp_path / 'exchange'} && chmod 1777" in done.stdout, done.stdout


# --- JupyterLab as a Slurm job (deploy/jupyterhub/jupyterhub_config_slurm.py) on the two-node virtual cluster -----

SLURM_SECTION = "## A Slurm-spawned JupyterLab"
SLURM_NODE_CPUS = max(1, (os.cpu_count() or 2) // 2)  # each of the two virtual nodes has half this machine's cores
NODE_CELL = """import os, socket, course
print("NODE", socket.gethostname(), os.environ["SLURM_JOB_ID"], os.environ["SLURM_CPUS_ON_NODE"], course.__file__)"""


def slurm_guide_lines() -> list[str]:
    """The command lines of the guide's Slurm section's bash block, with the test's names, without comments."""
    text = GUIDE.read_text()
    block = text[text.index(SLURM_SECTION) :].split("```bash\n", 1)[1].split("```", 1)[0]
    return [as_here(line) for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _slurm(args: list[str], env: dict) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}"
    return done.stdout


def _jobs_of(user: str, env: dict) -> list[list[str]]:
    """The user's jobs in the virtual cluster's queue: [job id, name, state, node(s)]."""
    return [line.split() for line in _slurm(["squeue", "-h", "-u", user, "-o", "%i %j %T %N"], env).splitlines()]


def _queue_empties(user: str, env: dict, seconds: int) -> bool:
    """Whether the user's jobs leave the virtual cluster's queue within SECONDS (Slurm ends a job in a few)."""
    for _ in range(seconds):
        if not _jobs_of(user, env):
            return True
        time.sleep(1)
    return not _jobs_of(user, env)


@pytest.fixture(scope="module")
def slurm_hub(hub, virtual_cluster):
    """A second hub, started as the guide's Slurm section says (the set-up, the cluster's variables, the hub with
    jupyterhub_config_slurm.py), for the class of the first hub; each server it starts is a job on the cluster."""
    *steps, start = slurm_guide_lines()
    assert "jupyterhub_config_slurm.py" in start and "jupyterhub -f" in start, start
    exports = [line for line in steps if line.startswith("eval ")]
    env = {**os.environ, "HUB_PREFIX": str(PREFIX), "COURSE_NBGRADER_EXCHANGE": str(hub.exchange)}
    for step in steps:
        if step not in exports:
            done = subprocess.run(["bash", "-c", step], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
            assert done.returncode == 0, f"{step}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    base = hub.base / "slurm"
    base.mkdir()
    command = ["bash", "-c", "set -e\n" + "\n".join(exports) + f"\nexec {start}"]
    # the cluster's script needs root's tools (ip, nsenter); the hub then runs with the PATH the first hub has
    running = _start_hub(
        base, hub.exchange, command, {"PATH": f"{PREFIX / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin"}, 18700
    )
    try:
        yield running
    finally:
        _stop_hub(running)
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(running.log, ARTIFACTS / "jupyterhub-slurm.log")
        for user in LEARNERS:  # a job the hub could not cancel must not hold the nodes for the tests after
            subprocess.run(["scancel", "-u", user], env=virtual_cluster, capture_output=True, timeout=60)


def spawn_page(browser, hub: Hub, user: str):
    """A fresh browser session logged in as USER on the hub's spawn page (the Slurm options form)."""
    from playwright.sync_api import expect

    page = patient(browser.new_context(viewport={"width": 1400, "height": 1000}).new_page())
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", PASSWORD)
    page.click("#login_submit")
    page.wait_for_url(re.compile(r"/hub/(spawn|home)"), timeout=60_000)
    page.goto(f"{hub.url}/hub/spawn/{user}")
    expect(page.locator("#partition")).to_be_visible(timeout=60_000)
    return page


def start_with(page, **fields: str) -> None:
    """Fill the spawn form's FIELDS (partition, runtime, nprocs) and press Start."""
    for name, value in fields.items():
        page.fill(f"#{name}", value)
    page.locator("#spawn_form [type=submit]").click()


def test_a_learners_jupyterlab_runs_as_a_slurm_job_on_a_node_and_stops_with_it(slurm_hub, browser, virtual_cluster):
    """Log in, start with the form's defaults: the server is a Slurm job on one node, runs in that node's network
    namespace, and a kernel there imports the course and sees the node's name and cores; Stop ends the job."""
    from playwright.sync_api import expect

    user = LEARNERS[0]
    page = spawn_page(browser, slurm_hub, user)
    assert page.input_value("#runtime") == "02:00:00" and page.input_value("#nprocs") == "1"
    start_with(page)
    page.wait_for_url(re.compile(rf"/user/{user}/lab"), timeout=300_000)
    expect(page.locator(".jp-LabShell")).to_be_visible(timeout=180_000)

    jobs = _jobs_of(user, virtual_cluster)
    assert len(jobs) == 1 and jobs[0][1:3] == ["spawner-jupyterhub", "RUNNING"], jobs
    job, node = jobs[0][0], jobs[0][3]
    assert node in ("vc1", "vc2"), jobs
    servers = [
        p
        for p in psutil.process_iter(["username", "cmdline"])
        if p.info["username"] == user and "jupyterhub-singleuser" in " ".join(p.info["cmdline"] or [])
    ]
    namespaces = {
        p: subprocess.run(["ip", "netns", "identify", str(p.pid)], capture_output=True, text=True).stdout.strip()
        for p in servers
    }
    on_node = [p for p, namespace in namespaces.items() if namespace == node]
    assert on_node, f"no server of {user} in {node}'s network namespace: {namespaces}"

    notebook = home(user) / "slurm-node.ipynb"
    cell = nbformat.v4.new_code_cell(NODE_CELL)
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["kernelspec"] = {"name": "ddl-hpc", "display_name": "Python (DDL on HPC)", "language": "python"}
    run_as(user, ["sh", "-c", f"cat > {notebook}"], home(user), input=nbformat.writes(nb))
    page.goto(f"{slurm_hub.url}/user/{user}/lab/tree/{notebook.name}?reset")
    expect(page.locator(".jp-KernelName").first).to_have_text("Python (DDL on HPC)", timeout=120_000)
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=120_000)
    output = run_cell(page, "socket.gethostname()").locator(".jp-OutputArea-output")
    expect(output).to_contain_text("NODE", timeout=120_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "hub-slurm-node.png"))
    _, hostname, job_id, cores, source = output.inner_text().split()
    assert (hostname, job_id, cores) == (node, job, str(SLURM_NODE_CPUS)), output.inner_text()
    assert source.startswith(str(PREFIX)), f"the kernel imported the course from {source}"

    stop_from_home(page, slurm_hub)
    assert _queue_empties(user, virtual_cluster, 30), "stopping the server left its job in the queue"
    _, left = psutil.wait_procs(on_node, timeout=30)
    assert not left, f"the server outlived its job: {left}"


def test_a_learner_sees_slurms_reason_when_it_refuses_or_holds_the_job(slurm_hub, browser, virtual_cluster):
    """Refused by sbatch (an unknown partition, more cores than a node has), pending (the nodes busy), and pending
    for a reason that never clears (a time limit over the partition's): each shows Slurm's own words on the hub's
    spawn pages."""
    from playwright.sync_api import expect

    user = LEARNERS[1]
    page = spawn_page(browser, slurm_hub, user)
    start_with(page, partition="nosuch")
    expect(page.locator("body")).to_contain_text("Invalid partition name specified", timeout=60_000)
    assert not _jobs_of(user, virtual_cluster)
    # More cores than a node has: refused at once (Debian 12's Slurm does not queue it), in Slurm's words.
    page.goto(f"{slurm_hub.url}/hub/spawn/{user}")
    expect(page.locator("#partition")).to_be_visible(timeout=60_000)
    start_with(page, partition="", nprocs=str(SLURM_NODE_CPUS + 1))
    expect(page.locator("body")).to_contain_text("Requested node configuration is not available", timeout=60_000)
    assert not _jobs_of(user, virtual_cluster)

    # Every core of the cluster taken: the learner's job waits, and the pending page says why.
    busy = ["sbatch", "--parsable", "-n", str(2 * SLURM_NODE_CPUS), "-J", "busy", "-o", "/dev/null"]
    blocker = _slurm([*busy, "--wrap", "sleep 300"], virtual_cluster).strip()
    try:
        for _ in range(30):
            if "RUNNING" in _slurm(["squeue", "-h", "-j", blocker, "-o", "%T"], virtual_cluster):
                break
            time.sleep(1)
        # The hub refuses the pending page's progress stream (400) when the spawn fails just as the page opens it
        # (jupyterhub/jupyterhub#4244): its first request here gets that answer, and the page must not go blank.
        refused = []

        def refuse(route) -> None:
            refused.append(route.request.url)
            route.fulfill(status=400, body="not starting")

        page.route(re.compile(r"/hub/api/users/[^/]+/server/progress"), refuse, times=1)
        page.goto(f"{slurm_hub.url}/hub/spawn/{user}")
        start_with(page, partition="")
        expect(page.locator("#progress-message")).to_contain_text("pending in the queue: Resources", timeout=120_000)
        assert refused, "the pending page never asked the hub for its progress"
        page.screenshot(path=str(ARTIFACTS / "hub-slurm-pending.png"))
        (pending,) = _jobs_of(user, virtual_cluster)
        assert pending[2] == "PENDING", pending
        subprocess.run(["scancel", pending[0]], env=virtual_cluster, check=True, timeout=60)
        expect(page.locator("#progress-message")).to_contain_text("Spawn failed", timeout=120_000)
    finally:
        subprocess.run(["scancel", blocker], env=virtual_cluster, timeout=60)

    # A time limit over the partition's (Slurm's default keeps such a job pending for ever): refused at once.
    _slurm(["scontrol", "update", "PartitionName=vc", "MaxTime=04:00:00"], virtual_cluster)
    try:
        page.goto(f"{slurm_hub.url}/hub/spawn/{user}")
        expect(page.locator("#partition")).to_be_visible(timeout=60_000)
        start_with(page, runtime="08:00:00")
        # Slurm's reason for it: PartitionTimeLimit, or PartitionConfig as Debian 12's Slurm 22.05 says
        expect(page.locator("body")).to_contain_text(re.compile(r"Partition(TimeLimit|Config) \("), timeout=120_000)
    finally:
        _slurm(["scontrol", "update", "PartitionName=vc", "MaxTime=INFINITE"], virtual_cluster)
    assert not _jobs_of(user, virtual_cluster), "the job Slurm would never start was left in the queue"


# --- Open OnDemand: deploy/ondemand/ddl-hpc rendered and submitted as OnDemand does, on the two-node virtual cluster ---

OOD_SECTION = "## Open OnDemand"
OOD_LEARNER = LEARNERS[2]
NOTEBOOK_01 = "ddl-hpc/notebooks/01_task_graphs.ipynb"


def ondemand_guide_lines(names: dict[str, str]) -> list[str]:
    """The command lines of the guide's Open OnDemand block, with the test's names and NAMES, without comments."""
    text = GUIDE.read_text()
    block = text[text.index(f"\n{OOD_SECTION}\n") :].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [as_here(line) for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for given, here in names.items():
        lines = [line.replace(given, here) for line in lines]
    return lines


@pytest.fixture(scope="module")
def ondemand_app(hub) -> Path:
    """The app installed as the guide says, into a temporary apps folder instead of /var/www/ood/apps/sys, for the
    virtual cluster ("vc"), with the site's settings of this test: the hub's shared environment and exchange."""
    apps = hub.base / "ood-apps-sys"
    apps.mkdir()
    lines = ondemand_guide_lines({"/var/www/ood/apps/sys": str(apps), "CLUSTER": "vc"})
    assert lines[0] == "make setup HUB=1", lines  # the hub fixture ran it already (the guide's first block)
    for line in lines[1:]:
        done = subprocess.run(["bash", "-c", line], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    from tests import ondemand

    app = apps / "ddl-hpc"
    shutil.copy(ondemand.RENDER, ondemand.renderer(app))  # readable by learners, unlike the closed checkout
    form = app / "form.yml"
    assert 'cluster: "vc"' in form.read_text(), "the guide's sed did not set the cluster"
    settings = {'"/opt/ddl-hpc"': f'"{PREFIX}"', '"/srv/nbgrader/exchange"': f'"{hub.exchange}"'}
    text = form.read_text()
    for given, here in settings.items():
        assert given in text, given
        text = text.replace(given, here)
    form.write_text(text)
    return app


def ondemand_launch(app: Path, answers: dict[str, str], cluster: dict) -> tuple[Path, subprocess.CompletedProcess]:
    """Launch as the dashboard does for OOD_LEARNER with the form's ANSWERS: the session's folder staged (templates
    rendered by Ruby), then sbatch. Returns the folder and sbatch's result."""
    from tests import ondemand

    user = OOD_LEARNER
    values = ondemand.context(app / "form.yml", answers)
    staged = ondemand.staged_root(home(user))
    run_as(user, ["sh", "-c", f"mkdir -p {staged.parent} && mkdir -m 700 {staged}"], home(user))
    run_as(user, ["sh", "-c", f"cat > {staged / 'user_defined_context.json'}"], home(user), input=json.dumps(values))
    rendered = run_as(user, ondemand.stage_command(app, staged, staged / "user_defined_context.json"), home(user))
    args, script = ondemand.sbatch(values, json.loads(rendered.stdout), staged)
    submitted = run_as(user, args, staged, {"SLURM_CONF": cluster["SLURM_CONF"]}, check=False, input=script)
    return staged, submitted


def test_ondemand_shows_slurms_reason_when_it_refuses_a_session(ondemand_app, virtual_cluster):
    """What the dashboard shows when sbatch refuses the job is sbatch's own message: an unknown partition, and more
    cores than a node has (refused at once, as the guide says, not queued)."""
    _, refused = ondemand_launch(ondemand_app, {"bc_queue": "nosuch"}, virtual_cluster)
    assert refused.returncode != 0 and "Invalid partition name specified" in refused.stderr, refused.stderr
    _, refused = ondemand_launch(ondemand_app, {"num_cores": str(SLURM_NODE_CPUS + 1)}, virtual_cluster)
    assert refused.returncode != 0 and "Requested node configuration is not available" in refused.stderr, refused.stderr
    assert not _jobs_of(OOD_LEARNER, virtual_cluster)


def _wait_for_connection(staged: Path, job: str, cluster: dict) -> dict:
    """connection.yml once the job wrote it; fails with the session's output.log if the job ended first."""
    from tests import ondemand

    for _ in range(300):
        found = ondemand.connection(staged)
        if found:
            return found
        state = _slurm(["squeue", "-h", "-j", job, "-o", "%T"], cluster).strip()
        if state not in ("PENDING", "CONFIGURING", "RUNNING"):
            break
        time.sleep(1)
    log = staged / "output.log"
    raise AssertionError(f"no connection.yml (job {job}: {state}):\n{log.read_text()[-3000:] if log.exists() else ''}")


def test_an_ondemand_session_connects_once_jupyterlab_listens_on_a_node_without_nc(ondemand_app, virtual_cluster):
    """The job wrapped with OnDemand's helpers as they are on a node without nc (tests/ondemand.py): connection.yml
    appears once JupyterLab listens at its host and port, and output.log holds no line of the app's own (no false
    "did not listen"); the session then ends with its job."""
    staged, submitted = ondemand_launch(ondemand_app, {"profile": "quick", "bc_num_hours": "1"}, virtual_cluster)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    try:
        found = _wait_for_connection(staged, job, virtual_cluster)
        with socket.create_connection((found["host"], int(found["port"])), timeout=10):
            pass  # JupyterLab listens where the Connect button points
        log = (staged / "output.log").read_text()
        assert "[ddl-hpc]" not in log, log[-3000:]
    finally:
        subprocess.run(["scancel", job], env=virtual_cluster, capture_output=True, timeout=60)
    assert _queue_empties(OOD_LEARNER, virtual_cluster, 60), "the session's job is still in the queue"


def _processes_on(user: str, node: str) -> list[psutil.Process]:
    """The USER's processes in NODE's network namespace (all of a session's: JupyterLab, kernels, engines)."""
    found = []
    for process in psutil.process_iter(["username"]):
        if process.info["username"] == user:
            where = subprocess.run(["ip", "netns", "identify", str(process.pid)], capture_output=True, text=True)
            if where.stdout.strip() == node:
                found.append(process)
    return found


def _ondemand_terminal(page, command: str, answer: Path) -> str:
    """COMMAND typed in a new terminal of the session; what it wrote to ANSWER (written last) once there."""
    from playwright.sync_api import expect

    page.locator(".lm-MenuBar-item").filter(has_text="File").first.click()
    page.locator(".lm-Menu-item").filter(has_text="New").first.hover()
    page.locator(".lm-Menu-itemLabel").filter(has_text=re.compile("^Terminal$")).first.click()
    expect(page.locator(".jp-Terminal").first).to_be_visible(timeout=60_000)
    page.locator(".jp-Terminal").first.click()
    page.keyboard.type(command + "\n")
    for _ in range(180):
        if answer.exists() and answer.read_text().endswith("\n"):
            return answer.read_text()
        time.sleep(1)
    raise AssertionError(f"the terminal did not finish: {command}")


@dataclass
class Session:
    staged: Path  # the session's folder (connection.yml, output.log)
    job: str
    host: str
    port: int
    page: object  # JupyterLab in the browser, opened through the session card's Connect button
    edited: str  # notebook 00 as the learner left it before the start


@pytest.fixture(scope="module")
def ondemand_session(ondemand_app, graded, browser, virtual_cluster):
    """OOD_LEARNER's session as OnDemand starts it (after editing notebook 00, deleting 01 and opening their home):
    the job until connection.yml, then the rendered Connect button opened in the browser. Cancelled at the end."""
    from playwright.sync_api import expect

    from tests import ondemand

    user = OOD_LEARNER
    mine, gone = home(user) / NOTEBOOK_00, home(user) / NOTEBOOK_01
    run_as(user, ["sh", "-c", f"printf ' ' >> {mine} && rm {gone} && chmod 755 ~"], home(user))
    edited = mine.read_text()
    answers = {"profile": "quick", "bc_num_hours": "1", "num_cores": str(SLURM_NODE_CPUS)}
    started = time.perf_counter()
    staged, submitted = ondemand_launch(ondemand_app, answers, virtual_cluster)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        found = _wait_for_connection(staged, job, virtual_cluster)
        host, port = found["host"], found["port"]
        view = run_as(user, ondemand.view_command(ondemand_app, staged / "connection.yml"), home(user)).stdout
        assert found["password"] in view, view
        # The session card, at an address of the node: OnDemand serves it from the portal, whose proxy forwards
        # /node/HOST/PORT/ to the node; here the browser reaches the node at the same paths directly.
        card = patient(context.new_page())
        card_url = f"http://{host}:{port}/pun/sys/dashboard/batch_connect/sessions"
        card.route(card_url, lambda route: route.fulfill(body=view, content_type="text/html"))
        card.goto(card_url)
        with context.expect_page() as opened:
            card.click("#ddl-hpc-connect")
        page = opened.value
        expect(page.locator(".jp-LabShell")).to_be_visible(timeout=180_000)
        print(f"OnDemand session: launch to JupyterLab in the browser in {time.perf_counter() - started:.0f} s")
        yield Session(staged, job, host, port, page, edited)
    finally:
        context.close()
        subprocess.run(["scancel", "-u", user], env=virtual_cluster, capture_output=True, timeout=60)


def test_an_ondemand_session_starts_on_a_node_with_the_student_copy_in_a_private_home(
    ondemand_session, virtual_cluster
):
    """The job runs on a node of the cluster and wrote connection.yml for the learner alone; the start copied only
    what the learner lacked (an edited notebook stays, a deleted one is back) and closed their home."""
    session, user = ondemand_session, OOD_LEARNER
    (row,) = _jobs_of(user, virtual_cluster)
    assert row[0] == session.job and row[2] == "RUNNING" and row[3] == session.host, (row, session)
    assert stat.S_IMODE((session.staged / "connection.yml").stat().st_mode) == 0o600
    assert (home(user) / NOTEBOOK_00).read_text() == session.edited, "the start replaced the learner's notebook"
    assert (home(user) / NOTEBOOK_01).exists(), "the start did not copy a notebook the learner lacked"
    assert stat.S_IMODE(home(user).stat().st_mode) == 0o700, "the learner's home is still open to others"


def test_an_ondemand_session_runs_notebook_00_on_the_jobs_node(ondemand_session):
    """Notebook 00's first cluster cells in the course's kernel: the engines answer from the node, inside the job,
    and the kernel is the shared environment's (the student package, no checkout)."""
    from playwright.sync_api import expect

    session, user = ondemand_session, OOD_LEARNER
    page, host = session.page, session.host
    page.goto(f"http://{host}:{session.port}/node/{host}/{session.port}/lab/tree/{NOTEBOOK_00}")
    expect(page.locator(".jp-KernelName").first).to_have_text("Python (DDL on HPC)", timeout=120_000)
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=120_000)
    for text in ("PROFILE = profile.name()", "cluster = course.cluster.start("):
        run_cell(page, text)
    hello = run_cell(page, 'print(f"hello from process').locator(".jp-OutputArea-output")
    expect(hello.filter(has_text=f"on {host}")).to_have_count(2, timeout=300_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ondemand-notebook-00.png"))
    processes = _processes_on(user, host)
    engines = [p for p in processes if p.pid in _engines_of(user)]
    assert len(engines) >= 2 and all(p.environ().get("SLURM_JOB_ID") == session.job for p in engines), engines
    kernels = [p for p in processes if "ipykernel" in " ".join(p.cmdline())]
    assert kernels and all(p.cmdline()[0].startswith(str(PREFIX)) for p in kernels), [p.cmdline() for p in kernels]


def test_the_exchange_works_from_a_terminal_of_an_ondemand_session(ondemand_app, ondemand_session):
    """nbgrader from a terminal of the session: fetch the released assignment again (into a folder of its own), and
    submit it: one more submission of the learner's in the exchange."""
    from tests import ondemand

    user = OOD_LEARNER
    exchange = Path(ondemand.context(ondemand_app / "form.yml", {})["exchange"])
    inbound = exchange / "ddl-hpc" / "inbound"
    before = {p.name for p in inbound.iterdir() if p.name.startswith(f"{user}+{ASSIGNMENT}+")}
    answer = home(user) / "ondemand-exchange.txt"
    fetched = home(user) / "ondemand-fetch" / ASSIGNMENT / f"{NB}.ipynb"
    command = (
        f"mkdir -p ~/ondemand-fetch && cd ~/ondemand-fetch && nbgrader fetch_assignment {ASSIGNMENT} "
        f"&& nbgrader submit {ASSIGNMENT} > ~/ondemand-submit.log 2>&1; echo exit $? > {answer}"
    )
    said = _ondemand_terminal(ondemand_session.page, command, answer)
    assert said == "exit 0\n", (home(user) / "ondemand-submit.log").read_text()
    after = {p.name for p in inbound.iterdir() if p.name.startswith(f"{user}+{ASSIGNMENT}+")}
    assert fetched.exists() and len(after - before) == 1, (before, after)


def test_ending_an_ondemand_session_ends_every_process_of_it_and_keeps_the_files(ondemand_session, virtual_cluster):
    """Delete on the session card cancels the job as the learner (so do the hours running out): the job leaves the
    queue, JupyterLab, its kernels and terminals and the engines end with it, the learner's files stay."""
    session, user = ondemand_session, OOD_LEARNER
    processes = _processes_on(user, session.host)
    assert any("jupyter-lab" in " ".join(p.cmdline()) for p in processes), [p.cmdline() for p in processes]
    run_as(user, ["scancel", session.job], home(user), {"SLURM_CONF": virtual_cluster["SLURM_CONF"]})
    assert _queue_empties(user, virtual_cluster, 60), "the cancelled session's job is still in the queue"
    _, left = psutil.wait_procs(processes, timeout=60)
    assert not left, f"processes of the session outlived its job: {[p.cmdline() for p in left]}"
    assert (home(user) / NOTEBOOK_00).read_text() == session.edited and (session.staged / "output.log").exists()


# --- Last: the end of a class, as the guide says (the hub stopped, then `course hub end-of-class` as root) --------

CLEAN_UP = ROOT / "docs" / "guide" / "07-clean-up.md"
END_SECTION = "## The end of a class on a JupyterHub"


def _class_processes(word: str) -> list[psutil.Process]:
    """Processes of the class's accounts (learners and instructor) whose command line holds WORD."""
    return [
        p
        for p in psutil.process_iter(["username", "cmdline"])
        if p.info["username"] in (*LEARNERS, INSTRUCTOR) and word in " ".join(p.info["cmdline"] or [])
    ]


def _end_of_class_line() -> str:
    """The command line of the clean-up page's block for the end of a class, with the test's names."""
    text = CLEAN_UP.read_text()
    section = text[text.index(f"\n{END_SECTION}\n") :]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    lines = [as_here(line) for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(lines) == 1 and "hub end-of-class" in lines[0], lines
    return lines[0]


def test_ending_the_class_as_the_guide_says_ends_the_servers_and_removes_only_the_courses(hub, pages):
    """Last in this file (it stops the first hub). Issue 65, with real accounts: an instructor's copy made as the
    guide says and left as made, one the instructor worked in, and a second instructor's removed by `userdel -r`
    (a stale record, which `course doctor --hub` notes). The hub stopped with SIGTERM, as Ctrl-C does, leaves every
    server running; the guide's line, as root, refuses while a hub runs, then ends every server and kernel (and not
    a learner's process that only names the server, as the old `pkill -f` line did), removes the unchanged copy,
    keeps the other, forgets the removed one, and keeps the learners' work, the exchange and the accounts."""
    record = PREFIX / "share" / "ddl-hpc" / "instructor-copies"
    recorded = record.read_text() if record.exists() else None
    make_copy = "bash scripts/instructor-copy.sh {user} {dest}"
    env = {**os.environ, "HUB_PREFIX": str(PREFIX), "COURSE_NBGRADER_EXCHANGE": str(hub.exchange)}
    unchanged, worked_in = home(INSTRUCTOR) / "class-copy", home(INSTRUCTOR) / "worked-in-copy"
    subprocess.run(["useradd", "-m", "-s", "/bin/bash", SECOND_INSTRUCTOR], check=True, capture_output=True)
    record.write_text("")  # the shared environment's record holds this test's copies alone (restored after)
    decoy = None
    try:
        second = home(SECOND_INSTRUCTOR) / "ddl-hpc-course"
        for user, dest in ((INSTRUCTOR, unchanged), (INSTRUCTOR, worked_in), (SECOND_INSTRUCTOR, second)):
            done = subprocess.run(
                ["bash", "-c", make_copy.format(user=user, dest=dest)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, done.stderr
        run_as(INSTRUCTOR, ["bash", "-c", "echo 'my notes' > notes.md"], worked_in)
        subprocess.run(["userdel", "-r", SECOND_INSTRUCTOR], check=True, capture_output=True)
        doctor = [str(PREFIX / "bin" / "python"), "-m", "course", "doctor", "--hub", str(PREFIX)]
        noted = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=300, cwd="/")
        assert re.search(rf"note\s+records\s.*{second} no longer exists", noted.stdout), noted.stdout
        assert f"records: as root: {PREFIX}/bin/course hub forget-gone" in noted.stdout, noted.stdout

        line = _end_of_class_line()
        users = {p.info["username"] for p in _class_processes("jupyterhub-singleuser")}
        assert users >= {*LEARNERS, INSTRUCTOR}, f"servers running before the end: {users}"
        refused = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 1 and "the hub still runs" in refused.stderr, refused.stdout + refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        entry = pwd.getpwnam(LEARNERS[0])
        decoy = subprocess.Popen(  # a learner's process that only names the servers' program
            ["/usr/bin/python3", "-c", "import time; time.sleep(600)", str(PREFIX / "bin" / "jupyterhub-singleuser")],
            user=entry.pw_uid,
            group=entry.pw_gid,
            cwd=entry.pw_dir,
        )
        for other in LAUNCHED:  # the Slurm section's second hub, where this run started it, ends first
            if other is not hub:
                _stop_hub(other)
        _stop_hub(hub, keep_servers=True)
        servers = _class_processes("jupyterhub-singleuser")
        assert {p.info["username"] for p in servers} >= users, (
            "stopping the hub ended servers: the guide's line is moot"
        )
        kernels = _class_processes("ipykernel")
        done = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
        _, left = psutil.wait_procs([p for p in servers + kernels if p.pid != decoy.pid], timeout=120)
        assert not left, f"{line} left: {[(p.username(), p.cmdline()[:3]) for p in left]}\n{done.stdout}"
        assert decoy.poll() is None, f"{line} ended a process that only names the server:\n{done.stdout}"
        out = done.stdout
        ended = re.search(r"^ended \d+ server\(s\) of the course \((.*?)\)", out, re.M)
        assert ended and set(ended.group(1).split(", ")) >= users, out
        assert not unchanged.exists() and f"removed {unchanged}:" in out, out
        assert (worked_in / "notes.md").read_text() == "my notes\n", "a copy with work of its own was removed"
        assert f"kept {worked_in}: it holds files of its own" in out, out
        assert f"forgot {second}: it no longer exists" in out, out
        assert record.read_text().splitlines() == [str(worked_in)], record.read_text()
        assert f"kept nbgrader's exchange {hub.exchange}" in out and "kept the accounts" in out, out
        for user in LEARNERS:
            assert (home(user) / "ddl-hpc" / "notebooks").is_dir(), f"{user}'s student copy was removed"
        assert _exists("passwd", LEARNERS[0]) and hub.exchange.is_dir()
    finally:
        if decoy is not None:
            decoy.kill()
            decoy.wait()
        subprocess.run(["userdel", "-r", SECOND_INSTRUCTOR], capture_output=True)
        shutil.rmtree(unchanged, ignore_errors=True)
        shutil.rmtree(worked_in, ignore_errors=True)
        if recorded is None:
            record.unlink(missing_ok=True)
        else:
            record.write_text(recorded)
