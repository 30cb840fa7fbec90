"""Checking a batch script a learner wrote by hand: its `#SBATCH` lines read as sbatch reads them, each wrong or
missing option named against what the exercise asks; then run for real where a partition has the exercise's shape
(sbatch_run), or else (where a Slurm answers) `sbatch --test-only` on it.

    want = sbatch_script.Exercise(nodes=2, gpus_per_node=8, cores_per_node=48, cpus_per_task=6, time="00:45:00")
    sbatch_script.problems(Path("job.sbatch").read_text(), want)    # [] or one sentence per mistake
    print(sbatch_script.check("job.sbatch", want))                  # AssertionError listing them, or what Slurm said

The problems say what is wrong and why (per node or per job, one rank per GPU, %j, the launcher), never the
whole right script. The header is read by sbatch's own rules (sbatch_header.py); Slurm vocabulary (partitions,
what a node offers) comes from course.slurm.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from course import slurm
from course.checks import sbatch_run
from course.checks.sbatch_gpus import gpu_count, gpu_types, gpus_per_task, older_tres, tres_per_task
from course.checks.sbatch_header import Header, read, read_options
from course.checks.sbatch_ranks import mpiexec_gpus, per_rank_variables, split_srun, srun_cpus, threads

LAUNCHERS = ("mpiexec", "mpirun", "srun", "horovodrun")


def _minutes(total: int) -> str:
    return f"{total // 3600} h {total % 3600 // 60:02d} min" if total >= 3600 else f"{total / 60:g} min"


@dataclass
class Exercise:
    """What a batch-script exercise asks for: the layout, the time limit, the files and the program to start."""

    nodes: int
    gpus_per_node: int
    cpus_per_task: int
    time: str
    cores_per_node: int | None = None
    job_name: str | None = None
    folder: str | None = None  # where .out and .err go (relative to the folder the script is submitted from)
    module: str = "course.programs.horovod_mnist"
    epochs: int | None = None

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node


def problems(text: str, want: Exercise, submit_dir: str | Path = ".") -> list[str]:
    """Every wrong or missing part of the script against the exercise, one sentence each ([] when it is right)."""
    h = read(text)
    found = (
        []
        if h.shebang
        else ["the first line must be an interpreter line such as #!/bin/bash (sbatch refuses a script without one)"]
    )
    found += h.slips
    found += _layout(h, want)
    found += _limit(h, want)
    found += _files(h, want, Path(submit_dir))
    found += _launch(h, want)
    found += per_rank_variables(h)
    found += threads(h, want.cpus_per_task)
    return found


def _count(h: Header, name: str) -> tuple[int | None, str | None]:
    """An option's whole-number value (None if absent), or the problem with it."""
    value = h.get(name)
    if value is None:
        return None, None
    if not value.strip().isdigit() or int(value) < 1:
        return None, f"--{name} {value!r} is not a whole number of at least 1"
    return int(value), None


def tasks_per_node(h: Header, want: Exercise) -> int | None:
    """The tasks Slurm starts on each node: --ntasks-per-node, or --ntasks where one GPU per task (--gpus-per-task)
    leaves no other way to place them on the exercise's nodes (each node holds at most its GPUs / GPUs per task)."""
    per_node, ntasks, per_task = h.get("ntasks-per-node"), h.get("ntasks"), gpus_per_task(h)[1]
    if per_node is not None:
        return int(per_node) if per_node.strip().isdigit() else None
    per_gpu = h.get("ntasks-per-gpu")  # tasks per GPU of a node: with the node's GPUs asked per node, tasks per node
    node_gpus = slurm.gres_gpus(h.get("gres") or "") or gpu_count(h.get("gpus-per-node") or "")
    if per_gpu is not None and per_gpu.strip().isdigit() and node_gpus and ntasks is None:
        return int(per_gpu) * node_gpus
    if ntasks is None or not ntasks.strip().isdigit() or not per_task:
        return None
    most = want.gpus_per_node // per_task  # tasks a node can hold, each with its own GPUs
    return most if int(ntasks) == want.nodes * most and most > 0 else None


def gpus_per_node(h: Header, want: Exercise) -> dict[str, int | None]:
    """Each GPU option of the header -> the GPUs per node it asks for (None where it does not say), by Slurm's
    documented meaning: --gres=gpu[:type]:N and --gpus-per-node=[type:]N per node, --gpus-per-task=[type:]N times
    the tasks of a node, --gpus=[type:]N for the whole job (per node only where it is every GPU of the nodes)."""
    asked: dict[str, int | None] = {}
    if (gres := h.get("gres")) is not None:
        asked["--gres"] = slurm.gres_gpus(gres) or None
    if (per_node := h.get("gpus-per-node")) is not None:
        asked["--gpus-per-node"] = gpu_count(per_node)
    where, count = gpus_per_task(h)
    if where is not None:
        tasks = tasks_per_node(h, want)
        asked[where] = count * tasks if count is not None and tasks else None
    if (total := h.get("gpus")) is not None:
        count = gpu_count(total)
        asked["--gpus"] = want.gpus_per_node if count == want.ranks and h.get("nodes") == str(want.nodes) else None
    return asked


def placement(text: str, want: Exercise) -> tuple[int | None, int | None, int | None]:
    """(nodes, tasks per node, GPUs per node) a script asks Slurm for, read by Slurm's rules (None where it does not
    say, or says it in a way Slurm may place unevenly); several GPU options must agree."""
    h = read(text)
    nodes = h.get("nodes")
    gpus = {n for n in gpus_per_node(h, want).values()}
    return (
        int(nodes) if nodes and nodes.isdigit() else None,
        tasks_per_node(h, want),
        gpus.pop() if len(gpus) == 1 else None,
    )


def _layout(h: Header, want: Exercise) -> list[str]:
    found = []
    nodes, bad = _count(h, "nodes")
    found += [bad] if bad else []
    if nodes is None and not bad:
        found.append(f"no --nodes (-N): Slurm picks the number of nodes itself; the exercise asks for {want.nodes}")
    elif nodes is not None and nodes != want.nodes:
        found.append(f"--nodes is {nodes} but the exercise asks for {want.nodes} node(s)")
    per_node, bad = _count(h, "ntasks-per-node")
    found += [bad] if bad else []
    ntasks, bad_total = _count(h, "ntasks")
    found += [bad_total] if bad_total else []
    gpus = want.gpus_per_node
    if per_node is not None:
        if per_node == want.ranks and want.nodes > 1:
            found.append(
                f"--ntasks-per-node is {per_node}, the ranks of the whole job: it counts the tasks of ONE "
                f"node, and a node has {gpus} GPUs (one rank per GPU)"
            )
        elif per_node != gpus:
            found.append(f"--ntasks-per-node is {per_node} but the nodes have {gpus} GPUs: one rank per GPU")
    elif (implied := tasks_per_node(h, want)) is not None and ntasks is None:
        if implied != gpus:
            found.append(
                f"--ntasks-per-gpu gives {implied} task(s) per node but the nodes have {gpus} GPUs: one rank per GPU"
            )
    elif ntasks is not None:
        if tasks_per_node(h, want) is None:
            found.append(
                f"--ntasks={ntasks} lets Slurm spread the tasks over the nodes as it likes: ask for the tasks of "
                f"each node (--ntasks-per-node) so that every node runs one rank per GPU"
            )
    elif not bad and not bad_total:
        found.append(
            f"no --ntasks-per-node: Slurm starts one task per node, but a node has {gpus} GPUs and Horovod "
            f"runs one rank per GPU"
        )
    found += _gpus(h, want)
    found += _cpus(h, want, per_node)
    return found


def _cpus_asked(h: Header) -> tuple[str, int | None, list[str]]:
    """The option that gives each rank its CPUs (--cpus-per-task, --tres-per-task=cpu=N, or --cpus-per-gpu: one
    GPU per rank, so CPUs per GPU are CPUs per rank), its value, and what is wrong with it."""
    given = [n for n in ("cpus-per-task", "cpus-per-gpu") if h.get(n) is not None]
    given += ["tres-per-task"] if "cpu" in tres_per_task(h) else []
    if len(given) > 1:
        both = " and ".join(f"--{n}" for n in given)
        return given[0], None, [f"{both} together: sbatch refuses the job (they are mutually exclusive): keep one"]
    if given == ["tres-per-task"]:
        value = tres_per_task(h)["cpu"]
        ok = value.isdigit() and int(value) >= 1
        return (
            "tres-per-task=cpu",
            int(value) if ok else None,
            [] if ok else [f"--tres-per-task cpu={value!r} is not a whole number of at least 1"],
        )
    name = given[0] if given else "cpus-per-task"
    cpus, bad = _count(h, name)
    return name, cpus, [bad] if bad else []


def _cpus(h: Header, want: Exercise, per_node: int | None) -> list[str]:
    gpus = want.gpus_per_node
    name, cpus, found = _cpus_asked(h)
    bad = bool(found)
    share = (
        f"a node's {want.cores_per_node} cores shared evenly by its {gpus} ranks"
        if want.cores_per_node
        else "the exercise asks for another number of cores per rank"
    )
    if cpus is None and not bad:
        found.append(f"no --cpus-per-task (-c): each rank would get one core; {share} give each more")
    elif cpus is not None and cpus != want.cpus_per_task:
        whole = (
            " (that is a whole node's cores: this option counts per task, i.e. per rank)"
            if want.cores_per_node and cpus == want.cores_per_node
            else ""
        )
        found.append(
            f"--{name} is {cpus}{whole}, but {share} give each {'fewer' if cpus > want.cpus_per_task else 'more'}"
        )
    if want.cores_per_node and per_node and cpus and per_node * cpus > want.cores_per_node:
        found.append(
            f"{per_node} task(s) per node x {cpus} CPU(s) per task = {per_node * cpus} cores, but a node has "
            f"{want.cores_per_node}: no node could run this job"
        )
    return found


def _gpus(h: Header, want: Exercise) -> list[str]:
    asked = gpus_per_node(h, want)
    if not asked:
        return [
            "no GPUs asked for (per node, per task or for the whole job): the job would get none, and the ranks "
            "would train on the CPUs"
        ]
    found = []
    typed = gpu_types(h)
    if len(set(typed.values())) > 1:
        with_type = ", ".join(f"{k}={h.get(k[2:])}" for k, t in typed.items() if t)
        without = ", ".join(f"{k}={h.get(k[2:])}" for k, t in typed.items() if not t)
        found.append(
            f'{with_type} names a GPU type and {without} does not: sbatch refuses such a job ("Invalid GRES '
            f'specification (with and without type identification)"): give the type in every GPU option or in none'
        )
    for where, count in asked.items():
        value = h.get(where[2:])
        if count == want.gpus_per_node:
            continue
        if where == "--gres" and count is None:
            found.append(f"--gres={value} asks for no GPU: write it as gpu:N (N GPUs per node)")
        elif where == "--gpus":
            found.append(
                f"--gpus={value} counts the GPUs of the whole job, and Slurm may place them unevenly over the nodes "
                f"unless they are all the GPUs of the nodes you ask for: ask per node, per task, or for all of them"
            )
        elif where in ("--gpus-per-task", "--tres-per-task"):
            tasks = tasks_per_node(h, want)
            found.append(
                f"{where} {value!r} is not a number of GPUs"
                if gpus_per_task(h)[1] is None
                else f"{where}={value} needs a known number of tasks per node (--ntasks-per-node)"
                if not tasks
                else f"{where}={value} with {tasks} task(s) per node asks for {count} GPU(s) per node, but "
                f"the exercise's nodes have {want.gpus_per_node}: one GPU per rank"
            )
        elif count is None:
            found.append(f"{where} {value!r} is not a number of GPUs")
        elif count == want.ranks and want.nodes > 1:
            found.append(f"{where} asks for {count} GPUs per node, the GPUs of the whole job: it counts per node")
        else:
            found.append(
                f"{where} asks for {count} GPU(s) per node but the exercise's nodes have {want.gpus_per_node}: "
                f"use them all"
            )
    return found


def _limit(h: Header, want: Exercise) -> list[str]:
    value = h.get("time")
    if value is None:
        return [
            "no --time (-t): the partition's default limit applies - often the maximum, which makes the job wait "
            "longer for a slot, or a short one that kills it"
        ]
    got, asked = slurm.time_limit_seconds(value), slurm.time_limit_seconds(want.time)
    if got is None:
        return [f"--time {value!r} is not a Slurm time limit: write HH:MM:SS (or minutes, or D-HH:MM:SS)"]
    if got != asked:
        return [f"--time {value} is {_minutes(got)}, but the exercise asks for {_minutes(asked)}"]
    return []


def _files(h: Header, want: Exercise, submit_dir: Path) -> list[str]:
    found = []
    if want.job_name is not None and h.get("job-name") != want.job_name:
        name = h.get("job-name")
        found.append(
            "no --job-name (-J): the queue would show the script's file name"
            if name is None
            else f"--job-name is {name!r}, not the name the exercise asks for"
        )
    chdir = h.get("chdir")
    base = submit_dir / chdir if chdir else submit_dir
    for name, letter, kind, missing in (
        (
            "output",
            "o",
            ".out",
            "Slurm writes slurm-%j.out in the folder you submit from, mixed with every other job's",
        ),
        ("error", "e", ".err", "errors would go into the --output file, mixed with the training's output"),
    ):
        value = h.get(name)
        if value is None:
            found.append(f"no --{name} (-{letter}): {missing}")
            continue
        if "%j" not in value and "%A" not in value:
            found.append(f"--{name} has no %j: every job would overwrite the same {kind} file")
        folder = (base / value).parent
        if want.folder is not None and folder.resolve() != (submit_dir / want.folder).resolve():
            found.append(f"--{name} goes to the folder {folder}, not to {want.folder}/ as the exercise asks")
        elif not folder.is_dir():
            found.append(
                f"--{name}: the folder {folder} does not exist, and Slurm does not create it (the job would "
                f"fail without writing a word)"
            )
    if h.get("output") is not None and h.get("output") == h.get("error"):
        found.append("--output and --error are the same file: give the errors their own .err file")
    return found


def launch_words(h: Header, want: Exercise) -> tuple[int, list[str] | None] | None:
    """(line number, words) of the first command that runs want.module, without the environment assignments and
    exec/time before it (words None where its quotes do not balance); None when no command runs it."""
    runs = [(n, line) for n, line in h.commands if want.module in line]
    if not runs:
        return None
    number, line = runs[0]
    try:
        words = shlex.split(line)
    except ValueError:
        return number, None
    while words and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]) or words[0] in ("exec", "time", "command")):
        words = words[1:]
    return number, words


def _count_word(words: list[str]) -> str | None:
    """The rank count written on a launch line (-np/-n/--ntasks and the like), or None."""
    counts = ("-n", "--ntasks") if Path(words[0]).name == "srun" else ("-n", "-np", "--np", "-c")
    for i, word in enumerate(words[:-1]):
        if word in counts or word.startswith(("--ntasks=", "-n=")):
            return word.split("=", 1)[1] if "=" in word else words[i + 1]
    return None


def ranks_started(text: str, want: Exercise) -> int | None:
    """How many ranks the script's launch line starts: its count ($SLURM_NTASKS: the job's tasks) or, with none,
    every task of the job (mpiexec and srun in a batch job start one per task); 1 without a launcher."""
    found = launch_words(read(text), want)
    words = found[1] if found else None
    if not words:
        return None
    launcher = Path(words[0]).name
    if launcher not in LAUNCHERS:
        return 1
    nodes, per_node, _ = placement(text, want)
    tasks = nodes * per_node if nodes and per_node else None
    count = _count_word(words)
    if count is None:
        return None if launcher == "horovodrun" else tasks
    if count.isdigit():
        return int(count)
    return tasks if count.strip("${}") == "SLURM_NTASKS" else None


def _launch(h: Header, want: Exercise) -> list[str]:
    found_line = launch_words(h, want)
    if found_line is None:
        return [
            f"no launch line starts the ranks: no command runs python -m {want.module}, so the job would hold "
            f"the nodes and do nothing"
        ]
    number, words = found_line
    if words is None:
        return [f"line {number}: unbalanced quotes in the launch line"]
    launcher = Path(words[0]).name if words else ""
    found = []
    if launcher not in LAUNCHERS:
        found.append(
            f"line {number} starts ONE python process, not one per task: start the ranks with "
            f"mpiexec -np $SLURM_NTASKS (or srun)"
        )
    elif launcher == "horovodrun" and not {"-H", "--hosts", "-hostfile", "--hostfile"} & set(words):
        found.append(
            f"line {number}: horovodrun without -H/--hostfile starts every rank on the first node: in a "
            f"batch job use mpiexec -np $SLURM_NTASKS or srun, which know the allocation"
        )
    elif launcher == "horovodrun" and _one_host(words) and (_count(h, "nodes")[0] or 1) > 1:
        found.append(
            f"line {number}: horovodrun -H names one host, so every rank starts on the first node of the "
            f"{_count(h, 'nodes')[0]} the job holds: in a batch job use mpiexec -np $SLURM_NTASKS or srun, which know "
            "the allocation"
        )
    else:
        found += _rank_count(words, number, want)
        if launcher == "srun":
            found += srun_cpus(h, words, number)
        found += mpiexec_gpus(h, words, number)
        if (
            launcher in ("mpiexec", "mpirun")
            and not any(w.lstrip("-") == "bind-to" for w in words)
            and not any("PE=" in w for w in words)
        ):
            found.append(
                f"line {number}: mpiexec binds each rank to one core (or socket) by default, whatever "
                f"--cpus-per-task gave it: add --bind-to none (the GPUs do the work)"
            )
    try:
        args = words[words.index(want.module) + 1 :]
    except ValueError:
        return found + [f"line {number} mentions {want.module} but does not run it with python -m {want.module}"]
    found += _program_args(args, number, want)
    return found


def _one_host(words: list[str]) -> bool:
    """horovodrun's -H/--hosts names a single host (localhost:N, or one name)."""
    at = next((i for i, w in enumerate(words) if w in ("-H", "--hosts")), None)
    hosts = words[at + 1] if at is not None and at + 1 < len(words) else ""
    return bool(hosts) and "," not in hosts and "$" not in hosts.split(":")[0]


def _rank_count(words: list[str], number: int, want: Exercise) -> list[str]:
    value = _count_word(words)
    if value is None:
        return []
    if value.isdigit():
        if int(value) != want.ranks:
            return [
                f"line {number} starts {value} rank(s) but the job has {want.ranks} tasks: take the number "
                f"from Slurm ($SLURM_NTASKS) rather than writing it"
            ]
    elif value.strip("${}") in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        return [f"line {number}: {value} is the number of nodes: that starts one rank per node, not per GPU"]
    elif value.strip("${}") in ("SLURM_NTASKS_PER_NODE", "SLURM_GPUS_ON_NODE", "SLURM_CPUS_PER_TASK"):
        return [f"line {number}: {value} counts one node (or one task): the ranks of the job are $SLURM_NTASKS"]
    return []


def _program_args(args: list[str], number: int, want: Exercise) -> list[str]:
    if want.module != "course.programs.horovod_mnist":
        return []
    from course.programs import horovod_mnist

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            parsed = horovod_mnist.parse(args)
    except SystemExit:
        why = [line for line in said.getvalue().splitlines() if line.strip()]
        return [f"line {number}: the training refuses its arguments: {why[-1] if why else 'unknown argument'}"]
    if want.epochs is not None and parsed.epochs != want.epochs:
        return [f"line {number} trains {parsed.epochs} epoch(s) but the exercise asks for {want.epochs} (--epochs)"]
    return []


# ------------------------------------------------------------------------------- sbatch --test-only


def srun_problems(words: list[str], ntasks: int, cpus_per_task: int, time: str, program: list[str]) -> list[str]:
    """What is wrong in an `srun` command (a list of words) that should run `program` as `ntasks` task(s) of
    `cpus_per_task` CPUs each within `time`, one sentence each ([] when it is right). Options read as sbatch's."""
    words = [str(w) for w in words] if isinstance(words, (list, tuple)) else []
    if not words or words[0] != "srun":
        return ["give the command as a list of words starting with 'srun', e.g. ['srun', '--ntasks=...', ...]"]
    options, rest = split_srun(words)
    header = Header()
    read_options(" ".join(shlex.quote(o) for o in options), 1, header)
    found = [slip.replace("line 1: ", "").replace("sbatch", "srun") for slip in header.slips]
    for name, short, want in (("ntasks", "-n", ntasks), ("cpus-per-task", "-c", cpus_per_task)):
        got = header.get(name)
        if got is None:
            found.append(f"no --{name} ({short}): ask for {want}")
        elif got != str(want):
            found.append(f"--{name} is {got}, the exercise asks for {want}")
    limit = header.get("time")
    if limit is None:
        found.append("no --time (-t): without one the step gets the partition's default limit")
    elif (got := slurm.time_limit_seconds(limit)) != (asked := slurm.time_limit_seconds(time)):
        found.append(
            f"--time {limit} is {_minutes(got) if got else 'not a time limit'}, the exercise asks for {_minutes(asked)}"
        )
    if rest != [str(w) for w in program]:
        found.append(
            f"after srun's options comes the program, {' '.join(map(str, program[-4:]))} run by this "
            f"notebook's Python (sys.executable, so the compute node uses the same environment); got "
            f"{' '.join(rest) or 'nothing'}"
        )
    return found


@dataclass
class Verdict:
    """What `sbatch --test-only` said about a script (adapted to this machine's partition: `changes`)."""

    accepted: bool
    line: str
    changes: list[str]

    def __str__(self) -> str:
        adapted = f" (adapted to this machine: {'; '.join(self.changes)})" if self.changes else ""
        return f"Slurm {'accepts' if self.accepted else 'refuses'} it{adapted}: {self.line}"


def adapt(text: str, part: slurm.Partition) -> tuple[str, list[str]]:
    """The script with its layout shrunk to what `part` offers (nodes, tasks, cores, GPUs, partition) and what changed.

    Everything else (time, files, names, options sbatch does not know) is kept as written, so Slurm still judges it.
    """
    h = read(text)
    changes: list[str] = []
    values: dict[str, str | None] = {}
    tres = tres_per_task(h)
    for name in ("nodes", "ntasks-per-node", "cpus-per-task", "ntasks"):
        value = h.get(name)
        values[name] = value
    values["cpus-per-task"] = values["cpus-per-task"] or tres.get("cpu") or h.get("cpus-per-gpu")
    nodes = int(values["nodes"]) if (values["nodes"] or "").isdigit() else 1
    tasks = int(values["ntasks-per-node"]) if (values["ntasks-per-node"] or "").isdigit() else 1
    cpus = int(values["cpus-per-task"]) if (values["cpus-per-task"] or "").isdigit() else 1
    new = {"nodes": min(nodes, part.nodes), "ntasks-per-node": min(tasks, part.cpus_per_node)}
    total = values["ntasks"]
    if (total or "").isdigit() and values["ntasks-per-node"] is None:  # --ntasks alone: its share of each node
        new["ntasks"] = min(int(total), new["nodes"] * part.cpus_per_node)
        new["ntasks-per-node"] = -(-new["ntasks"] // new["nodes"])
    elif (total or "").isdigit():
        new["ntasks"] = min(int(total), new["nodes"] * new["ntasks-per-node"])
    new["cpus-per-task"] = max(1, min(cpus, part.cpus_per_node // new["ntasks-per-node"]))
    out = ["#!/bin/bash"] if h.shebang else []
    for option in h.options:
        name, value = option.name, option.value
        if name in new and (value or "").isdigit():
            if int(value) != new[name]:
                changes.append(f"--{name} {value} -> {new[name]}")
            value = str(new[name])
        elif name == "tres-per-task":  # Slurm 23.02's: said the older way, which every Slurm here knows
            out += older_tres(tres, new["cpus-per-task"], part, changes)
            continue
        elif name == "cpus-per-gpu" and part.gpus_per_node == 0:
            changes.append(f"--cpus-per-gpu={value} -> --cpus-per-task={new['cpus-per-task']} (no GPUs here)")
            out.append(f"#SBATCH --cpus-per-task={new['cpus-per-task']}")
            continue
        elif name in ("gres", "gpus-per-node", "gpus", "gpus-per-task", "ntasks-per-gpu") and part.gpus_per_node == 0:
            changes.append(f"--{name} left out (no GPUs here)")
            continue
        elif name in ("partition", "account", "qos", "reservation", "constraint", "nodelist", "exclude"):
            changes.append(f"--{name} left out (the site's own)")
            continue
        if name is None:
            out.append(f"#SBATCH {option.written}")
        else:
            out.append(f"#SBATCH --{name}" + (f"={value}" if value is not None else ""))
    out.append(f"#SBATCH --partition={part.name}")
    out.append("true")
    return "\n".join(out) + "\n", changes


def ask_slurm(text: str, partition: str | None = None) -> Verdict | None:
    """`sbatch --test-only` on the script adapted to this machine's partition; None where no Slurm answers here."""
    known = slurm.partitions()
    if not known:
        return None
    part = next((p for p in known if p.name == partition), known[0])
    adapted, changes = adapt(text, part)
    with tempfile.NamedTemporaryFile("w", suffix=".sbatch", prefix="test-only-", delete=False) as file:
        file.write(adapted)
    try:
        done = slurm.run([slurm.tool("sbatch"), "--test-only", file.name], timeout=60)
    finally:
        Path(file.name).unlink(missing_ok=True)
    said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    errors = [line for line in said if re.search(r"error|unrecognized|invalid|failure|not available", line, re.I)]
    line = (errors or said or ["(sbatch said nothing)"])[0]
    return Verdict(done.returncode == 0, line, changes)


class ScriptProblems(AssertionError):
    """The script's problems, one per line (an AssertionError, so a notebook's check cell fails with them)."""


def check(script_file: str | Path, want: Exercise) -> str:
    """Raise ScriptProblems naming each wrong or missing part; then run it where a partition here has the
    exercise's shape (sbatch_run), else ask Slurm (--test-only); say what it found."""
    path = Path(script_file)
    if not path.is_file():
        raise ScriptProblems(f"no script at {path}: run the %%writefile cell first")
    text = path.read_text(errors="replace")
    found = problems(text, want, path.parent)
    if found:
        raise ScriptProblems(f"{len(found)} thing(s) to fix in {path.name}:\n" + "\n".join(f"- {p}" for p in found))
    part = sbatch_run.site_partition(want)
    if part is not None:
        return _ran(text, want, part, path)
    judged = f"judged from the text by Slurm's rules (no partition here has {want.nodes} nodes of {want.gpus_per_node} GPUs to run it)"
    verdict = ask_slurm(text)
    if verdict is None:
        return f"{RIGHT}, {judged}."
    if not verdict.accepted:
        raise ScriptProblems(str(verdict))
    return f"{RIGHT}, {judged}. {verdict}"


RIGHT = "Every #SBATCH line and the launch line are right"


def _ran(text: str, want: Exercise, part: slurm.Partition, path: Path) -> str:
    """The script run on `part` with a probe: what its ranks got, or ScriptProblems naming what differs."""
    try:
        ranks, failed = sbatch_run.run(text, want, part, path.parent)
    except TimeoutError as late:  # a busy queue is no fault of the script's
        return f"{RIGHT}, judged from the text by Slurm's rules ({late})."
    ran = [failed] if failed else sbatch_run.problems(ranks, want)
    if ran:
        raise ScriptProblems(
            f"{RIGHT} as written, but run on Slurm's partition {part.name} (the program replaced by a probe):\n"
            + "\n".join(f"- {p}" for p in ran)
        )
    return f"{RIGHT}, and {sbatch_run.summary(ranks, part)}."


def run_on_site(script_file: str | Path, want: Exercise) -> list[str]:
    """What differs when the script runs on a partition of the exercise's shape; [] where none is here."""
    part = sbatch_run.site_partition(want)
    if part is None:
        return []
    try:
        ranks, failed = sbatch_run.run(
            Path(script_file).read_text(errors="replace"), want, part, Path(script_file).parent
        )
    except TimeoutError:  # not run: the text's rules alone judge it
        return []
    return [failed] if failed else sbatch_run.problems(ranks, want)
