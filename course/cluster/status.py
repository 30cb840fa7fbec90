"""What a cluster reports about itself: its controller and each engine, running or not, as `Cluster.status()` and
`inspect` (another process's read-only look) return it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineState:
    """One engine as `status()` sees it."""

    id: int
    host: str
    pid: int
    alive: bool
    device: str = ""


@dataclass
class Status:
    """What `Cluster.status()` reports."""

    cluster_id: str
    kind: str
    controller_alive: bool
    engines: list[EngineState]
    expected: int
    slurm_job: str = ""
    slurm_state: str = ""
    stopped: bool = False
    state: str = ""  # "starting", "ended" or why it cannot be asked, as another process sees it (`inspect`)
    holders: str = ""  # processes that started or use it and are still running

    @property
    def dead(self) -> list[int]:
        return [e.id for e in self.engines if not e.alive]

    @property
    def alive(self) -> int:
        return sum(e.alive for e in self.engines)

    @property
    def ok(self) -> bool:
        return self.state == "starting" or (not self.state and self.controller_alive and self.alive == self.expected)

    def __str__(self) -> str:
        if self.stopped:
            return f"cluster {self.cluster_id} ({self.kind}): stopped"
        if self.state == "starting":
            return f"cluster {self.cluster_id} ({self.kind}): starting {self.expected} engine(s)" + (
                f" (process {self.holders})" if self.holders else ""
            )
        if self.state == "stopping":
            return f"cluster {self.cluster_id} ({self.kind}): being stopped"
        if self.state == "ended":
            return f"cluster {self.cluster_id} ({self.kind}): ended (none of its processes is running)"
        if self.state:
            return f"cluster {self.cluster_id} ({self.kind}): {self.state}"
        head = (
            f"cluster {self.cluster_id} ({self.kind}): controller {'running' if self.controller_alive else 'DOWN'}, "
            f"{self.alive} of {self.expected} engines running"
        )
        if self.slurm_job:
            head += f"; Slurm job {self.slurm_job} {self.slurm_state or 'gone'}"
        rows = [
            f"  engine {e.id:>3}  {'running' if e.alive else 'DEAD   '}  {e.host}:{e.pid}  {e.device}"
            for e in self.engines
        ]
        tail = (
            [f"  engine(s) {', '.join(map(str, self.dead))} died: restart with cluster.restart()"] if self.dead else []
        )
        if not self.controller_alive and self.holders:
            tail.append(
                f"  its controller is gone while process {self.holders} uses it; stop it with: "
                f"python -m course cluster stop --id {self.cluster_id}"
            )
        return "\n".join([head, *rows, *tail])

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))
