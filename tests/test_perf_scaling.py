"""course.perf scaling arithmetic on known inputs: speedup, efficiency, throughput, Amdahl, the timeline Gantt."""

from __future__ import annotations

import json
import math

import pytest

from course import UserError, perf, plots


def amdahl_times(f: float, workers=(1, 2, 4, 8), t1: float = 100.0) -> dict[int, float]:
    """Epoch times a program with serial fraction f would take (exactly Amdahl)."""
    return {n: t1 * (f + (1 - f) / n) for n in workers}


def test_strong_scaling_table_from_known_times():
    rows = perf.scaling_table({1: 100.0, 2: 50.0, 4: 40.0}, images=1000)
    assert [r.workers for r in rows] == [1, 2, 4]
    assert [r.speedup for r in rows] == pytest.approx([1.0, 2.0, 2.5])
    assert [r.efficiency for r in rows] == pytest.approx([1.0, 1.0, 0.625])
    assert [r.throughput for r in rows] == pytest.approx([10.0, 20.0, 25.0])
    assert "0.62" in perf.format_table(rows) or "0.63" in perf.format_table(rows)


def test_first_epoch_is_excluded():
    # the first epoch also builds the graph: 30 s, then 10 s epochs on 1 worker and 5 s on 2
    rows = perf.scaling_table({1: [30.0, 10.0, 10.0], 2: [25.0, 5.0, 5.0]}, images=600)
    assert rows[0].time == 10.0 and rows[1].time == 5.0
    assert rows[1].speedup == pytest.approx(2.0)
    assert rows[0].throughput == pytest.approx(60.0)


def test_strong_scaling_from_a_baseline_of_two_workers():
    rows = perf.scaling_table({2: 50.0, 4: 25.0})
    assert rows[0].speedup == pytest.approx(2.0) and rows[1].speedup == pytest.approx(4.0)
    assert rows[1].efficiency == pytest.approx(1.0) and rows[0].throughput is None


def test_weak_scaling_table():
    # the same 1000 images per worker; 2 workers take 12.5 s instead of 10 s
    rows = perf.scaling_table({1: 10.0, 2: 12.5}, kind="weak", images=1000)
    assert rows[1].efficiency == pytest.approx(0.8)
    assert rows[1].speedup == pytest.approx(1.6)
    assert rows[1].throughput == pytest.approx(160.0)


def test_speedup_and_efficiency_scalars():
    assert perf.speedup(45.0, 12.0) == pytest.approx(3.75)  # seed 004: ResNet50V2 on 1 and 4 V100s
    assert perf.efficiency(3.75, 4) == pytest.approx(0.9375)


@pytest.mark.parametrize("f", [0.0, 0.05, 0.1, 0.3])
def test_amdahl_fit_recovers_a_known_serial_fraction(f):
    rows = perf.scaling_table(amdahl_times(f))
    fit = perf.fit_amdahl(rows)
    assert fit.serial_fraction == pytest.approx(f, abs=1e-6)
    assert fit.predict(8) == pytest.approx(rows[-1].speedup, rel=1e-6)
    if f:
        assert fit.max_speedup == pytest.approx(1 / f, rel=1e-4)
    else:
        assert math.isinf(fit.max_speedup)


def test_amdahl_fit_with_noise_stays_close():
    times = amdahl_times(0.2, workers=(1, 2, 4, 8, 16))
    noisy = {n: t * (1.02 if n % 4 else 0.98) for n, t in times.items()}
    fit = perf.fit_amdahl(perf.scaling_table(noisy))
    assert abs(fit.serial_fraction - 0.2) < 0.03


def test_amdahl_and_gustafson_laws():
    assert perf.amdahl_speedup(4, 0.25) == pytest.approx(1 / (0.25 + 0.75 / 4))
    assert perf.gustafson_speedup(4, 0.25) == pytest.approx(4 - 0.25 * 3)


def test_bad_inputs_are_user_errors():
    with pytest.raises(UserError):
        perf.fit_amdahl([1], [1.0])
    with pytest.raises(UserError):
        perf.scaling_table({1: 10.0, 2: 0.0})
    with pytest.raises(UserError):
        perf.scaling_table({0: 10.0})
    with pytest.raises(UserError):
        perf.scaling_table({1: 1.0}, kind="diagonal")


TIMELINE = [
    {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad_dense"}},
    {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "grad_conv"}},
    {"name": "NEGOTIATE_ALLREDUCE", "ph": "B", "ts": 0, "pid": 1},
    {"name": "0", "ph": "X", "ts": 0, "dur": 0, "pid": 1},
    {"name": "1", "ph": "X", "ts": 300000, "dur": 0, "pid": 1},
    {"ph": "E", "ts": 400000, "pid": 1},
    {"name": "ALLREDUCE", "ph": "B", "ts": 400000, "pid": 1},
    {"name": "MPI_ALLREDUCE", "ph": "B", "ts": 450000, "pid": 1},
    {"ph": "E", "ts": 550000, "pid": 1},
    {"ph": "E", "ts": 600000, "pid": 1},
    {"name": "NEGOTIATE_ALLREDUCE", "ph": "B", "ts": 1000000, "pid": 2},
    {"ph": "E", "ts": 1100000, "pid": 2},
    {"name": "ALLREDUCE", "ph": "B", "ts": 1100000, "pid": 2},
    {"ph": "E", "ts": 2000000, "pid": 2},
]


def test_timeline_spans_and_gantt(tmp_path):
    file = tmp_path / "timeline.json"
    file.write_text("[\n" + ",\n".join(json.dumps(e) for e in TIMELINE) + ",\n")  # Horovod leaves it unterminated
    spans = perf.timeline_spans(file)
    top = [(s.tensor, s.phase, s.start, s.end) for s in spans if s.depth == 0]
    assert top == [
        ("grad_dense", "NEGOTIATE_ALLREDUCE", 0.0, 0.4),
        ("grad_dense", "ALLREDUCE", 0.4, 0.6),
        ("grad_conv", "NEGOTIATE_ALLREDUCE", 1.0, 1.1),
        ("grad_conv", "ALLREDUCE", 1.1, 2.0),
    ]
    assert [(s.phase, s.depth) for s in spans if s.depth] == [("MPI_ALLREDUCE", 1)]
    import matplotlib

    matplotlib.use("Agg")
    fig = plots.timeline_gantt(file)
    assert len(fig.axes[0].patches) == 4
    fig = plots.scaling(
        perf.scaling_table(amdahl_times(0.1)), fit=perf.fit_amdahl(perf.scaling_table(amdahl_times(0.1)))
    )
    assert len(fig.axes) == 3


def test_one_scaling_plot_for_tables_and_labelled_epoch_times():
    import matplotlib

    matplotlib.use("Agg")
    # {label: {workers: epoch time}} with 600 images per epoch: speedup T(1) / T(n), throughput 600 / T(n).
    fig = plots.scaling({"a": {1: 4.0, 2: 2.5, 4: 2.0}, "b": {2: 3.0, 4: 2.0}}, {"a": 600, "b": 600}, xlabel="replicas")
    time_ax, rate_ax, speedup_ax = fig.axes
    lines = {line.get_label(): line for line in speedup_ax.get_lines()}
    assert list(lines["a"].get_ydata()) == [1.0, 1.6, 2.0]
    assert list(lines["b"].get_ydata()) == [2.0, 3.0]  # from its fewest workers: 3.0 x 2 / T(n)
    assert list(lines["linear"].get_xdata()) == [1, 2, 4]
    assert [list(line.get_ydata()) for line in rate_ax.get_lines()] == [[150.0, 240.0, 300.0], [200.0, 300.0]]
    assert time_ax.get_xlabel() == "replicas" and list(time_ax.get_xticks()) == [1, 2, 4]
    fit = perf.fit_amdahl(perf.scaling_table(amdahl_times(0.25)))
    one = plots.scaling(perf.scaling_table(amdahl_times(0.25)), fit=fit, title=None)
    amdahl = [line for line in one.axes[2].get_lines() if line.get_label().startswith("Amdahl")]
    assert amdahl and amdahl[0].get_label() == "Amdahl, f=0.25" and not one.texts
    assert not one.axes[1].get_lines()  # a table without images: no throughput line
    weak = plots.weak_scaling(perf.scaling_table({1: 2.0, 2: 2.5}, kind="weak"))
    assert list(weak.axes[1].get_lines()[0].get_ydata()) == [1.0, 0.8]


def test_step_split_stacks_computing_under_the_rest_and_plots_each_devices_efficiency():
    import matplotlib

    matplotlib.use("Agg")
    # Made-up steps: computing 40 ms on 1 worker and 20 on 2 for the slow device, 10 and 5 for the fast one;
    # 5 ms of sending and averaging in every step. Efficiency T(1) / (n T(n)): 45 / 50 and 15 / 20.
    step = {"slow": {1: 0.045, 2: 0.025}, "fast": {1: 0.015, 2: 0.010}}
    compute = {"slow": {1: 0.040, 2: 0.020}, "fast": {1: 0.010, 2: 0.005}}
    fig = plots.step_split(step, compute)
    bars, eff = fig.axes
    computing, rest = bars.containers
    assert [round(b.get_height(), 6) for b in computing] == [40.0, 20.0, 10.0, 5.0]
    assert [round(b.get_height(), 6) for b in rest] == [5.0, 5.0, 5.0, 5.0]
    assert [round(b.get_y(), 6) for b in rest] == [40.0, 20.0, 10.0, 5.0]  # stacked on the computing
    lines = {line.get_label(): [round(y, 6) for y in line.get_ydata()] for line in eff.get_lines()}
    assert lines["slow"] == [1.0, 0.9] and lines["fast"] == [1.0, 0.75]
    with pytest.raises(UserError, match="same devices"):
        plots.step_split(step, {"slow": compute["slow"]})


def test_timeline_breakdown_per_rank_by_hand():
    # Worked out from TIMELINE's events (seconds = ts / 1e6):
    #   grad_dense: negotiation 0.0-0.4 (rank 0 ready at 0.0, rank 1 at 0.3), ALLREDUCE 0.4-0.6 with
    #               MPI_ALLREDUCE 0.45-0.55 inside it;  grad_conv: negotiation 1.0-1.1 (no rank marks), ALLREDUCE 1.1-2.0.
    #   span 0.0-2.0 = 2.0; negotiation 0.4 + 0.1 = 0.5; all-reduce 0.2 + 0.9 = 1.1;
    #   compute = 2.0 - |[0, 0.6] u [1.0, 2.0]| = 2.0 - 1.6 = 0.4.
    #   rank 0 waits 0.0-0.4 = 0.4; compute = 2.0 - |[0, 0.4] u [0.4, 0.6] u [1.1, 2.0]| = 2.0 - 1.5 = 0.5.
    #   rank 1 waits 0.3-0.4 = 0.1; compute = 2.0 - |[0.3, 0.6] u [1.1, 2.0]| = 2.0 - 1.2 = 0.8.
    b = perf.timeline_breakdown(TIMELINE)
    assert b.span == pytest.approx(2.0) and b.tensors == 2
    assert (b.negotiation, b.allreduce, b.compute) == pytest.approx((0.5, 1.1, 0.4))
    assert b.phases == {"MPI_ALLREDUCE": pytest.approx(0.1)}
    assert sorted(b.ranks) == [0, 1]
    assert b.ranks[0] == {
        perf.NEGOTIATION: pytest.approx(0.4),
        perf.ALLREDUCE: pytest.approx(1.1),
        perf.COMPUTE: pytest.approx(0.5),
    }
    assert b.ranks[1] == {
        perf.NEGOTIATION: pytest.approx(0.1),
        perf.ALLREDUCE: pytest.approx(1.1),
        perf.COMPUTE: pytest.approx(0.8),
    }
    # 1.6 s with a collective open: an upper bound on communication (back-propagation overlaps it), and
    # negotiation read as ranks not all ready, never as the network's time
    assert b.collective_open == pytest.approx(1.6)
    said = str(b)
    assert "a collective open 1.600 s (an upper bound on communication" in said, said
    assert "negotiation 0.500 s (ranks not all ready)" in said and "no collective open 0.400 s" in said, said
    assert "network" not in said and "communication 1.6" not in said


def test_karp_flatt_gives_the_serial_fraction_of_one_measurement():
    assert perf.karp_flatt(perf.amdahl_speedup(4, 0.15), 4) == pytest.approx(0.15)
    with pytest.raises(UserError):
        perf.karp_flatt(1.0, 1)
