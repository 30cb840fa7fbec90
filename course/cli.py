"""The course's command line: `python -m course COMMAND ...` (also installed as `course`).

Each command is a small function that imports its module lazily, so `--help` stays fast.
User mistakes end in one line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from course import UserError, from_args
from course.grading.cli import add_grading


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def cmd_doctor(args: argparse.Namespace) -> int:
    from course import doctor

    return doctor.main(as_json=args.json, hub=args.hub)


def cmd_data_fetch(args: argparse.Namespace) -> int:
    from course import data

    target = data.fetch(args.name, args.to)
    print(f"saved {args.name} to {target}; point the course at it with COURSE_DATA_DIR={target.parent}")
    return 0


def cmd_data_where(args: argparse.Namespace) -> int:
    from course import data

    for name in args.names or list(data.DATASETS):
        print(f"{data.info(name).name:<14} {data.locate(name)}")
    return 0


def cmd_lab(args: argparse.Namespace) -> int:
    from course import lab

    return lab.serve(ip=args.ip, port=args.port, root=args.root)


def add_site_options(parser: argparse.ArgumentParser) -> None:
    """The Slurm options a site may require, for batch jobs and Slurm engines alike (course.slurm writes them)."""
    parser.add_argument("--qos", default=None, help="Slurm quality of service (a site's queue class)")
    parser.add_argument("--constraint", default=None, help="Slurm node features, e.g. a100 or 'v100|a100'")
    parser.add_argument("--exclusive", action="store_true", help="Slurm: whole nodes, shared with no other job")
    parser.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="any other #SBATCH option, as sbatch takes it (repeatable), e.g. --sbatch=--reservation=ws",
    )


def cmd_cluster(args: argparse.Namespace) -> int:
    from course import cluster

    if args.cluster_command == "start":
        batch = {k: getattr(args, k) for k in cluster.SLURM_OPTIONS if getattr(args, k)}
        given = from_args(args, "engines threads timeout controller_ip")
        handle = cluster.start(args.n, cluster_id=args.id, persist=True, quiet=True, **given, **batch)
        print(handle.status())
        print(f"It keeps running; stop it with: python -m course cluster stop --id {handle.cluster_id}")
        return 0
    if args.cluster_command == "status":
        ids = [cluster.normalise_id(args.id)] if args.id else cluster.running_ids()
        if not ids:
            print("no course clusters running")
            return 0
        failed = 0
        for cid in ids:
            status = cluster.inspect(cid)  # read only: never stops a cluster, even one still starting
            if status.state == "ended":  # nothing of it runs (what is left, stop --all removes)
                if args.id:
                    raise UserError(
                        f"no cluster {cid} is running (running: {', '.join(cluster.running_ids()) or 'none'})"
                    )
                continue
            print(status)
            failed += not status.ok
        return 1 if failed else 0
    if args.all:
        from course import slurm

        down = slurm.controller_down()  # one short ping: asked, each Slurm command would wait ~10 s on a dead one
        if down:
            print(
                f"Slurm does not answer ({down}): no engine job was looked for or cancelled; once it answers, "
                "run this again to cancel any left (squeue -u $USER lists them)"
            )
        ended, spared = cluster.stop_all(force=args.force)
        print(f"stopped: {', '.join(ended)}" if ended else "no course clusters were stopped")
        for line in spared:
            print(f"spared {line}; stop it with --force (its process then fails at its next call)")
        return 0
    if args.force:
        raise UserError("--force goes with --all (stop --id ID always stops that cluster)")
    cid = cluster.normalise_id(args.id) if args.id else cluster.default_cluster_id()
    if not cluster.stop(cid):
        raise UserError(
            f"no cluster {cid} is running (running: {', '.join(cluster.running_ids()) or 'none'}; "
            f"stop every course cluster with: python -m course cluster stop --all)"
        )
    print(f"stopped {cid}")
    return 0


def add_cluster(commands) -> None:
    from course.cluster import KINDS

    parser = commands.add_parser(
        "cluster", help="start, inspect or stop an engine cluster (local, MPI or Slurm engines)"
    )
    sub = parser.add_subparsers(dest="cluster_command", required=True, metavar="{start,status,stop}")
    start = sub.add_parser("start", help="start a cluster that keeps running until stopped")
    start.add_argument("--engines", choices=KINDS, default="local", help="how engines run (default local)")
    start.add_argument("-n", type=int, default=None, help="number of engines (default: the cores, at least 2)")
    start.add_argument("--id", default=None, help="cluster id (default course-default, or COURSE_CLUSTER_ID)")
    start.add_argument("--threads", type=int, default=1, help="intra-op threads per engine without GPUs (default 1)")
    start.add_argument("--timeout", type=float, default=None, help="seconds to wait for the engines")
    start.add_argument(
        "--controller-ip", default=None, help="where the controller listens (default 127.0.0.1; '*' for Slurm)"
    )
    start.add_argument("--partition", default=None, help="Slurm partition")
    start.add_argument(
        "--time", dest="time_limit", default=None, help="Slurm time limit, as in course job (e.g. 00:30:00)"
    )
    start.add_argument("--time-limit", dest="time_limit", help=argparse.SUPPRESS)  # its older name
    start.add_argument("--account", default=None, help="Slurm account")
    start.add_argument("--gpus-per-node", type=int, default=None, help="Slurm: GPUs per node (one engine per GPU)")
    start.add_argument("--tasks-per-node", type=int, default=None, help="Slurm: engines per node")
    add_site_options(start)
    status = sub.add_parser("status", help="show each running course cluster and its engines")
    status.add_argument("--id", default=None, help="only this cluster")
    stop = sub.add_parser("stop", help="stop a cluster; --all ends every course cluster of this user")
    stop.add_argument("--id", default=None, help="cluster id (default course-default, or COURSE_CLUSTER_ID)")
    stop.add_argument(
        "--all",
        action="store_true",
        help="engines, controllers, mpiexec and Slurm jobs of every course "
        "cluster whose process has ended (a notebook or script still running keeps its cluster)",
    )
    stop.add_argument("--force", action="store_true", help="with --all: stop clusters still in use too")
    for p in (start, status, stop):
        p.set_defaults(func=cmd_cluster)


def cmd_hub(args: argparse.Namespace) -> int:
    from course import hub

    return hub.main(args.hub_command, args.prefix)


def add_hub(commands) -> None:
    parser = commands.add_parser("hub", help="as root, at the end of a class on a JupyterHub: its servers and copies")
    sub = parser.add_subparsers(dest="hub_command", required=True, metavar="{end-of-class,stop-servers,forget-gone}")
    end = sub.add_parser(
        "end-of-class",
        help="(the hub stopped) end the course's servers, remove the instructors' copies with nothing of their "
        "own, and say what was kept",
    )
    servers = sub.add_parser("stop-servers", help="(the hub stopped) end the course's servers and nothing else")
    forget = sub.add_parser("forget-gone", help="drop instructors' copies that no longer exist from the record")
    for p in (end, servers, forget):
        p.add_argument("--prefix", default=None, help="the hub's environment (default HUB_PREFIX or /opt/ddl-hpc)")
        p.set_defaults(func=cmd_hub)


def add_data(commands) -> None:
    data_parser = commands.add_parser(
        "data", help="datasets: fetch for a site data directory, or show where they load from"
    )
    data_commands = data_parser.add_subparsers(dest="data_command", required=True, metavar="{fetch,where}")
    fetch = data_commands.add_parser(
        "fetch", help="save a real dataset as DIR/NAME.npz (needs internet or the Keras cache)"
    )
    fetch.add_argument("name", help="mnist, fashion_mnist or cifar10")
    fetch.add_argument(
        "--to", required=True, metavar="DIR", help="the site data directory (then set COURSE_DATA_DIR=DIR)"
    )
    fetch.set_defaults(func=cmd_data_fetch)
    where = data_commands.add_parser("where", help="where each dataset would be loaded from")
    where.add_argument("names", nargs="*", help="dataset names (default: all)")
    where.set_defaults(func=cmd_data_where)


def cmd_results(args: argparse.Namespace) -> int:
    from course import results

    if args.results_command == "collect":
        table = results.collect(args.dir, exclude=args.out)
        for problem in table.problems:
            print(f"skipped {problem}", file=sys.stderr)
        if args.out:
            table.write(args.out)
            print(
                f"merged {len(table.rows)} row(s) from {len(table.files)} file(s) into {args.out}"
                + (f"; {len(table.problems)} problem(s) reported above" if table.problems else "")
            )
            print(table.show())
        else:
            sys.stdout.write(table.to_csv())
        return 0
    source = args.file
    table = results.collect(source)
    for problem in table.problems:
        print(f"skipped {problem}", file=sys.stderr)
    results.plot(table, out=args.out)
    print(table.show())
    print(f"plot saved to {args.out}")
    return 0


def add_results(commands) -> None:
    parser = commands.add_parser("results", help="the class results table: merge learners' CSVs, plot them")
    sub = parser.add_subparsers(dest="results_command", required=True, metavar="{collect,plot}")
    collect = sub.add_parser("collect", help="merge the result CSVs in DIR (bad rows reported and skipped)")
    collect.add_argument("dir", metavar="DIR", help="folder of result CSVs (searched recursively), or one CSV")
    collect.add_argument("--out", default=None, metavar="FILE", help="write the merged CSV here (default: stdout)")
    collect.set_defaults(func=cmd_results)
    plot = sub.add_parser(
        "plot",
        help="speed-up, efficiency, accuracy and elapsed time against workers, per workload "
        "(dataset, network, hardware, strategy)",
    )
    plot.add_argument(
        "file",
        nargs="?",
        default="results.csv",
        metavar="FILE",
        help="a results CSV or a folder of them (default results.csv)",
    )
    plot.add_argument("--out", default="results.png", metavar="PNG", help="image file (default results.png)")
    plot.set_defaults(func=cmd_results)


def cmd_job_status(args: argparse.Namespace) -> int:
    from course import jobs

    print(jobs.status(args.job_id))
    return 0


def cmd_job_wait(args: argparse.Namespace) -> int:
    from course import jobs

    final = jobs.wait(args.job_id, timeout=args.timeout)
    print(final)
    return 0 if final.state == "COMPLETED" else 1


def cmd_job_output(args: argparse.Namespace) -> int:
    from course import jobs

    out, err = jobs.output(args.job_id)
    current = jobs.status(args.job_id)
    print(f"==> {current.stdout or 'stdout'} <==\n{out}", end="" if out.endswith("\n") else "\n")
    print(f"==> {current.stderr or 'stderr'} <==\n{err}", end="" if err.endswith("\n") or not err else "\n")
    return 0


def cmd_job_cancel(args: argparse.Namespace) -> int:
    from course import jobs

    print(jobs.cancel(args.job_id))
    return 0


JOB_ACTIONS = {
    "status": (cmd_job_status, "the job's state, times and exit code, with what they mean"),
    "wait": (cmd_job_wait, "wait until the job ends; exit status 0 only if it completed"),
    "output": (cmd_job_output, "the job's .out and .err files"),
    "cancel": (cmd_job_cancel, "cancel a queued or running job"),
}


def job_action_parser() -> Parser:
    """`python -m course job status|wait|output|cancel JOBID`: one subcommand per action on a submitted job."""
    parser = Parser(prog="python -m course job", description="follow a submitted job")
    actions = parser.add_subparsers(dest="action", required=True, metavar="{" + ",".join(JOB_ACTIONS) + "}")
    for name, (func, about) in JOB_ACTIONS.items():
        action = actions.add_parser(name, help=about, description=about)
        action.add_argument("job_id", metavar="JOBID", help="the id sbatch printed")
        if name == "wait":
            action.add_argument(
                "--timeout",
                "--wait-timeout",
                type=float,
                default=None,
                help="give up after these seconds (default: wait as long as it takes)",
            )
        action.set_defaults(func=func)
    return parser


# The options of `course job` that jobs.Request takes by the same names
JOB_OPTIONS = (
    "nodes gpus_per_node tasks_per_node cpus_per_task mem time partition account qos constraint exclusive sbatch "
    "job_name output_dir launcher timeline oversubscribe resubmit_on_timeout array"
)


def cmd_job(args: argparse.Namespace) -> int:
    from course import jobs

    extra = list(getattr(args, "workload_args", None) or []) + list(args.args)
    request = jobs.Request(args.workload, extra, python=args.python or sys.executable, **from_args(args, JOB_OPTIONS))
    line = jobs.command_line(args.argv) if getattr(args, "argv", None) else None
    text = jobs.script(request, line)
    if args.submit:
        job_id = jobs.submit(request, line)
        print(job_id)
        return 0
    print(text, end="")
    return 0


def worker_counts(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4] (argparse reports anything else as a usage error)."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"worker counts such as 1,2,4 (whole numbers >= 1), not {text!r}")
    return counts


def add_job(commands) -> None:
    """The `job` command and its options: one add_argument per option, hence over 60 lines."""
    parser = commands.add_parser(
        "job",
        help="Slurm batch scripts for the course workloads: print, submit, follow",
        description="python -m course job WORKLOAD [options] [--print|--submit] [-- WORKLOAD ARGS]  "
        "(WORKLOAD: train, horovod, mirrored or a .py script);  "
        "python -m course job status|wait|output|cancel JOBID (see python -m course job status --help)",
    )
    parser.add_argument(
        "workload",
        metavar="WORKLOAD",
        help="train, horovod, mirrored, path/to/script.py; or status, wait, output, cancel JOBID",
    )
    parser.add_argument("args", nargs="*", metavar="ARG", help="the workload's own arguments (or put them after --)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    parser.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node, as --gres=gpu:N (default 0)")
    parser.add_argument("--tasks-per-node", type=int, default=None, help="processes per node (Horovod: = GPUs)")
    parser.add_argument("--cpus-per-task", type=int, default=None, help="CPU cores per process")
    parser.add_argument("--mem", default=None, help="memory per node, e.g. 16G")
    parser.add_argument(
        "--time",
        default="00:30:00",
        help="time limit as sbatch reads it: minutes, HH:MM:SS or D-HH:MM:SS (default 00:30:00)",
    )
    parser.add_argument("--partition", default=None, help="Slurm partition")
    parser.add_argument("--account", default=None, help="Slurm account to charge")
    add_site_options(parser)
    parser.add_argument("--job-name", default=None, help="job name (default course-WORKLOAD)")
    parser.add_argument("--output-dir", default=".", help="folder for NAME_JOBID.out/.err (default: here)")
    parser.add_argument(
        "--launcher",
        choices=("mpiexec", "srun"),
        default="mpiexec",
        help="how several processes start (default mpiexec, as the UQ Deep Learning on HPC workshop)",
    )
    parser.add_argument("--python", default=None, help="the Python the job runs (default: this one)")
    parser.add_argument("--timeline", default=None, metavar="FILE", help="record a Horovod timeline to FILE")
    parser.add_argument(
        "--oversubscribe",
        action="store_true",
        help="let mpiexec start more ranks than Slurm's slots (off: Open MPI refuses, catching a mistake)",
    )
    parser.add_argument(
        "--array",
        type=worker_counts,
        default=None,
        metavar="N,N,...",
        help="a scaling sweep as one job array: one task per worker count, e.g. 1,2,4 "
        "(train: --workers N; horovod: mpiexec -n N within the tasks asked for)",
    )
    parser.add_argument(
        "--resubmit-on-timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help="warn the program (USR1) this long before --time runs out and submit the script again "
        "to resume (horovod: with -- --checkpoint-dir DIR)",
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--print", action="store_true", help="show the batch script (the default)")
    what.add_argument("--submit", action="store_true", help="submit it with sbatch and print the job id")
    parser.set_defaults(func=cmd_job)


def cmd_run(args: argparse.Namespace) -> int:
    from course import run

    return run.main(args.notebooks, profile=args.profile, out=args.out, record_to=args.record)


def add_run(commands) -> None:
    run = commands.add_parser("run", help="dry-run solution notebooks headless; writes executed copies and index.html")
    run.add_argument("notebooks", nargs="*", help="names or numbers, e.g. 00 07_horovod (default: all)")
    run.add_argument("--profile", choices=["quick", "full"], default="quick", help="run sizes (default quick)")
    run.add_argument("--out", default="run-output", metavar="DIR", help="where results go (default run-output)")
    run.add_argument(
        "--record",
        default=None,
        metavar="FILE",
        help="also write the run's record (OUT/record.json) here, e.g. docs/guide/records/run-DATE.json for the site",
    )
    run.set_defaults(func=cmd_run)


def cmd_train(args: argparse.Namespace) -> int:
    from course import averaging

    options = "epochs workers sync runs batch_size results limit learning_rate engines cluster_id"
    averaging.train(args.dataset, args.network, **from_args(args, options))
    return 0


def add_train(commands) -> None:
    from course.sync_types import LAB_NUMBERS, STRATEGIES, VALID

    sync, relaxed, removed = (f"{name}, {number}" for number, name in LAB_NUMBERS.items())
    train = commands.add_parser(
        "train",
        help=f"parameter averaging on engines (the DeepHealth HPC lab's run script): {', '.join(STRATEGIES)}",
        description=f"Train with synchronous ({sync}), relaxed ({relaxed}) or removed ({removed}) parameter "
        "averaging over task-runtime workers; prints epoch-range and total times and test accuracy, "
        "and appends one row per run to --results.",
    )
    train.add_argument("--dataset", default="mnist", help="mnist or cifar10 (default mnist)")
    train.add_argument("--network", default="simple-mnist", help="simple-mnist, lenet or vgg16 (default simple-mnist)")
    train.add_argument("--epochs", type=int, default=1, help="epochs (default 1)")
    train.add_argument(
        "--workers", type=int, default=1, help="workers, e.g. 1, 2, 4, 8, 16; more than engines queue (default 1)"
    )
    train.add_argument("--sync", default=STRATEGIES[0], help=f"{VALID} (default {STRATEGIES[0]})")
    train.add_argument("--runs", type=int, default=1, help="repetitions of the run (default 1)")
    train.add_argument("--batch-size", type=int, default=32, help="batch size per worker (default 32)")
    train.add_argument(
        "--results", default=None, metavar="FILE", help="append one row per run to this CSV (class results)"
    )
    train.add_argument(
        "--limit", type=int, default=None, metavar="N", help="use only the first N training and test images"
    )
    train.add_argument("--learning-rate", type=float, default=None, help="SGD learning rate (default: the network's)")
    train.add_argument(
        "-n",
        dest="engines",
        type=int,
        default=None,
        help="engines of the private cluster, as in cluster start (default: cores, at least 2)",
    )
    train.add_argument("--engines", dest="engines", type=int, help=argparse.SUPPRESS)  # its older name: a count here,
    # where cluster start's --engines is a kind
    train.add_argument(
        "--cluster-id", default=None, help="use this running cluster (python -m course cluster start) instead"
    )
    train.set_defaults(func=cmd_train)


def cmd_readme_table(args: argparse.Namespace) -> int:
    from course import contents

    return contents.main(write=args.write)


def add_readme_table(commands) -> None:
    parser = commands.add_parser(
        "readme-table", help="README's table of notebooks (number, title, time) made from the notebooks"
    )
    parser.add_argument("--write", action="store_true", help="put it in README.md (Topic and Needs kept from there)")
    parser.set_defaults(func=cmd_readme_table)


def cmd_new_exercise(args: argparse.Namespace) -> int:
    from course import scaffold

    return scaffold.main(args.notebook, args.name, args.function, args.module)


def add_new_exercise(commands) -> None:
    parser = commands.add_parser(
        "new-exercise",
        help="scaffold a graded exercise: its cells, check stub, fast test, a wrong answer, the guide's rows "
        "(CONTRIBUTING.md)",
    )
    parser.add_argument("notebook", help="the solutions/ notebook: its number (03) or name")
    parser.add_argument(
        "name", help="the exercise's grade-id stem: ex- and lowercase words, e.g. ex-recursive-doubling"
    )
    parser.add_argument("--function", help="the function the learner writes (default my_<words of NAME>)")
    parser.add_argument(
        "--module", help="the course/checks/ module of its check (default: the one the notebook's checks use most)"
    )
    parser.set_defaults(func=cmd_new_exercise)


def add_instructor_tools(commands) -> None:
    """mutation-report, which course/mutation/ adds itself: the student copy leaves that folder out, and the command
    with it (grading sits below mutation and does not import it)."""
    try:
        from course.mutation.cli import add_mutation_report
    except ModuleNotFoundError as missing:
        if missing.name != "course.mutation":
            raise
        return
    add_mutation_report(commands)


def build_parser() -> Parser:
    from course import __version__

    parser = Parser(prog="python -m course", description="Distributed Deep Learning on HPC: course tools.")
    parser.add_argument("--version", action="version", version=f"course {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="report what works on this machine before a workshop")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument(
        "--hub",
        nargs="?",
        const="",
        metavar="PREFIX",
        help="check a JupyterHub deployment instead: its environment (default HUB_PREFIX or /opt/ddl-hpc), the kernel, "
        "nbgrader's exchange, and that no learner can read an answer",
    )
    doctor.set_defaults(func=cmd_doctor)

    add_data(commands)
    add_cluster(commands)
    add_hub(commands)
    add_grading(commands)
    add_instructor_tools(commands)
    add_readme_table(commands)
    add_new_exercise(commands)
    add_results(commands)
    add_job(commands)
    add_run(commands)
    add_train(commands)

    lab = commands.add_parser("lab", help="start JupyterLab on the course (what `make lab` runs)")
    lab.add_argument("--ip", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    lab.add_argument("--port", type=int, default=8888, help="first port to try (default 8888)")
    lab.add_argument("--root", default=".", help="folder JupyterLab shows (default: the course checkout)")
    lab.set_defaults(func=cmd_lab)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    tail: list[str] = []
    if argv[:1] == ["job"] and "--" in argv:  # `job WORKLOAD [options] -- WORKLOAD ARGS`: the tail is the workload's
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1 :]
    if argv[:1] == ["job"] and argv[1:2] and argv[1] in JOB_ACTIONS:  # an action on a job, not a workload
        args = job_action_parser().parse_args(argv[1:])
    else:
        args = build_parser().parse_args(argv)
    if argv[:1] == ["job"]:
        args.workload_args, args.argv = tail, argv + (["--", *tail] if tail else [])
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"course: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("course: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
