"""Open OnDemand's part in starting deploy/ondemand/ddl-hpc, for tests/test_hub.py: what the dashboard does between a
learner's Launch and the Slurm job, with the app's own files and Ruby's own ERB (Debian's `ruby`).

OnDemand itself (a Rails dashboard behind Apache, per-user nginx) does not install from the registries this project
uses, so its few steps are done here as its code and documentation describe them: the form's values (form.yml's
fixed attributes and defaults, then the learner's answers), the session's folder staged from the app's template/
with every *.erb rendered (tests/ondemand_render.rb), submit.yml.erb and the form's own attributes turned into sbatch
options as OnDemand's Slurm adapter does, and the job script wrapped as the "basic" template wraps it: helpers,
before.sh sourced, script.sh started (its pid in SCRIPT_PID), after.sh sourced, connection.yml written. The helpers
are written here, with the names and meaning OnDemand gives them (find_port, create_passwd, wait_until_port_used),
not copied; port_used asks `nc` alone, as OnDemand's older helpers do, on nodes without nc (a site engineer's case:
`nc` here always fails as a missing command does), so an app that leaned on them would never see its port in use.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "deploy" / "ondemand" / "ddl-hpc"
RENDER = Path(__file__).with_name("ondemand_render.rb")
TOKEN = "sys/ddl-hpc"  # a system app's token: its folder under the portal's apps/sys/
JOB_NAME = f"sys/dashboard/{TOKEN}"  # OnDemand's job name: the dashboard's path, then the app's token
RUBY = shutil.which("ruby") or "/usr/bin/ruby"

# The job script's body around the staged files, as the "basic" template runs them (work dir, helpers, before.sh,
# script.sh in the background, after.sh, connection.yml with host, port and password readable by the user alone).
BASIC = r"""
cd {staged}
export host port

# A node without netcat (whatever this machine has): the command is not found.
nc() {{ echo "nc: command not found" >&2; return 127; }}

# OnDemand's helpers, by the names its templates call them.
port_used() {{  # is something listening at HOST:PORT (or PORT on localhost)? (nc alone, as older OnDemand asks)
  local where=${{1%:*}} number=${{1##*:}}
  [ "$where" = "$1" ] && where=localhost
  nc -w 2 "$where" "$number" </dev/null >/dev/null 2>&1
}}
find_port() {{  # a port in [$2, $3] nothing listens on at host $1
  local candidate
  for candidate in $(shuf -i "${{2:-2000}}-${{3:-65535}}" -n 500); do
    port_used "${{1:-localhost}}:$candidate" || {{ echo "$candidate"; return 0; }}
  done
  echo "no free port found on ${{1:-localhost}}" >&2
  return 1
}}
wait_until_port_used() {{  # wait up to $2 seconds (30) for something to listen at $1
  local tries
  for ((tries = 0; tries < ${{2:-30}} * 2; tries++)); do
    port_used "$1" && return 0
    sleep 0.5
  done
  return 1
}}
create_passwd() {{  # $1 random letters and digits
  tr -dc 'A-Za-z0-9' </dev/urandom 2>/dev/null | head -c "${{1:-8}}"
}}
export -f nc port_used find_port wait_until_port_used create_passwd

host=$(hostname)
[ -e {staged}/before.sh ] && source {staged}/before.sh
{staged}/script.sh &
SCRIPT_PID=$!
[ -e {staged}/after.sh ] && source {staged}/after.sh
(umask 077 && printf 'host: %s\nport: %s\npassword: %s\n' "$host" "$port" "$password" > {staged}/connection.yml)
wait "$SCRIPT_PID"
"""


def context(form_yml: Path, answers: dict[str, str]) -> dict[str, str]:
    """The values the templates see: every attribute of the form (a fixed value, else the field's default), the
    cluster, then what the learner chose (ANSWERS). Strings, as a browser's form posts them."""
    form = yaml.safe_load(form_yml.read_text())
    values = {"cluster": str(form.get("cluster", ""))}
    for name in form["form"]:
        given = form.get("attributes", {}).get(name, "")
        values[name] = str(given.get("value", "") if isinstance(given, dict) else given)
    return values | {name: str(value) for name, value in answers.items()}


def staged_root(home: Path) -> Path:
    """A new session's folder in the learner's home, where OnDemand keeps a system app's sessions."""
    return home / "ondemand/data/sys/dashboard/batch_connect" / TOKEN / "output" / str(uuid.uuid4())


def renderer(app: Path) -> Path:
    """Where the app's test installs the renderer, beside the apps folder: the dashboard OnDemand installs for every
    user, so a learner's Ruby can read it (the checkout is closed to learners, as the guide says)."""
    return app.parent.parent / RENDER.name


def stage_command(app: Path, staged: Path, context_file: Path) -> list[str]:
    """Ruby rendering the app's templates into STAGED; prints submit.yml.erb's settings as JSON."""
    return [RUBY, str(renderer(app)), "stage", str(app), str(staged), str(context_file)]


def view_command(app: Path, connection: Path) -> list[str]:
    """Ruby rendering view.html.erb with connection.yml's values; prints the HTML."""
    return [RUBY, str(renderer(app)), "view", str(app), str(connection)]


def sbatch(values: dict[str, str], submit: dict, staged: Path) -> tuple[list[str], str]:
    """The sbatch command and job script OnDemand's Slurm adapter submits: the session's folder, name and log,
    the partition (bc_queue) and hours (bc_num_hours) of the form, no environment of the portal (--export NONE),
    then submit.yml.erb's native options; the script is the basic template's, run by /bin/bash."""
    script = submit.get("script", {})
    args = ["sbatch", "-D", str(staged), "-J", JOB_NAME, "-o", str(staged / "output.log")]
    if values.get("bc_queue", "").strip():
        args += ["-p", values["bc_queue"].strip()]
    hours = int(values.get("bc_num_hours") or 1)
    args += ["-t", f"{hours:02d}:00:00", "--export", "NONE", *map(str, script.get("native", [])), "--parsable"]
    assert submit.get("batch_connect", {}).get("template") == "basic", submit
    return args, "#!/bin/bash\n" + BASIC.format(staged=staged)


def connection(staged: Path) -> dict | None:
    """connection.yml of a session once the job wrote it (None before)."""
    file = staged / "connection.yml"
    return yaml.safe_load(file.read_text()) if file.exists() else None


def write_json(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path
