"""The course's command line: `python -m course COMMAND ...` (also installed as `course`).

Each command is a small function that imports its module lazily, so `--help` stays fast.
User mistakes end in one line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from course import UserError


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
