"""@binary and @mpi: a task that runs a program (or an MPI program through the course's `mpiexec`) on an engine.

As in PyCOMPSs, the task's parameters become the program's arguments (in order, or placed by `args=` with
`{{name}}`), a FILE parameter with a StdIOStream is its stdin/stdout/stderr, and a non-zero exit fails the task
(fail_by_exit_value=True); the task returns the exit code.
"""

from __future__ import annotations

import functools
import shlex
import subprocess
from typing import Any, Callable

from course import UserError
from course.tasks.decorators import TaskFunction


def binary(
    binary: str,
    working_dir: str | None = None,
    args: str | None = None,
    fail_by_exit_value: bool = True,
    **_ignored: Any,
) -> Callable:
    """`@binary(binary="prog", args="-n {{n}} {{path}}")` above `@task(...)`: each call runs `prog` as a task."""
    return _decorator("@binary", dict(binary=binary, working_dir=working_dir, args=args, fail=fail_by_exit_value))


def mpi(
    binary: str | None = None,
    processes: int | str = 1,
    runner: str = "mpirun",
    working_dir: str | None = None,
    args: str | None = None,
    fail_by_exit_value: bool = True,
    **_ignored: Any,
) -> Callable:
    """`@mpi(binary="prog", processes=4)` above `@task(...)`: runs `mpiexec -n 4 prog ...` (the course's flags)."""
    if binary is None:
        raise UserError(
            "@mpi without binary= (a Python function run on several MPI ranks) is not supported here; "
            "put the MPI code in a script and use @mpi(binary='python', args='script.py ...')"
        )
    try:
        n = int(processes)
    except (TypeError, ValueError):
        raise UserError(f"@mpi: processes={processes!r}; give a whole number") from None
    return _decorator(
        "@mpi", dict(binary=binary, working_dir=working_dir, args=args, fail=fail_by_exit_value, processes=n)
    )


def _decorator(name: str, config: dict) -> Callable:
    def decorate(tf: Any) -> TaskFunction:
        if not isinstance(tf, TaskFunction):
            raise UserError(f"{name} on {getattr(tf, '__name__', tf)!r}: put it above @task")
        config["names"] = list(tf.signature.parameters)
        config["streams"] = {p: d.stream for p, d in tf.directions.items() if d.stream}
        config["append"] = {p for p, d in tf.directions.items() if d.stream and d.read and d.write}
        tf.function = functools.partial(run_program, config)
        tf.payload = None
        return tf

    return decorate


def run_program(config: dict, *args: Any, **kwargs: Any) -> int:
    """On the engine: run the program with the task's arguments; its exit code (non-zero fails the task)."""
    from course import mpi

    values = dict(zip(config["names"], args), **kwargs)
    streams = config["streams"]
    if config["args"]:
        line = config["args"]
        for name, value in values.items():
            line = line.replace("{{" + name + "}}", " ".join(map(str, _flat(value))))
        command = [config["binary"], *shlex.split(line)]
    else:
        command = [config["binary"], *(str(v) for n, v in values.items() if n not in streams for v in _flat(v))]
    env = None
    if "processes" in config:
        command, env = mpi.command(config["processes"], *command), mpi.env()
    files = {}
    try:
        for name, stream in streams.items():
            mode = "r" if stream == "STDIN" else ("a" if name in config["append"] else "w")
            files[stream.lower()] = open(values[name], mode)
        done = subprocess.run(
            command,
            cwd=config["working_dir"],
            env=env,
            stdin=files.get("stdin"),
            stdout=files.get("stdout", subprocess.PIPE),
            stderr=files.get("stderr", subprocess.PIPE),
            text=True,
        )
    finally:
        for f in files.values():
            f.close()
    if done.stdout and "stdout" not in files:
        print(done.stdout, end="")
    if config["fail"] and done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-3:]
        why = f": {' / '.join(tail)}" if tail else ""
        raise RuntimeError(f"{shlex.join(command)} exited with {done.returncode}{why}")
    return done.returncode


def _flat(value: Any) -> list:
    return [x for v in value for x in _flat(v)] if isinstance(value, (list, tuple)) else [value]
