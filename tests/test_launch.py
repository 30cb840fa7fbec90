"""course.launch: a real mpiexec launch whose rank hangs is ended, with where each rank was, and runs once more."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from course import UserError, launch, mpi, training
from tests.conftest import started_with

# Each rank says it is up, then ticks once a second for longer than `quiet`: a launch that prints is not hung. In
# the first launch (or in every one, with HOLD_ALWAYS) rank 1 then sleeps, and rank 0 waits for it in a barrier.
PROGRAM = textwrap.dedent(
    """
    import faulthandler, os, signal, sys, time
    from mpi4py import MPI
    faulthandler.register(signal.SIGTERM, chain=True)  # as course.programs do: say where each thread was
    rank, held = MPI.COMM_WORLD.Get_rank(), os.environ["HELD"]
    attempt = 2 if os.path.isdir(held) else 1
    print(f"rank {rank} up in attempt {attempt}", flush=True)
    MPI.COMM_WORLD.Barrier()
    for tick in range(int(os.environ["TICKS"])):
        time.sleep(1)
        print(f"rank {rank} tick {tick}", flush=True)

    def hold_rank_1():
        time.sleep(600)

    if rank == 1 and (os.environ.get("HOLD_ALWAYS") or attempt == 1):
        os.makedirs(held, exist_ok=True)
        hold_rank_1()
    MPI.COMM_WORLD.Barrier()
    print(f"rank {rank} done in attempt {attempt}", flush=True)
    """
)
QUIET = 10  # seconds: more than a start of two ranks with mpi4py takes on a loaded machine


def _kept(said: str) -> str:
    """What the file a hung launch's output was kept in, as SAID names it, holds; the file is removed once read."""
    kept = Path(said.split("where each was: ", 1)[1].split(")", 1)[0])
    text = kept.read_text()
    kept.unlink()
    return text


def _launch(tmp_path, timeout: float = launch.TIMEOUT, **extra: str):
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    env = {**mpi.env(), "HELD": str(tmp_path / "held"), "TICKS": str(QUIET + 2), **extra}
    done = launch.run(mpi.command(2, sys.executable, str(program)), env=env, quiet=QUIET, timeout=timeout)
    return done, env["HELD"]


def test_a_launch_that_hangs_once_is_ended_and_runs_once_more_and_one_that_ticks_is_not(tmp_path, capsys):
    done, held = _launch(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rank 0 done in attempt 2" in done.stdout and "rank 1 done in attempt 2" in done.stdout
    assert "attempt 1" not in done.stdout, "the output returned is the second attempt's alone"
    said = capsys.readouterr().err
    assert f"printed nothing for {QUIET} s" in said and "running it once more" in said
    dumped = _kept(said)
    assert "rank 1 up in attempt 1" in dumped and "hold_rank_1" in dumped, "the hung ranks' stacks are kept"
    assert not started_with("HELD", held), "the hung launch's processes outlived it"


def test_a_launch_that_hangs_every_time_is_one_line_and_leaves_nothing(tmp_path, capsys):
    with pytest.raises(UserError, match="hung 2 times in a row") as raised:
        _launch(tmp_path, HOLD_ALWAYS="1", TICKS="0")
    assert "\n" not in str(raised.value) and "run the cell again" in str(raised.value), "one line, saying what to do"
    assert "hold_rank_1" in _kept(str(raised.value)) and "hold_rank_1" in _kept(capsys.readouterr().err)
    assert not started_with("HELD", str(tmp_path / "held")), "the hung launches' processes outlived them"


def test_a_launch_past_its_time_is_ended_once_not_tried_again(tmp_path, capsys):
    with pytest.raises(UserError, match="ran longer than 15 s") as raised:
        _launch(tmp_path, timeout=15, TICKS="60")
    assert "larger timeout" in str(raised.value), "it says what to do"
    assert "rank 0 tick" in _kept(str(raised.value)), "it was ticking, not silent"
    assert "once more" not in capsys.readouterr().err
    assert not started_with("HELD", str(tmp_path / "held")), "the launch's processes outlived it"


def test_a_hung_horovodrun_launch_says_where_its_ranks_were_and_leaves_nothing(tmp_path):
    """horovodrun starts each rank in a session of its own: the ranks are found as its descendants."""
    program = tmp_path / "held.py"
    program.write_text(
        "import faulthandler, os, signal, time\n"
        "faulthandler.register(signal.SIGTERM, chain=True)\n"
        "def hold_rank_1():\n"
        "    time.sleep(600)\n"
        "print('up', flush=True)\n"
        "if os.environ['HOROVOD_RANK'] == '1':\n"
        "    hold_rank_1()\n"
    )
    env = {**mpi.env(), "HELD": str(tmp_path)}
    with pytest.raises(UserError, match="printed nothing for") as raised:
        launch.run([*training.horovodrun(2), sys.executable, str(program)], env=env, quiet=QUIET, attempts=1)
    assert "hold_rank_1" in _kept(str(raised.value)), "rank 1's stack is kept"
    assert not started_with("HELD", str(tmp_path)), "the hung launch's processes outlived it"
