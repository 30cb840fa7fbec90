"""course.checks.sbatch_script: hand-written batch scripts read as sbatch reads them, each mistake named, and
`sbatch --test-only` asked for real on the test suite's Slurm."""

from __future__ import annotations

import pytest

from course import jobs
from course.checks import sbatch_ranks, sbatch_script
from course.slurm import time_limit_seconds
from course.checks.sbatch_script import Exercise

WANT = Exercise(
    nodes=2,
    gpus_per_node=8,
    cores_per_node=48,
    cpus_per_task=6,
    time="00:45:00",
    job_name="hvd-mnist",
    folder="logs",
    module="course.programs.horovod_mnist",
    epochs=4,
)

RIGHT = """\
#!/bin/bash
#SBATCH --job-name=hvd-mnist
#SBATCH --output=logs/hvd-mnist_%j.out
#SBATCH --error=logs/hvd-mnist_%j.err
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --cpus-per-task=6
#SBATCH --gres=gpu:8
#SBATCH --time=00:45:00

export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
mpiexec -np $SLURM_NTASKS --bind-to none --map-by slot python -m course.programs.horovod_mnist --epochs 4
"""

SHORT_FORMS = """\
#!/bin/bash
#SBATCH -J hvd-mnist -N 2
#SBATCH --ntasks-per-node 8
#SBATCH -c6 --gpus-per-node=a100:8   # one rank per GPU
#SBATCH -t 45
#SBATCH -o logs/%x_%j.out -e logs/%x_%j.err

srun --mpi=pmix -c "$SLURM_CPUS_PER_TASK" python -m course.programs.horovod_mnist \\
    --epochs 4 --batch 64
"""


@pytest.fixture
def submit_dir(tmp_path):
    (tmp_path / "logs").mkdir()
    return tmp_path


def _problems(text: str, folder) -> list[str]:
    return sbatch_script.problems(text, WANT, folder)


@pytest.mark.parametrize(
    "text",
    [RIGHT, SHORT_FORMS, RIGHT.replace("--ntasks-per-node=8", "--ntasks-per-n=8")],
    ids=["long forms", "short forms, srun, continuation", "unique prefix"],
)
def test_right_scripts_have_nothing_to_fix(text, submit_dir):
    assert _problems(text, submit_dir) == []


# The same request written with each of Slurm's GPU options (man sbatch): --gres=gpu:N and --gpus-per-node=N count
# per node, --gpus-per-task=N per task (8 tasks per node x 1), --gpus=N for the whole job (16 over 2 nodes of 8 GPUs
# can only be 8 each); with one GPU per task, --ntasks=16 on 2 such nodes can only be 8 per node.
SAME_REQUEST = {
    "--gpus-per-task": ("--gres=gpu:8", "--gpus-per-task=1"),
    "--gpus-per-task, a type": ("--gres=gpu:8", "--gpus-per-task=a100:1"),
    "--gpus-per-node": ("--gres=gpu:8", "--gpus-per-node=8"),
    "--gres with a type": ("--gres=gpu:8", "--gres=gpu:a100:8"),
    "--gpus, every GPU of the 2 nodes": ("--gres=gpu:8", "--gpus=16"),
    "-G": ("--gres=gpu:8", "-G 16"),
    "--gres and --gpus-per-task together": ("--gres=gpu:8", "--gres=gpu:8\n#SBATCH --gpus-per-task=1"),
    "--ntasks-per-gpu=1 with the GPUs per node": ("--ntasks-per-node=8", "--ntasks-per-gpu=1"),
    "--tres-per-task=gres/gpu=1 (Slurm 23.02+)": ("--gres=gpu:8", "--tres-per-task=gres/gpu=1"),
    "--tres-per-task=gres/gpu:1": ("--gres=gpu:8", "--tres-per-task=gres/gpu:1"),
    "--tres-per-task, a type": ("--gres=gpu:8", "--tres-per-task=gres/gpu:a100=1"),
    "--tres-per-task, CPUs and a GPU": ("--cpus-per-task=6\n#SBATCH --gres=gpu:8", "--tres-per-task=cpu=6,gres/gpu=1"),
    "--cpus-per-gpu (one GPU per rank)": ("--cpus-per-task=6", "--cpus-per-gpu=6"),
    "--ntasks with one GPU per task": (
        "--ntasks-per-node=8\n#SBATCH --cpus-per-task=6\n#SBATCH --gres=gpu:8",
        "--ntasks=16\n#SBATCH --cpus-per-task=6\n#SBATCH --gpus-per-task=1",
    ),
}


RIGHT_SRUN = RIGHT.replace("mpiexec -np $SLURM_NTASKS --bind-to none --map-by slot", "srun -c $SLURM_CPUS_PER_TASK")


@pytest.mark.parametrize("old,new", SAME_REQUEST.values(), ids=SAME_REQUEST.keys())
def test_every_gpu_option_for_the_same_request_is_right(old, new, submit_dir):
    text = RIGHT_SRUN.replace(old, new)
    assert _problems(text, submit_dir) == []
    assert sbatch_script.placement(text, WANT) == (2, 8, 8)


@pytest.mark.parametrize("old,new", SAME_REQUEST.values(), ids=SAME_REQUEST.keys())
def test_with_mpiexec_only_gpus_asked_per_node_are_right(old, new, submit_dir):
    """Open MPI's daemons are one-task srun steps that read the job's GPU options (test_sbatch_run measures it)."""
    found = _problems(RIGHT.replace(old, new), submit_dir)
    per_node = not any(o in new for o in ("gpus-per-task", "--gpus=", "-G ", "ntasks-per-gpu", "gres/gpu"))
    assert found == [] if per_node else len(found) == 1 and "mpiexec starts its daemons on the other nodes" in found[0]


@pytest.mark.parametrize(
    "launch,ranks",
    [
        ("mpiexec -np $SLURM_NTASKS --bind-to none", 16),
        ("mpiexec --bind-to none", 16),  # Open MPI in a Slurm job: one rank per task
        ("mpirun -np 16 --bind-to none", 16),
        ('OMP_NUM_THREADS=6 srun -c "$SLURM_CPUS_PER_TASK"', 16),
        ("mpiexec -np 8 --bind-to none", 8),
        ("mpiexec -np $SLURM_NNODES --bind-to none", None),
        ("", 1),
    ],
)
def test_ranks_started_reads_the_launch_line(launch, ranks):
    text = RIGHT.replace("mpiexec -np $SLURM_NTASKS --bind-to none --map-by slot", launch)
    assert sbatch_script.ranks_started(text, WANT) == ranks


def test_placement_says_none_where_slurm_could_place_unevenly():
    assert sbatch_script.placement(RIGHT, WANT) == (2, 8, 8)
    assert sbatch_script.placement(RIGHT.replace("--gres=gpu:8", "--gpus=8"), WANT) == (2, 8, None)
    assert sbatch_script.placement(RIGHT.replace("--ntasks-per-node=8", "--ntasks=16"), WANT) == (2, None, 8)
    both = RIGHT.replace("--gres=gpu:8", "--gres=gpu:8\n#SBATCH --gpus-per-task=2")
    assert sbatch_script.placement(both, WANT) == (2, 8, None)  # 8 and 16 per node: they disagree


def test_course_jobs_reference_script_passes_the_same_check(submit_dir):
    """The script course.jobs generates (absolute paths, --chdir, its own mpiexec flags) is right too."""
    text = jobs.script(
        jobs.Request(
            "horovod",
            nodes=2,
            gpus_per_node=8,
            cpus_per_task=6,
            time="00:45:00",
            job_name="hvd-mnist",
            output_dir=str(submit_dir / "logs"),
            args=["--epochs", "4"],
        )
    )
    assert _problems(text, submit_dir) == []


@pytest.mark.parametrize("launcher", ["mpiexec", "srun"])
def test_course_jobs_scripts_pass_the_check_with_either_launcher(launcher, submit_dir):
    """Both launchers' generated scripts are right, srun's included: it must ask for the CPUs per task again."""
    request = jobs.Request(
        "horovod",
        nodes=2,
        gpus_per_node=8,
        cpus_per_task=6,
        time="00:45:00",
        job_name="hvd-mnist",
        output_dir=str(submit_dir / "logs"),
        args=["--epochs", "4"],
        launcher=launcher,
    )
    assert _problems(jobs.script(request), submit_dir) == []


SRUN_LAUNCH = 'srun --mpi=pmix -c "$SLURM_CPUS_PER_TASK" python'


@pytest.mark.parametrize(
    "launch",
    ["srun --mpi=pmix python", "srun -n $SLURM_NTASKS python", "srun --ntasks=16 --mpi=pmix python"],
)
def test_srun_without_the_cpus_per_task_is_named(launch, submit_dir):
    """Slurm 22.05-23.02 (man sbatch), this machine's Debian 12 Slurm among them: srun does not inherit
    --cpus-per-task; each rank would get 1 CPU, not 6."""
    found = _problems(SHORT_FORMS.replace(SRUN_LAUNCH, launch), submit_dir)
    assert len(found) == 1 and "does not inherit --cpus-per-task" in found[0] and "not 6" in found[0], found


@pytest.mark.parametrize("version, named", [((22, 5), True), ((23, 2), True), ((23, 11), False), ((24, 5), False)])
def test_a_bare_srun_is_right_where_slurm_inherits_the_cpus_per_task_again(version, named):
    """Slurm 23.11 reads SLURM_CPUS_PER_TASK again (SchedMD's release notes): a bare srun inherits the job's value."""
    text = SHORT_FORMS.replace(SRUN_LAUNCH, "srun python")
    header = sbatch_script.read(text)
    number = next(n for n, line in header.commands if line.startswith("srun"))
    found = sbatch_ranks.srun_cpus(header, ["srun", "python"], number, version)
    assert bool(found) == named, found
    assert not found or f"this machine's is {version[0]}.{version[1]:02d}" in found[0]


@pytest.mark.parametrize(
    "launch",
    [
        "srun -c 6 python",
        "srun -c6 python",
        "srun --cpus-per-task=6 python",
        "srun --cpus-per-t 6 python",
        "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK\nsrun python",
    ],
)
def test_srun_given_the_cpus_per_task_again_is_right(launch, submit_dir):
    """-c on srun is CPUs per task, not a rank count (as it is for mpiexec); the environment variable works too."""
    assert _problems(SHORT_FORMS.replace(SRUN_LAUNCH, launch), submit_dir) == []


def test_short_and_long_forms_read_the_same():
    header = sbatch_script.read(SHORT_FORMS)
    assert [
        header.get(n) for n in ("job-name", "nodes", "ntasks-per-node", "cpus-per-task", "gpus-per-node", "time")
    ] == ["hvd-mnist", "2", "8", "6", "a100:8", "45"]
    assert header.commands == [
        (8, 'srun --mpi=pmix -c "$SLURM_CPUS_PER_TASK" python -m course.programs.horovod_mnist --epochs 4 --batch 64')
    ]
    assert sbatch_script.read("#!/bin/bash\n#SBATCH -N 1\n#SBATCH -N 3\n").get("nodes") == "3"  # the last one wins


@pytest.mark.parametrize(
    "limit,expected",
    [
        ("45", 2700),
        ("45:00", 2700),
        ("00:45:00", 2700),
        ("1-00", 86400),
        ("1-02:03", 93780),
        ("0-00:45:30", 2730),
        ("45m", None),
        ("1h", None),
    ],
)
def test_slurm_time_formats(limit, expected):
    assert time_limit_seconds(limit) == expected


MISTAKES = [
    (
        "--ntasks-per-node=8",
        "--ntasks-per-node=16",
        ["--ntasks-per-node is 16, the ranks of the whole job", "16 task(s) per node x 6 CPU(s) per task = 96 cores"],
    ),
    (
        "--ntasks-per-node=8",
        "--ntasks-per-node=4",
        ["--ntasks-per-node is 4 but the nodes have 8 GPUs: one rank per GPU"],
    ),
    ("#SBATCH --ntasks-per-node=8\n", "", ["no --ntasks-per-node: Slurm starts one task per node"]),
    ("--ntasks-per-node=8", "--ntasks=16", ["--ntasks=16 lets Slurm spread the tasks"]),
    (
        "--ntasks-per-node=8",
        "--ntask-per-node=8",
        ["--ntask-per-node is not an option sbatch knows", "no --ntasks-per-node"],
    ),
    ("--gres=gpu:8", "--gres=gpu:16", ["--gres asks for 16 GPUs per node, the GPUs of the whole job"]),
    (
        "--gres=gpu:8",
        "--gpus=8",
        ["--gpus=8 counts the GPUs of the whole job, and Slurm may place them unevenly", "with --gpus srun asks"],
    ),
    (
        "--gres=gpu:8",
        "--gpus-per-task=2",
        ["--gpus-per-task=2 with 8 task(s) per node asks for 16 GPU(s) per node", "with --gpus-per-task srun"],
    ),
    (
        "--gres=gpu:8",
        "--gpus-per-node=4",
        ["--gpus-per-node asks for 4 GPU(s) per node but the exercise's nodes have 8"],
    ),
    (
        "--ntasks-per-node=8\n#SBATCH --cpus-per-task=6\n#SBATCH --gres=gpu:8",
        "--ntasks=16\n#SBATCH --cpus-per-task=6\n#SBATCH --gpus-per-task=2",
        [
            "--ntasks=16 lets Slurm spread the tasks",
            "--gpus-per-task=2 needs a known number of tasks per node",
            "with --gpus-per-task srun gives that one task one GPU",
        ],
    ),
    ("#SBATCH --gres=gpu:8\n", "", ["no GPUs asked for"]),
    (
        "--gres=gpu:8",
        "--gres=gpu:a100:8\n#SBATCH --gpus-per-task=1",
        ["--gres=gpu:a100:8 names a GPU type and --gpus-per-task=1 does not: sbatch refuses such a job", "srun gives"],
    ),
    (
        "--cpus-per-task=6",
        "--cpus-per-task=6\n#SBATCH --cpus-per-gpu=6",
        ["--cpus-per-task and --cpus-per-gpu together: sbatch refuses the job"],
    ),
    ("--cpus-per-task=6", "--cpus-per-gpu=3", ["--cpus-per-gpu is 3, but a node's 48 cores shared evenly"]),
    (
        "--gres=gpu:8",
        "--tres-per-task=gres/gpu=2",
        ["--tres-per-task=gres/gpu=2 with 8 task(s) per node asks for 16", "with --gpus-per-task srun gives"],
    ),
    (
        "$SLURM_CPUS_PER_TASK\nmpiexec",
        "$SLURM_CPUS_ON_NODE\nmpiexec",
        ["gives each rank OMP_NUM_THREADS=$SLURM_CPUS_ON_NODE, but each rank has 6 CPUs"],
    ),
    ("=$SLURM_CPUS_PER_TASK\nmpiexec", "=48\nmpiexec", ["gives each rank OMP_NUM_THREADS=48, but each rank has 6"]),
    (
        "--cpus-per-task=6",
        "--cpus-per-task=48",
        [
            "--cpus-per-task is 48 (that is a whole node's cores",
            "shared evenly by its 8 ranks give each fewer",
            "8 task(s) per node x 48 CPU(s)",
        ],
    ),
    (
        "#SBATCH --cpus-per-task=6\n",
        "",
        ["no --cpus-per-task (-c): each rank would get one core; a node's 48 cores shared evenly"],
    ),
    ("--nodes=2", "--nodes=1", ["--nodes is 1 but the exercise asks for 2 node(s)"]),
    ("--time=00:45:00", "--time=45m", ["--time '45m' is not a Slurm time limit"]),
    ("--time=00:45:00", "--time=00:30:00", ["--time 00:30:00 is 30 min, but the exercise asks for 45 min"]),
    ("#SBATCH --time=00:45:00\n", "", ["no --time (-t)"]),
    ("logs/hvd-mnist_%j.out", "logs/hvd-mnist.out", ["--output has no %j: every job would overwrite the same .out"]),
    ("logs/hvd-mnist_%j.err", "logs/hvd-mnist_%j.out", ["--output and --error are the same file"]),
    ("--output=logs/", "--output=out/", ["--output goes to the folder", "not to logs/"]),
    ("#SBATCH --error=logs/hvd-mnist_%j.err\n", "", ["no --error (-e)"]),
    ("--job-name=hvd-mnist", "--job-name=hvd", ["--job-name is 'hvd'"]),
    ("#SBATCH --nodes=2", "# SBATCH --nodes=2", ["is an ordinary comment", "no --nodes (-N)"]),
    ("#!/bin/bash\n", "", ["the first line must be an interpreter line"]),
    ("mpiexec -np $SLURM_NTASKS --bind-to none --map-by slot ", "", ["starts ONE python process, not one per task"]),
    ("-np $SLURM_NTASKS", "-np 8", ["starts 8 rank(s) but the job has 16 tasks"]),
    ("-np $SLURM_NTASKS", "-np $SLURM_NNODES", ["$SLURM_NNODES is the number of nodes"]),
    ("--bind-to none --map-by slot ", "", ["mpiexec binds each rank to one core"]),
    ("mpiexec -np $SLURM_NTASKS --bind-to none --map-by slot", "horovodrun -np 16", ["horovodrun without -H"]),
    ("--epochs 4", "--epochs 3", ["trains 3 epoch(s) but the exercise asks for 4"]),
    (
        "--epochs 4",
        "--epochs 4 --learning-rate 0.1",
        ["the training refuses its arguments: ", "unrecognized arguments: --learning-rate"],
    ),
    ("python -m course.programs.horovod_mnist --epochs 4", "echo training", ["no launch line starts the ranks"]),
]


@pytest.mark.parametrize(
    "old,new,said", MISTAKES, ids=[f"{o.strip()[:24]} -> {n.strip()[:24]}" for o, n, _ in MISTAKES]
)
def test_each_mistake_is_named(old, new, said, submit_dir):
    assert old in RIGHT
    found = _problems(RIGHT.replace(old, new, 1), submit_dir)
    text = "\n".join(found)
    for fragment in said:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    assert len(found) <= len(said), f"more problems than the one mistake made:\n{text}"


def test_a_sbatch_line_after_the_first_command_is_ignored(submit_dir):
    late = RIGHT.replace("#SBATCH --time=00:45:00\n", "").replace("export OMP", "#SBATCH --time=00:45:00\nexport OMP")
    moved = late.replace("#SBATCH --time", "echo go\n#SBATCH --time")
    found = _problems(moved, submit_dir)
    assert any("comes after the first command" in p and "sbatch ignores it" in p for p in found), found
    assert any(p.startswith("no --time") for p in found), found


def test_missing_output_folder_is_named(tmp_path):
    want = Exercise(nodes=2, gpus_per_node=8, cpus_per_task=6, time="00:45:00")
    found = sbatch_script.problems(RIGHT, want, tmp_path)  # no logs/ folder under tmp_path
    assert any("does not exist, and Slurm does not create it" in p for p in found), found


def test_the_unanswered_stub_gets_every_option_named_but_never_the_answer(submit_dir):
    stub = "# YOUR CODE HERE\nraise NotImplementedError()\n"
    found = _problems(stub, submit_dir)
    text = "\n".join(found)
    for missing in (
        "interpreter line",
        "no --nodes",
        "no --ntasks-per-node",
        "no GPUs",
        "no --cpus-per-task",
        "no --time",
        "no --output",
        "no --error",
        "no --job-name",
        "no launch line",
    ):
        assert missing in text, missing
    for answer in ("--ntasks-per-node=8", "gpu:8", "--cpus-per-task=6", "ntasks-per-node 8", "-c 6"):
        assert answer not in text


def test_check_raises_with_one_line_per_problem(submit_dir):
    script = submit_dir / "job.sbatch"
    script.write_text(RIGHT.replace("--ntasks-per-node=8", "--ntasks-per-node=4").replace("_%j.out", ".out"))
    with pytest.raises(AssertionError) as raised:
        sbatch_script.check(script, WANT)
    lines = str(raised.value).splitlines()
    assert lines[0] == "2 thing(s) to fix in job.sbatch:" and len(lines) == 3, lines
    with pytest.raises(AssertionError, match="no script at"):
        sbatch_script.check(submit_dir / "missing.sbatch", WANT)


# ---------------------------------------------------------------------------------- the real Slurm


def test_sbatch_test_only_on_the_real_slurm(slurm, submit_dir):
    """The right script, shrunk to the test partition, is accepted; Slurm's own error line reaches the learner."""
    verdict = sbatch_script.ask_slurm(RIGHT)
    assert verdict is not None and verdict.accepted, verdict
    assert verdict.line.startswith("sbatch: Job") and f"partition {slurm}" in verdict.line, verdict.line
    assert "--gres left out (no GPUs here)" in verdict.changes and "--nodes 2 -> 1" in verdict.changes
    bad_time = sbatch_script.ask_slurm(RIGHT.replace("--time=00:45:00", "--time=45m"))
    assert not bad_time.accepted and bad_time.line == "sbatch: error: Invalid --time specification", bad_time
    typo = sbatch_script.ask_slurm(RIGHT.replace("--ntasks-per-node=8", "--ntask-per-node=8"))
    assert not typo.accepted and "unrecognized option '--ntask-per-node=8'" in typo.line, typo
    script = submit_dir / "hvd_mnist.sbatch"
    script.write_text(RIGHT)
    said = sbatch_script.check(script, WANT)
    assert said.startswith(
        "Every #SBATCH line and the launch line are right, judged from the text by Slurm's rules (no partition here "
        "has 2 nodes of 8 GPUs to run it). Slurm accepts it"
    ), said


PROGRAM = ["/opt/env/bin/python", "-m", "course", "doctor", "--json"]


@pytest.mark.parametrize(
    "options",
    [
        ["--ntasks=1", "--cpus-per-task=1", "--time=00:05:00"],
        ["-n", "1", "-c", "1", "-t", "5"],
        ["-n1", "-c1", "-t5:00"],
        ["--ntasks", "1", "--cpus-per-t", "1", "--time", "0:05:00"],
    ],
)
def test_an_srun_command_is_read_as_srun_reads_it(options):
    """Short and long forms, values after '=' or in the next word, unique prefixes: all mean the same to srun."""
    assert sbatch_script.srun_problems(["srun", *options, *PROGRAM], 1, 1, "00:05:00", PROGRAM) == []


@pytest.mark.parametrize(
    "words, named",
    [
        (["srun", "-N", "1", "-c", "1", "-t", "5", *PROGRAM], "no --ntasks (-n)"),
        (["srun", "-n", "2", "-c", "1", "-t", "5", *PROGRAM], "--ntasks is 2"),
        (["srun", "-n", "1", "-t", "5", *PROGRAM], "no --cpus-per-task (-c)"),
        (["srun", "-n", "1", "-c", "1", "-t", "50", *PROGRAM], "--time 50 is 50 min"),
        (["srun", "-n", "1", "-c", "1", *PROGRAM], "no --time (-t)"),
        (["srun", "-n", "1", "-c", "1", "-t", "5", "python", "-m", "course", "doctor", "--json"], "sys.executable"),
        (["srun", "--tasks=1", "-c", "1", "-t", "5", *PROGRAM], "--tasks is not an option srun knows"),
        (["mpirun", "-n", "1", *PROGRAM], "starting with 'srun'"),
        ("srun -n 1 -c 1 -t 5", "a list of words"),
    ],
)
def test_each_mistake_in_an_srun_command_is_named(words, named):
    found = sbatch_script.srun_problems(words, 1, 1, "00:05:00", PROGRAM)
    assert any(named in problem for problem in found), found


@pytest.mark.parametrize("option", ["--gres=gpu:8", "--gpus-per-task=1", "--gpus=16", "--gpus-per-node=8"])
def test_adapt_leaves_every_gpu_option_out_where_the_partition_has_no_gpus(option):
    """sbatch --test-only on a CPU partition would refuse any GPU request: the copy Slurm judges leaves it out."""
    from course.slurm import Partition

    adapted, changes = sbatch_script.adapt(RIGHT.replace("--gres=gpu:8", option), Partition("debug", 1, 2))
    assert "gpu" not in adapted.lower() and any("no GPUs here" in c for c in changes), adapted


@pytest.mark.parametrize(
    "option, said",
    [
        ("--tres-per-task=cpu=6,gres/gpu=1", "#SBATCH --cpus-per-task=6"),
        ("--cpus-per-gpu=6\n#SBATCH --gpus-per-task=1", "#SBATCH --cpus-per-task=6"),
    ],
)
def test_adapt_says_newer_cpu_and_gpu_options_the_way_any_slurm_knows(option, said):
    """--tres-per-task (Slurm 23.02+) and --cpus-per-gpu (refused without a GPU) become --cpus-per-task on a CPU
    partition."""
    from course.slurm import Partition

    text = RIGHT.replace("#SBATCH --cpus-per-task=6\n", "").replace("--gres=gpu:8", option)
    adapted, changes = sbatch_script.adapt(text, Partition("debug", 1, 48))
    assert said in adapted and "gpu" not in adapted.lower() and "tres" not in adapted, adapted


@pytest.mark.parametrize(
    "layout",
    ["--ntasks-per-node=8", "--ntasks=16\n#SBATCH --gpus-per-task=1", "--ntasks-per-node=8\n#SBATCH --ntasks=16"],
)
def test_adapt_fits_the_tasks_and_their_cpus_into_the_partition(layout):
    """However the tasks are asked for, the copy asks for no more tasks x CPUs per node than a node has."""
    from course.slurm import Partition

    adapted, _ = sbatch_script.adapt(RIGHT.replace("--ntasks-per-node=8", layout), Partition("debug", 1, 2))
    h = sbatch_script.read(adapted)
    per_node = int(h.get("ntasks-per-node") or h.get("ntasks"))
    assert per_node * int(h.get("cpus-per-task")) <= 2 and int(h.get("ntasks") or per_node) <= 2, adapted


@pytest.mark.parametrize(
    "line",
    [
        "export CUDA_VISIBLE_DEVICES=$SLURM_LOCALID",
        "export CUDA_VISIBLE_DEVICES=${SLURM_LOCALID}",
        'declare -x CUDA_VISIBLE_DEVICES="$SLURM_PROCID"',
    ],
)
def test_a_per_task_variable_read_in_the_batch_step_is_named(line, submit_dir):
    """The batch step runs once, on the first node, as task 0: every rank would get task 0's value."""
    text = SHORT_FORMS.replace("srun --mpi=pmix", f"{line}\nsrun --mpi=pmix", 1)
    found = _problems(text, submit_dir)
    assert len(found) == 1 and "in the batch step, which runs once, on the job's first node" in found[0], found


def test_a_per_task_variable_read_where_each_rank_runs_is_right(submit_dir):
    launch = SRUN_LAUNCH.replace(" python", " bash -c 'CUDA_VISIBLE_DEVICES=$SLURM_LOCALID exec \"$@\"' _ python")
    text = SHORT_FORMS.replace(SRUN_LAUNCH, launch)
    assert _problems(text, submit_dir) == []


@pytest.mark.parametrize(
    "hosts, named", [("localhost:$SLURM_NTASKS", True), ("$(hostname):16", False), ("$HOSTS", False)]
)
def test_horovodrun_given_one_host_in_a_job_of_two_nodes_is_named(hosts, named, submit_dir):
    text = SHORT_FORMS.replace(SRUN_LAUNCH, f"horovodrun -np $SLURM_NTASKS -H {hosts} python")
    found = [p for p in _problems(text, submit_dir) if "-H names one host" in p]
    assert bool(found) == named, _problems(text, submit_dir)
