"""How a batch script's header asks for GPUs and CPUs per task: counts in Slurm's GPU options, --tres-per-task
(Slurm 23.02 and later), GPU types; read as sbatch reads them (man sbatch)."""

from __future__ import annotations

from course import slurm
from course.checks.sbatch_header import Header


def gpu_count(value: str) -> int | None:
    """GPUs in a value of --gpus, --gpus-per-node or --gpus-per-task: [type:]N, or a comma list of them (summed)."""
    counts = [part.strip().split(":")[-1] for part in value.split(",")]
    return sum(int(c) for c in counts) if all(c.isdigit() for c in counts) else None


def tres_per_task(h: Header) -> dict[str, str]:
    """--tres-per-task (Slurm 23.02 and later) as {TRES: count}: 'cpu=6,gres/gpu=1' -> {'cpu': '6', 'gres/gpu':
    '1'}; a GPU type and the count after ':' (gres/gpu:a100=1, gres/gpu:1, cpu:6) are read as sbatch reads them."""
    found: dict[str, str] = {}
    for entry in (h.get("tres-per-task") or "").split(","):
        name, _, count = entry.strip().rpartition("=") if "=" in entry else entry.strip().rpartition(":")
        if name.startswith("gres/gpu"):
            found["gpu type"] = name.partition(":")[2]
            name = "gres/gpu"
        if name:
            found[name] = count
    return found


def gpus_per_task(h: Header) -> tuple[str | None, int | None]:
    """The option that asks for GPUs per task (--gpus-per-task or --tres-per-task's gres/gpu) and its count."""
    if (value := h.get("gpus-per-task")) is not None:
        return "--gpus-per-task", gpu_count(value)
    count = tres_per_task(h).get("gres/gpu")
    if count is not None:
        return "--tres-per-task", int(count) if count.isdigit() else None
    return None, None


def gpu_types(h: Header) -> dict[str, bool]:
    """Each GPU option of the header -> whether it names a GPU type (gpu:a100:8, a100:1, gres/gpu:a100=1)."""
    typed: dict[str, bool] = {}
    if (gres := h.get("gres")) is not None and slurm.gres_gpus(gres):
        typed["--gres"] = any(not p.isdigit() for p in gres.split(",")[0].split(":")[1:])
    for name in ("gpus-per-node", "gpus-per-task", "gpus"):
        if (value := h.get(name)) is not None:
            typed[f"--{name}"] = ":" in value
    if "gres/gpu" in (tres := tres_per_task(h)):
        typed["--tres-per-task"] = bool(tres["gpu type"])
    return typed


def older_tres(tres: dict[str, str], cpus: int, part: slurm.Partition, changes: list[str]) -> list[str]:
    """--tres-per-task's CPUs and GPUs as --cpus-per-task and --gpus-per-task (Slurm before 23.02 knows only those)."""
    lines = [f"#SBATCH --cpus-per-task={cpus}"] if "cpu" in tres else []
    if "gres/gpu" in tres and part.gpus_per_node:
        kind = f"{tres['gpu type']}:" if tres["gpu type"] else ""
        lines.append(f"#SBATCH --gpus-per-task={kind}{tres['gres/gpu']}")
    said = ", ".join(line.removeprefix("#SBATCH ") for line in lines) or "left out (no GPUs here)"
    changes.append(f"--tres-per-task as {said}")
    return lines
