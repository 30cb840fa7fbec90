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
