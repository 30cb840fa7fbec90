"""How tests/conftest.py groups the suite for `make test`'s pytest-xdist workers, read from a real collection: the
modules that use this machine's Slurm run in one group, each notebook's strength trials are a group of their own,
and the longest groups come first."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import MACHINE, ROOT

# A collection in a process of its own (pytest.main), printing each test's group in the order the suite runs them.
SHOW = """
import json, sys, pytest
class Show:
    def pytest_collection_finish(self, session):
        print("GROUPS " + json.dumps([[i.nodeid, i._xdist_group] for i in session.items]))
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[1:]], plugins=[Show()]))
"""


def groups(*paths: str) -> list[tuple[str, str]]:
    done = subprocess.run([sys.executable, "-c", SHOW, *paths], cwd=ROOT, capture_output=True, text=True, timeout=300)
    line = next(line for line in done.stdout.splitlines() if line.startswith("GROUPS "))
    return [tuple(pair) for pair in json.loads(line[len("GROUPS ") :])]


def test_slurm_modules_share_one_group_and_strength_trials_one_per_notebook_longest_first():
    found = groups("tests/test_nn.py", "tests/test_slurm.py", "tests/test_checks_hpc.py", "tests/test_strength.py")
    by_file: dict[str, set[str]] = {}
    for nodeid, group in found:
        by_file.setdefault(nodeid.split("::")[0], set()).add(group)
    assert by_file["tests/test_slurm.py"] == {MACHINE}, "it asks for the slurm fixture"
    assert by_file["tests/test_checks_hpc.py"] == {MACHINE}, "its module mark says so"
    assert by_file["tests/test_nn.py"] == {"test_nn"}, "a module of its own"
    strength = [(n, g) for n, g in found if g.startswith("strength-")]
    assert {g for n, g in strength} >= {"strength-03_parallelism_and_collectives", "strength-02_sgd"}
    assert all(g == f"strength-{n.split('[')[1].split(']')[0]}" for n, g in strength), "one group per notebook"
    order = [g for _, g in found]
    assert order[: order.count(MACHINE)] == [MACHINE] * order.count(MACHINE), "the machine's group first"
    firsts = list(dict.fromkeys(g for g in order if g.startswith("strength-")))
    from tests.test_strength import trial_cost

    costs = [trial_cost(ROOT / "solutions" / f"{g[len('strength-') :]}.ipynb") for g in firsts if "99_" not in g]
    assert costs == sorted(costs, reverse=True), f"the costliest trials first: {firsts}"
    assert order.index(firsts[0]) < order.index("test_nn"), "the trials before the other modules"
