"""course.checks.ring_attention, the context-parallelism checks of notebook 14's part 4, tried directly on every
answer the fixtures hold for their exercises (tests/check_cases.py): the online softmax in this process, the ring
and the zig-zag split on two local engines formed into a gloo group as the notebook forms them, and the bytes
against the solution's ring and the course's Ulysses as they ran there."""

from __future__ import annotations

import pytest

from course.checks import ring_attention
from tests.check_cases import cases, define, judge, torch_engines

NOTEBOOK = "14_context_parallelism"
COVERED = {"ex-online-answer", "ex-ring-answer", "ex-zigzag-answer", "ex-bytes-answer"}
SIZES = (32, 4, 8)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-online-answer"}), ids=str)
def test_online_softmax(case):
    judge(case, lambda: ring_attention.online_softmax(define(case, {})["update"]))


@pytest.fixture(scope="module")
def solution():
    """The solution's answers to the exercises before the ones tried: what the notebook defines by then."""
    return define(cases(NOTEBOOK, COVERED)[0], {})


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """Two local engines as one gloo group, as the notebook makes them."""
    with torch_engines(tmp_path_factory) as engines:
        yield engines.view


def _ring(view, names) -> str | None:
    for causal in (True, False):
        runs = view.apply_sync(ring_attention.ring_run, names["ring_attention"], causal, None, names["update"])
        said = ring_attention.ring(runs)
        if said:
            return said
    return None


@pytest.mark.slow
def test_solution_ring_is_measured_as_its_definition(solution, view):
    """What the solution's ring did on 2 ranks, from outside: 3 sends of K, V and positions to the other rank, the
    causal pairs 3 and 7 (rank 0 skips one of its four pairs of its own block and all four of rank 1's)."""
    names = solution
    runs = view.apply_sync(ring_attention.ring_run, names["ring_attention"], True, None, names["update"])
    assert [sorted({d for d, _ in r["sent"]}) for r in runs] == [[1], [0]]
    n = 2 * ring_attention.CHUNK
    assert [sum(b for _, b in r["sent"]) for r in runs] == [2 * n * ring_attention.D * 8 + n * 8] * 2
    assert [r["pairs"] for r in runs] == [3, 7]


@pytest.mark.slow
@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-ring-answer"}), ids=str)
def test_ring(case, solution, view):
    names = define(case, {"update": solution["update"]})
    judge(case, lambda: _ring(view, names))


@pytest.mark.slow
@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-zigzag-answer"}), ids=str)
def test_zigzag(case, solution, view):
    names = define(case, {"update": solution["update"], "ring_attention": solution["ring_attention"]})

    def judged():
        runs = view.apply_sync(ring_attention.ring_run, names["ring_attention"], True, names["zigzag"], names["update"])
        return ring_attention.zigzag_balance(runs)

    judge(case, judged)


@pytest.fixture(scope="module")
def measured(solution, view):
    """The bytes rank 0 sent: the solution's ring and the course's Ulysses, on the engines."""
    ring = view.apply_sync(ring_attention.ring_bytes_run, solution["ring_attention"], solution["update"], *SIZES)
    ulysses = view.apply_sync(ring_attention.ulysses_run, *SIZES)
    assert all(u["error"] < 1e-12 for u in ulysses), "Ulysses' rows are not whole attention's"
    return {("ring", *SIZES, 2, 8): ring[0], ("ulysses", *SIZES, 2, 8): ulysses[0]["sent"]}


@pytest.mark.slow
@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-bytes-answer"}), ids=str)
def test_bytes(case, measured):
    judge(case, lambda: ring_attention.bytes_predicted(define(case, {})["bytes_sent"], measured))


@pytest.mark.slow
def test_ring_on_the_default_group_is_told_to_pass_group(solution, view):
    """The wrong answer whose sends name no group: its rows and bytes are right (the default group has the same
    ranks), and the check says what is wrong: the group it was given went unused."""
    (case,) = [c for c in cases(NOTEBOOK, {"ex-ring-answer"}) if "default group" in str(c)]
    names = define(case, {"update": solution["update"]})
    said = _ring(view, names)
    assert said and "pass group=group" in said and "rows" not in said, said
