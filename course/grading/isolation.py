"""A cluster of its own for every notebook nbgrader runs, stopped when that notebook's kernel ends.

Under `nbgrader autograde` (and `nbgrader validate`) there is no Jupyter session name, so every notebook's
`course.cluster.start()` would use the same cluster id, and inside a kernel a cluster outlives its kernel by
design (a restarted notebook re-attaches). A submission whose kernel stops early would then leave its
engines, with that learner's variables, for the next submission to attach to. nbgrader_config.py therefore
sets `c.Execute.kernel_manager_class` to `IsolatedKernelManager`: each kernel starts with a fresh
COURSE_CLUSTER_ID, and when the kernel ends (after its last cell, an error, a time limit or a crash) the
grader stops that cluster and ends any process still carrying that id. (`python -m course grade` does the
same in course.grading.execute.)
"""

from __future__ import annotations

import os
import uuid

import psutil
from jupyter_client.manager import AsyncKernelManager

ENV = "COURSE_CLUSTER_ID"


def fresh_cluster_id() -> str:
    """A cluster id no other notebook uses: course-nbgrader-<pid>-<random>."""
    return f"course-nbgrader-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def end_cluster(cluster_id: str) -> None:
    """Stop the cluster `cluster_id` from its files, then kill any process that still carries the id."""
    from course import cluster, processes

    try:
        cluster.stop(cluster_id)
    except Exception:  # a half-started cluster: the process sweep below still ends it
        pass
    me = os.getpid()
    left = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != me and proc.environ().get(ENV) == cluster_id:
                left.append(proc)
        except psutil.Error:
            continue
    processes.kill(left)


class IsolatedKernelManager(AsyncKernelManager):
    """jupyter_client's kernel manager, with a cluster id per kernel and the cluster ended with the kernel."""

    cluster_id = ""

    async def start_kernel(self, **kw):
        if not self.cluster_id:  # a restarted kernel keeps its notebook's cluster id
            self.cluster_id = fresh_cluster_id()
        env = dict(kw.pop("env", None) or os.environ)
        env[ENV] = self.cluster_id
        return await super().start_kernel(env=env, **kw)

    async def cleanup_resources(self, restart: bool = False) -> None:
        # nbclient calls this whenever a notebook's kernel is done with, alive or dead
        try:
            await super().cleanup_resources(restart=restart)
        finally:
            if not restart and self.cluster_id:
                end_cluster(self.cluster_id)
