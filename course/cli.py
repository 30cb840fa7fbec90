"""The course's command line: `python -m course COMMAND ...` (also installed as `course`).

Each command is a small function that imports its module lazily, so `--help` stays fast.
User mistakes end in one line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from course import UserError
from course.grading.cli import add_grading


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def cmd_doctor(args: argparse.Namespace) -> int:
    from course import doctor

    return doctor.main(as_json=args.json)


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


def cmd_cluster(args: argparse.Namespace) -> int:
    from course import cluster

    if args.cluster_command == "start":
        options = {k: getattr(args, k) for k in ("partition", "time_limit", "account", "gpus_per_node", "tasks_per_node")
                   if getattr(args, k) is not None}
        handle = cluster.start(args.n, engines=args.engines, cluster_id=args.id, threads=args.threads,
                               timeout=args.timeout, controller_ip=args.controller_ip, persist=True, quiet=True,
                               **options)
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
            try:
                status = cluster.attach(cid).status()
            except cluster.ClusterError:
                if args.id:
                    raise
                continue  # attach cleaned up what was left of a cluster that had died
            print(status)
            failed += not status.ok
        return 1 if failed else 0
    if args.all:
        ended = cluster.stop_all()
        print(f"stopped: {', '.join(ended)}" if ended else "no course clusters were running")
        return 0
    cid = cluster.normalise_id(args.id) if args.id else cluster.default_cluster_id()
    if not cluster.stop(cid):
        raise UserError(f"no cluster {cid} is running (running: {', '.join(cluster.running_ids()) or 'none'}; "
                        f"stop every course cluster with: python -m course cluster stop --all)")
    print(f"stopped {cid}")
    return 0


def add_cluster(commands) -> None:
    parser = commands.add_parser("cluster", help="start, inspect or stop an engine cluster (local, MPI or Slurm engines)")
    sub = parser.add_subparsers(dest="cluster_command", required=True, metavar="{start,status,stop}")
    start = sub.add_parser("start", help="start a cluster that keeps running until stopped")
    start.add_argument("--engines", choices=("local", "mpi", "slurm"), default="local", help="how engines run (default local)")
    start.add_argument("-n", type=int, default=None, help="number of engines (default: the cores, at least 2)")
    start.add_argument("--id", default=None, help="cluster id (default course-default, or COURSE_CLUSTER_ID)")
    start.add_argument("--threads", type=int, default=1, help="intra-op threads per engine without GPUs (default 1)")
    start.add_argument("--timeout", type=float, default=None, help="seconds to wait for the engines")
    start.add_argument("--controller-ip", default=None, help="where the controller listens (default 127.0.0.1; '*' for Slurm)")
    for name, what in (("partition", "Slurm partition"), ("time-limit", "Slurm time limit, e.g. 1:00:00"),
                       ("account", "Slurm account")):
        start.add_argument(f"--{name}", default=None, help=what)
    start.add_argument("--gpus-per-node", type=int, default=None, help="Slurm: GPUs per node (one engine per GPU)")
    start.add_argument("--tasks-per-node", type=int, default=None, help="Slurm: engines per node")
    status = sub.add_parser("status", help="show each running course cluster and its engines")
    status.add_argument("--id", default=None, help="only this cluster")
    stop = sub.add_parser("stop", help="stop a cluster; --all ends every course cluster of this user")
    stop.add_argument("--id", default=None, help="cluster id (default course-default, or COURSE_CLUSTER_ID)")
    stop.add_argument("--all", action="store_true", help="engines, controllers, mpiexec and Slurm jobs of every course cluster")
    for p in (start, status, stop):
        p.set_defaults(func=cmd_cluster)


def add_data(commands) -> None:
    data_parser = commands.add_parser("data", help="datasets: fetch for a site data directory, or show where they load from")
    data_commands = data_parser.add_subparsers(dest="data_command", required=True, metavar="{fetch,where}")
    fetch = data_commands.add_parser("fetch", help="save a real dataset as DIR/NAME.npz (needs internet or the Keras cache)")
    fetch.add_argument("name", help="mnist, fashion_mnist or cifar10")
    fetch.add_argument("--to", required=True, metavar="DIR", help="the site data directory (then set COURSE_DATA_DIR=DIR)")
    fetch.set_defaults(func=cmd_data_fetch)
    where = data_commands.add_parser("where", help="where each dataset would be loaded from")
    where.add_argument("names", nargs="*", help="dataset names (default: all)")
    where.set_defaults(func=cmd_data_where)


def build_parser() -> Parser:
    parser = Parser(prog="python -m course", description="Distributed Deep Learning on HPC: course tools.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    doctor = commands.add_parser("doctor", help="report what works on this machine before a workshop")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=cmd_doctor)

    add_data(commands)
    add_cluster(commands)
    add_grading(commands)

    lab = commands.add_parser("lab", help="start JupyterLab on the course (what `make lab` runs)")
    lab.add_argument("--ip", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    lab.add_argument("--port", type=int, default=8888, help="first port to try (default 8888)")
    lab.add_argument("--root", default=".", help="folder JupyterLab shows (default: the course checkout)")
    lab.set_defaults(func=cmd_lab)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the command; returns the exit status."""
    args = build_parser().parse_args(argv)
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
