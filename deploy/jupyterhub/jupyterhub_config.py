"""JupyterHub serving the course to a class (docs/guide/02-deploy.md, "Deploying on JupyterHub").

    make setup HUB=1                                                 # as root: the shared environment, /opt/ddl-hpc
    /opt/ddl-hpc/bin/jupyterhub -f deploy/jupyterhub/jupyterhub_config.py     # as root, from the checkout

Use it as is, or copy it and change what your site decides otherwise. Every choice below says why. The values a
site usually changes are read from the hub's environment (COURSE_HUB_*), so the file itself can stay as it is:

    COURSE_HUB_IP, COURSE_HUB_PORT    where learners connect (127.0.0.1:8000; put your site's HTTPS proxy in front)
    COURSE_HUB_STATE                  the hub's database, cookie secret and proxy pid file (/srv/jupyterhub)
    COURSE_HUB_LEARNERS, COURSE_HUB_INSTRUCTORS   the Unix groups allowed in (ddl-hpc-learners, ddl-hpc-instructors)
    COURSE_HUB_GRADING                nbgrader's course directory of an instructor (~/ddl-hpc-grading)
    COURSE_NBGRADER_EXCHANGE          nbgrader's exchange (/srv/nbgrader/exchange)
    COURSE_DATA_DIR, COURSE_OFFLINE, COURSE_PROFILE   passed on to every server (docs/guide/01-prepare.md)
"""

import grp
import os
import pwd
import subprocess
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (provided by JupyterHub)

# The shared environment scripts/setup-hub.sh made: the one this hub runs from (e.g. /opt/ddl-hpc/bin/jupyterhub).
PREFIX = Path(sys.prefix)
STUDENT = PREFIX / "share" / "ddl-hpc" / "student"  # the student copy: no solution, no hidden test
INSTRUCTOR_CONFIG = PREFIX / "etc" / "ddl-hpc-instructors"  # nbgrader's Formgrader enabled, the course's settings
STATE = Path(os.environ.get("COURSE_HUB_STATE", "/srv/jupyterhub"))
LEARNERS = os.environ.get("COURSE_HUB_LEARNERS", "ddl-hpc-learners")
INSTRUCTORS = os.environ.get("COURSE_HUB_INSTRUCTORS", "ddl-hpc-instructors")
EXCHANGE = os.environ.get("COURSE_NBGRADER_EXCHANGE", "/srv/nbgrader/exchange")
GRADING = os.environ.get("COURSE_HUB_GRADING", "~/ddl-hpc-grading")
FOLDER = "ddl-hpc"  # the student copy's folder in each learner's home

# Only this machine reaches the hub: a site's HTTPS front end (or an SSH tunnel) forwards to it. The hub's own API
# and the proxy's API stay on 127.0.0.1 as well.
c.JupyterHub.ip = os.environ.get("COURSE_HUB_IP", "127.0.0.1")
c.JupyterHub.port = int(os.environ.get("COURSE_HUB_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"
if os.environ.get("COURSE_HUB_API_PORT"):
    c.JupyterHub.hub_port = int(os.environ["COURSE_HUB_API_PORT"])
if os.environ.get("COURSE_HUB_PROXY_API_PORT"):
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ['COURSE_HUB_PROXY_API_PORT']}"

# Restarting the hub (a changed configuration, an update) leaves every user's JupyterLab running: kernels, running
# cells and open notebooks go on, and the restarted hub finds the servers again in its database. The proxy restarts
# with the hub: for a few seconds pages do not load, then open notebooks reconnect. Servers end when their users stop
# them (Hub Control Panel) or their processes are ended; the guide says how to stop them all.
c.JupyterHub.cleanup_servers = False

# The hub's state in one private folder (root's alone: it holds the cookie secret).
STATE.mkdir(parents=True, exist_ok=True)
STATE.chmod(0o700)
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")

# Log in with the machine's own accounts (PAM): learners and instructors are Unix users, so nbgrader's exchange
# knows who submitted what, and file permissions keep one learner's work from another. Only the two groups get in.
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.allowed_groups = {LEARNERS, INSTRUCTORS}

# Each user's JupyterLab runs on this machine as that user (LocalProcessSpawner; for a Slurm job see the guide),
# from the shared environment: it holds the installed student package, so every user has `course`, the kernel
# "Python (DDL on HPC)" and nbgrader, and no kernel reads the instructor's checkout.
c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
c.Spawner.cmd = [str(PREFIX / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 180  # JupyterLab's first start on a busy login node takes a while
c.Spawner.http_timeout = 180
# JupyterHub's pages, with the "starting up" page reloading when the hub refuses its progress stream (a spawn that
# fails as the page opens would otherwise say "starting up" for ever): templates/spawn_pending.html says why.
c.JupyterHub.template_paths = [str(Path(__file__).with_name("templates"))]
# A terminal finds `course`, `nbgrader`, `mpiexec` and `horovodrun`; the course's settings reach every kernel.
c.Spawner.environment = {
    "PATH": f"{PREFIX / 'bin'}:/usr/local/bin:/usr/bin:/bin",
    "COURSE_NBGRADER_EXCHANGE": EXCHANGE,
    **{
        name: os.environ[name] for name in ("COURSE_DATA_DIR", "COURSE_OFFLINE", "COURSE_PROFILE") if name in os.environ
    },
}


def _is_instructor(user: pwd.struct_passwd) -> bool:
    """Whether the Unix user is in the instructors' group."""
    try:
        return grp.getgrnam(INSTRUCTORS).gr_gid in os.getgrouplist(user.pw_name, user.pw_gid)
    except KeyError:
        return False


def _copy_student_copy(user: pwd.struct_passwd) -> None:
    """Copy the student copy's files that ~/ddl-hpc lacks, as the user: a file they have is never replaced."""
    target = Path(user.pw_dir) / FOLDER
    subprocess.run(
        ["sh", "-c", 'mkdir -p "$1" && cp -R -n "$2/." "$1/"', "sh", str(target), str(STUDENT)],
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        cwd=user.pw_dir,
        env={"PATH": "/usr/bin:/bin", "HOME": user.pw_dir},
        check=True,
        capture_output=True,
    )


def before_spawn(spawner) -> None:
    """Per user, before their server starts: a private home, the student copy, and instructors' nbgrader settings."""
    user = pwd.getpwnam(spawner.user.name)
    home = Path(user.pw_dir)
    # Debian makes homes 755: one learner could read another's notebooks and feedback. Homes become the user's alone.
    if home.stat().st_mode & 0o077:
        home.chmod(0o700)
    _copy_student_copy(user)
    environment = dict(spawner.environment)
    if _is_instructor(user):
        # nbgrader's per-user extension enabling, kept in one folder for all instructors (their ~/.jupyter stays
        # theirs): Formgrader, Create Assignment and the course list; the course directory in their home, inside
        # the folder JupyterLab starts in, as Formgrader needs.
        environment["JUPYTER_CONFIG_PATH"] = str(INSTRUCTOR_CONFIG)
        environment["COURSE_NBGRADER_ROOT"] = GRADING.replace("~", user.pw_dir, 1)
    spawner.environment = environment


c.Spawner.pre_spawn_hook = before_spawn
