"""tests/script_runs.py: one real run per script and launch in a session, the same Run for every later call."""

from __future__ import annotations

from tests import script_runs


def test_a_script_runs_once_per_session_and_again_when_its_bytes_change(tmp_path, monkeypatch):
    runs = tmp_path / "runs.txt"  # each real run of the script adds a line here, outside its folder
    script = tmp_path / "train.py"
    script.write_text(f"open({str(runs)!r}, 'a').write('ran\\n')\nprint('trained')\nraise SystemExit(3)\n")
    monkeypatch.setenv(script_runs.VARIABLE, str(tmp_path / "kept"))

    first = script_runs.run_script(script, tmp_path / "a", ranks=1, horovod=False)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "stale").write_text("from an earlier run")
    second = script_runs.run_script(script, tmp_path / "b", ranks=1, horovod=False)
    assert runs.read_text() == "ran\n", "the second call ran the script again"
    assert (
        (second.returncode, second.output, second.ranks) == (first.returncode, first.output, 1) == (3, first.output, 1)
    )
    assert "trained" in second.output
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(p.name for p in (tmp_path / "a").iterdir())

    script.write_text(script.read_text() + "# changed\n")
    script_runs.run_script(script, tmp_path / "c", ranks=1, horovod=False)
    assert runs.read_text() == "ran\n" * 2, "other bytes are another run"

    monkeypatch.delenv(script_runs.VARIABLE)
    script_runs.run_script(script, tmp_path / "d", ranks=1, horovod=False)
    assert runs.read_text() == "ran\n" * 3, "without the session's folder every call runs"


def test_a_torchrun_script_runs_once_per_session_with_its_records(tmp_path, monkeypatch):
    runs = tmp_path / "runs.txt"
    script = tmp_path / "train.py"
    script.write_text(f"import torch.distributed as dist\nopen({str(runs)!r}, 'a').write('ran\\n')\n"
                      "dist.init_process_group('gloo')\ndist.destroy_process_group()\n")  # fmt: skip
    monkeypatch.setenv(script_runs.VARIABLE, str(tmp_path / "kept"))
    first = script_runs.run_torchrun(script, tmp_path / "a", ranks=1, args=["--x", "1"])
    second = script_runs.run_torchrun(script, tmp_path / "b", ranks=1, args=["--x", "1"])
    assert runs.read_text() == "ran\n" and first.returncode == second.returncode == 0
    assert second.records == first.records and first.records[0]["initialized"]
    script_runs.run_torchrun(script, tmp_path / "c", ranks=1, args=["--x", "2"])
    assert runs.read_text() == "ran\n" * 2, "other arguments are another run"


def test_horovodrun_asks_horovod_for_its_build_once_per_session(tmp_path, monkeypatch):
    """tests/horovodrun_once.py: the first launch asks Horovod whether it has Gloo (for real) and writes the answer
    down; later launches take it from there, and horovodrun itself acts on it."""
    import subprocess
    import sys

    from tests import horovodrun_once

    monkeypatch.setenv(script_runs.VARIABLE, str(tmp_path / "kept"))
    answer = tmp_path / "kept" / horovodrun_once.ANSWER
    command = script_runs.horovodrun(1) + [sys.executable, "-c", "print('the rank ran')"]
    assert command[0] == sys.executable and "-np" in command

    def launch() -> subprocess.CompletedProcess:
        return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)

    first = launch()
    assert first.returncode == 0 and "the rank ran" in first.stdout, first.stdout + first.stderr
    assert answer.read_text() == "true", "Horovod's own probe found Gloo"
    answer.write_text("false")  # as if this Horovod had no Gloo: horovodrun must now read it and refuse
    second = launch()
    assert second.returncode != 0 and "Gloo support has not been built" in second.stdout + second.stderr
    assert "the rank ran" not in second.stdout
    monkeypatch.delenv(script_runs.VARIABLE)
    assert script_runs.horovodrun(1)[0].endswith("horovodrun"), "without the session's folder: horovodrun itself"
