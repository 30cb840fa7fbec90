"""JupyterHub serving the course with each user's JupyterLab as a Slurm job (docs/guide/02-deploy.md, "A
Slurm-spawned JupyterLab"), the way batchspawner and Open OnDemand's Jupyter app run it at most centres.

    make setup HUB=1                                   # as root: the shared environment, with batchspawner
    /opt/ddl-hpc/bin/jupyterhub -f deploy/jupyterhub/jupyterhub_config_slurm.py   # as root, the first hub stopped

Everything of jupyterhub_config.py holds (PAM login, the two groups, the shared environment, the student copy on
first login, instructors' nbgrader settings): this file loads it, then changes only how a server is started.
The login node runs the hub and submits the jobs; it needs Slurm's client commands (sbatch, squeue, scancel) and
the compute nodes need the shared environment (/opt/ddl-hpc) and the users' homes at the same paths, as a
cluster's shared file system gives them. Read from the hub's environment besides jupyterhub_config.py's:

    SLURM_CONF               the cluster's slurm.conf when it is not /etc/slurm/slurm.conf (passed to sbatch)
    COURSE_CONTROLLER_HOST   the address at which the compute nodes reach this machine (default: its name)
"""

import asyncio
import os
import re
import socket
from pathlib import Path

from batchspawner import JobStatus, SlurmSpawner
from jupyterhub.spawner import SpawnException

c = get_config()  # noqa: F821  (provided by JupyterHub)
load_subconfig(str(Path(__file__).with_name("jupyterhub_config.py")))  # noqa: F821  (provided by JupyterHub)

# What a learner gets unless they change it on the spawn page. Partition: the cluster's default partition (empty);
# name yours (e.g. "interactive") if JupyterLab jobs belong elsewhere. Time: a session of the course with a
# break; when it runs out Slurm ends the job and the learner's server with it (their files stay in their home).
# Cores: one per learner is enough for the quick profile (notebook 00's two engines share it); give 2 or more
# where nodes have the cores, so engines and Horovod ranks have a core each. Memory: Slurm's default per core.
PARTITION = ""
TIME = "02:00:00"
CORES = 1
MAX_CORES = 16

# Slurm's pending reasons that never clear by waiting: the request is over a limit of the partition, account or
# QOS. The spawn then fails at once with the reason, instead of a learner watching "pending" until the timeout.
NEVER_RUNS = {
    "PartitionTimeLimit": "the time asked for is over the partition's time limit",
    "PartitionNodeLimit": "more nodes than the partition allows",
    "PartitionConfig": "the request is over a limit of the partition, its time limit for one",
    "BadConstraints": "no node has what the job asks for",
    "InvalidAccount": "the account is not valid for this user",
    "InvalidQOS": "the QOS is not valid for this user",
    "QOSMaxWallDurationPerJobLimit": "the time asked for is over the QOS's limit",
    "AssocMaxWallDurationPerJobLimit": "the time asked for is over the account's limit",
}


class SlurmSaidNo(SpawnException):
    """A spawn Slurm refused or will never run: JupyterHub shows the message as is on the spawn page."""

    def __init__(self, message: str):
        super().__init__(message, reason="slurm")
        self.jupyterhub_message = message


class CourseSlurmSpawner(SlurmSpawner):
    """batchspawner's SlurmSpawner, telling the learner Slurm's own words: sbatch's refusal, the reason a job is
    pending (squeue's %r), and a spawn that fails at once where the pending reason never clears."""

    def slurm_reason(self) -> str:
        """squeue's reason from the last query ("Resources", "PartitionTimeLimit", "None" once running)."""
        parts = (self.job_status or "").split()
        return parts[1] if len(parts) >= 2 else ""

    async def submit_batch_script(self):
        try:
            return await super().submit_batch_script()
        except RuntimeError as refused:  # sbatch's own message, e.g. "Invalid partition name specified"
            raise SlurmSaidNo(f"Slurm refused the JupyterLab job: {refused}") from None

    async def query_job_status(self):
        status = await super().query_job_status()
        reason = self.slurm_reason()
        if status == JobStatus.PENDING and reason in NEVER_RUNS:
            job = self.job_id
            await self.cancel_batch_job()
            self.clear_state()
            raise SlurmSaidNo(
                f"Slurm will not start the JupyterLab job {job}: {reason} ({NEVER_RUNS[reason]}). "
                "Ask for less on the spawn page, or another partition."
            )
        return status

    async def progress(self):
        while True:
            if self.state_ispending():
                yield {"message": f"Slurm job {self.job_id} pending in the queue: {self.slurm_reason()}"}
            elif self.state_isrunning():
                yield {"message": f"Slurm job {self.job_id} running on {self.state_gethost()}: JupyterLab starting"}
                return
            else:
                yield {"message": "Submitting the JupyterLab job to Slurm"}
            await asyncio.sleep(1)


FIELDS = {
    "partition": re.compile(r"[A-Za-z0-9_.-]*"),
    "runtime": re.compile(r"(\d+-)?\d+(:\d+){0,2}"),  # minutes, HH:MM:SS, days-hours, ...
    "nprocs": re.compile(r"\d+"),
}


def options_from_form(form: dict) -> dict:
    """The spawn page's fields as batchspawner's template values. Slurm judges the values (and refuses or holds
    the job with its reason); this only keeps anything but a name, a time and a number out of the job script."""
    options = {}
    for name, pattern in FIELDS.items():
        value = (form.get(name) or [""])[0].strip()
        if not pattern.fullmatch(value):
            raise ValueError(f"{name}: {value!r} is not a Slurm {'time' if name == 'runtime' else name}")
        options[name] = value
    if not 1 <= int(options["nprocs"]) <= MAX_CORES:
        raise ValueError(f"cores: from 1 to {MAX_CORES}")
    return options


c.JupyterHub.spawner_class = CourseSlurmSpawner
c.SlurmSpawner.req_partition = PARTITION
c.SlurmSpawner.req_runtime = TIME
c.SlurmSpawner.req_nprocs = str(CORES)
c.Spawner.options_form = f"""
<label for="partition">Slurm partition</label>
<input class="form-control" id="partition" name="partition" value="{PARTITION}" placeholder="the cluster's default">
<label for="runtime">Time limit (HH:MM:SS)</label>
<input class="form-control" id="runtime" name="runtime" value="{TIME}">
<label for="nprocs">Cores</label>
<input class="form-control" id="nprocs" name="nprocs" type="number" min="1" max="{MAX_CORES}" value="{CORES}">
"""
c.Spawner.options_from_form = options_from_form

# The job runs `srun batchspawner-singleuser jupyterhub-singleuser` from the shared environment: the same server as
# on the login node (the course, its kernel and nbgrader), started on the node Slurm picked. batchspawner-singleuser
# picks a free port there and tells the hub, which then finds the node's name with squeue (%B) and routes the
# learner to it. The server listens on all of the node's interfaces (batchspawner's --ip 0.0.0.0: which node, and so
# which address, is only known once the job runs); the proxy reaches it at the node's name on the cluster network.
PREFIX = Path(c.Spawner.cmd[0]).parent
c.SlurmSpawner.batchspawner_singleuser_cmd = str(PREFIX / "batchspawner-singleuser")
# sbatch, squeue and scancel run as the learner, so the job is theirs. batchspawner's default is `sudo -E -u
# {username}`; runuser (util-linux) does the same for a hub running as root, without a sudoers rule.
c.SlurmSpawner.exec_prefix = "/usr/sbin/runuser -u {username} --"
# squeue's reason (%r) between the state and the node: "PENDING Resources n/a", "RUNNING None vc1".
c.SlurmSpawner.batch_query_cmd = "squeue -h -j {job_id} -o '%T %r %B'"
c.SlurmSpawner.start_timeout = 300  # a queue: the job may wait for a node before JupyterLab starts
# Which Slurm: the spawner's commands and the job see SLURM_CONF when the hub has one.
if os.environ.get("SLURM_CONF"):
    c.Spawner.environment = {**c.Spawner.environment, "SLURM_CONF": os.environ["SLURM_CONF"]}

# The hub's API must be reachable from the compute nodes (the server there reports its port and checks logins
# with it): it listens at the address they reach this machine at, not 127.0.0.1. The proxy and the pages stay
# where jupyterhub_config.py put them.
NODES_REACH = os.environ.get("COURSE_CONTROLLER_HOST") or socket.getfqdn()
c.JupyterHub.hub_ip = NODES_REACH if os.environ.get("COURSE_CONTROLLER_HOST") else "0.0.0.0"
c.JupyterHub.hub_connect_ip = NODES_REACH
