"""Notebook 10's checks of what a learner computes from run times: speedup and efficiency, Amdahl's serial fraction
(Karp-Flatt), Gustafson's scaled speedup, the faster-device study, and why speedups stay below n. The functions a
learner writes are tried on made-up times whose results are plain and on named tables of the cases their rule
covers beyond the notebook's own run (SCALING_CASES, SERIAL_CASES, WEAK_CASES, SHARE_CASES); the values they
store, against the notebook's own measurements (`weak_time`, `step_time`, `compute_time`); the numbers and letters
that would give the answer away, against salted digests (course.checks.quiz), so that neither the notebook nor
this module shows them.

    speedup.speedup_and_efficiency(scaling, bsc)      # None, or what is wrong
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from course.checks import Wrong, check, expect, quiz

# Digests of the BSC hands-on's speedups and efficiencies, rounded to 4 decimals (exercise ex1).
BSC_KEY = {
    "speedup-2": "827c952115a6fde3a7e60dc8e343841ee7651750d8bea4541f1df7e75894dbf8",
    "efficiency-2": "cf8ec4101b1187a69c5695dda7accd8aadd0b6743f37ce39a6aacf8340edf596",
    "speedup-4": "cce1bde4f1d753daf2797892016e8d309b572542911055fc228c4cb33ddc2bb5",
    "efficiency-4": "8491bca9531de27f9db9ba45423f555c4109eb5093c6599c4bdd746a39edc94f",
}
# The digest of the serial fraction of 1.6x on 2 workers, rounded to 6 decimals (exercise ex2).
F2_KEY = {"f2": "a34a6219d1e455eedd6422e936fd18f06c306e9dfbdbc832f02e565c04a82c4b"}
# Whether each letter explains a sub-linear speedup (exercise ex3), and why, shown once judged right.
SUBLINEAR_KEY = {
    "A": "841b1c3b5ecabfa782ed3d15b5b18250af3a5f90bb157dfabb472a182b4871dd",
    "B": "209693f68a7a35394a90e315f3d7f269f62471085c8cbb8a81d2b4700d71db20",
    "C": "51e070106c2e2cd5e856a6faaab39228768200905105cb83e15b5e611815dd3e",
    "D": "24c14b1f2ea4000d1219991d028b2e1c3d96748c4d28e5275ad3bf12dfb131ba",
    "E": "8b0291570cd780c0d13c98b7bc846cd4c210efd4cc4286a1c05fe3b5a82d6ee6",
}
SUBLINEAR_WHY = {
    "A": "one worker never all-reduces; n workers pay a latency per tensor and the bytes over the network every step.",
    "B": "the fixed costs of each step (launch, synchronisation) do not shrink when the work per worker does.",
    "C": "our tables leave the first epoch out, so the graph building does not touch the speedups.",
    "D": "a synchronous step ends when the slowest worker is ready: negotiation in the timeline.",
    "E": "fewer all-reduces per epoch make scaling better, not worse.",
}
# Whether each letter explains the fast device's lower efficiency (exercise ex-device), and why.
DEVICE_KEY = {
    "device-A": "06ebd3f0650cdfa824daaa3bde9ecc34a39ed1eccd2222272db9f5501e8e3c4c",
    "device-B": "bcab2d2dfb1af63741fa10cd1c98ee9634eaf1775439a5c916d9f69ab9ea7150",
    "device-C": "94d0f60f8ccf3feac989119916204fe823a22ae06e6ee4b7ad3ba44357857545",
    "device-D": "fadb3111621d2c97b13bc74c8ff4caf81bc6c6dedbe347e2e3040e180ec81b97",
    "device-E": "20aab3ac40d5733924bcdaa080a671248357b368f122c59b43850bc7aa3e9e1b",
}
DEVICE_WHY = {
    "device-A": "look at the blue bars: they shrink with the device and the workers; the grey ones do not.",
    "device-B": "both devices send the same weights and average the same gradients: compare rest_ms.",
    "device-C": "the grey part does not shrink with the workers; the smaller the blue part, the more it weighs.",
    "device-D": "both runs take the same number of steps (DEVICE_STEPS), with the same messages in each.",
    "device-E": "waiting for each other belongs to the part that is not divided, and lowers the speedup when it grows.",
}


@dataclass(frozen=True)
class TimesCase:
    """Made-up times {workers: seconds} for a learner's function, what the rule gives per worker count, and a name
    the message cites."""

    name: str
    times: Mapping[int, float]
    want: Mapping[int, Any]


@dataclass(frozen=True)
class ShareCase:
    """A speedup on n workers, the serial part the law gives for it, and a name the message cites."""

    name: str
    speedup: float
    n: int
    share: float


# Exercise ex1 beyond the notebook's halving times: S(n) = T(1) / T(n), E(n) = S(n) / n, worked out by hand
SCALING_CASES = (
    TimesCase("a slowdown (2 workers slower than one)", {1: 10.0, 2: 12.5}, {1: (1, 1), 2: (0.8, 0.4)}),
    TimesCase(
        "worker counts that are no powers of two",
        {1: 12.0, 3: 5.0, 6: 3.0},
        {1: (1, 1), 3: (2.4, 0.8), 6: (4, 4 / 6)},
    ),
    TimesCase(
        "the times listed largest count first",
        {8: 2.5, 2: 6.0, 1: 10.0},
        {8: (4, 0.5), 2: (10 / 6, 10 / 12), 1: (1, 1)},
    ),
    TimesCase("one worker alone", {1: 7.0}, {1: (1, 1)}),
)

# Exercise ex2 beyond 1.6x on 2 workers: f = (1/S - 1/n) / (1 - 1/n), worked out by hand
SERIAL_CASES = (
    ShareCase("2.5x on 3 workers", 2.5, 3, 0.1),
    ShareCase("4x on 8 workers", 4.0, 8, 1 / 7),
    ShareCase("5x on 10 workers", 5.0, 10, 1 / 9),
    ShareCase("no gain on 2 workers (1x)", 1.0, 2, 1.0),
    ShareCase("a linear 2x on 2 workers", 2.0, 2, 0.0),
)

# Exercise ex-gustafson beyond the notebook's runs: S = n T(1) / T(n); s = (n - S) / (n - 1), worked out by hand
WEAK_CASES = (
    TimesCase("a larger run faster than one worker", {1: 10.0, 2: 8.0, 4: 12.5}, {1: 1, 2: 2.5, 4: 3.2}),
    TimesCase("3 and 6 workers", {1: 4.0, 3: 5.0, 6: 6.0}, {1: 1, 3: 2.4, 6: 4}),
    TimesCase("the times listed largest count first", {4: 20.0, 1: 10.0}, {4: 2, 1: 1}),
)
SHARE_CASES = (
    ShareCase("no gain on 4 workers (S = 1)", 1.0, 4, 1.0),
    ShareCase("S = 2.4 on 3 workers", 2.4, 3, 0.3),
    ShareCase("S = 57 on 64 workers", 57.0, 64, 1 / 9),
)


def _letters(chosen: Any, not_a_set: str, key: Mapping[str, str], why: Mapping[str, str], prefix: str = "") -> None:
    """Judge each letter A-E of a multiple-choice answer, chosen or not, against the key's digests (course.checks.quiz
    prints right / not yet, letter by letter, and why once right); stop the check with quiz's words if one is not."""
    expect(isinstance(chosen, set) and chosen <= set("ABCDE"), not_a_set)
    try:
        quiz.check({f"{prefix}{letter}": letter in chosen for letter in "ABCDE"}, key, why)
    except AssertionError as wrong:
        raise Wrong(str(wrong)) from None


@check
def speedup_and_efficiency(scaling: Callable[[dict[int, float]], Mapping], bsc: Mapping) -> None:
    """Exercise `ex1`: `scaling(times)` -> {workers: (speedup, efficiency)} and `bsc`, its result for the BSC
    hands-on's epoch times. One worker is the reference; made-up times that halve as the workers double give 4x on 4
    workers and efficiency 1, then every case of SCALING_CASES (a slowdown, counts no powers of two, the times in
    another order, one worker alone); bsc's values are judged against digests, which do not show them."""
    expect(set(bsc) == {1, 2, 4}, "one entry per number of GPUs: 1, 2 and 4")
    expect(abs(bsc[1][0] - 1.0) < 1e-9 and abs(bsc[1][1] - 1.0) < 1e-9, "one worker has speedup 1 and efficiency 1")
    linear = scaling({1: 8.0, 2: 4.0, 4: 2.0})  # made-up times that halve as the workers double
    expect(
        abs(linear[4][0] - 4.0) < 1e-9,
        "speedup: when the time halves as the workers double, 4 workers are 4x faster",
    )
    expect(
        abs(linear[4][1] - 1.0) < 1e-9,
        "efficiency: perfectly linear scaling is 1.0 (the speedup divided by the workers)",
    )
    for case in SCALING_CASES:
        got = scaling(dict(case.times))
        expect(
            isinstance(got, Mapping) and set(got) == set(case.times),
            f"{case.name}: scaling({case.times}) should have one entry per number of workers, {sorted(case.times)}",
        )
        for n, (speedup, efficiency) in case.want.items():
            expect(
                abs(got[n][0] - speedup) < 1e-9 and abs(got[n][1] - efficiency) < 1e-9,
                f"{case.name}: scaling({case.times}) gives {n} worker(s) ({got[n][0]:.4g}, {got[n][1]:.4g}); the "
                f"rule gives ({speedup:.4g}, {efficiency:.4g}): the one-worker time over theirs, then over {n}",
            )
    wrong = [
        f"{kind} on {n} GPUs"
        for n in (2, 4)
        for i, kind in enumerate(("speedup", "efficiency"))
        if not quiz.is_right(f"{kind}-{n}", round(bsc[n][i], 4), BSC_KEY)
    ]
    expect(not wrong, "not right yet for the BSC hands-on's times: " + ", ".join(wrong))


@check
def karp_flatt(serial_fraction: Callable[[float, int], float], f2: float, limit: float) -> None:
    """Exercise `ex2`: `serial_fraction(speedup, n)` (Karp-Flatt) at its two ends (linear: 0, none: 1), `f2` for 1.6x
    on 2 workers (its own function's value, and against a digest), `limit`, the speedup 1 / f2 caps, and the
    function on every case of SERIAL_CASES (other worker counts, both ends on 2 workers)."""
    expect(
        abs(serial_fraction(4, 4)) < 1e-9,
        "a linear speedup (4x on 4 workers) leaves no serial part: f should be 0",
    )
    expect(
        abs(serial_fraction(1, 4) - 1) < 1e-9,
        "no speedup at all (1x on 4 workers) means everything is serial: f should be 1",
    )
    expect(abs(f2 - serial_fraction(1.6, 2)) < 1e-12, "f2 is the serial fraction of the workload: 1.6x on 2 workers")
    expect(
        abs(limit * f2 - 1) < 1e-9,
        "with a serial fraction f, the speedup can never exceed 1 / f: that is the limit",
    )
    for case in SERIAL_CASES:
        got = serial_fraction(case.speedup, case.n)
        expect(
            abs(got - case.share) < 1e-9,
            f"{case.name}: serial_fraction({case.speedup:g}, {case.n}) is {got:.6g}, Karp-Flatt gives {case.share:.6g}",
        )
    expect(
        quiz.is_right("f2", round(f2, 6), F2_KEY),
        "f2 is not right yet: check serial_fraction against Karp-Flatt, f = (1/S - 1/n) / (1 - 1/n)",
    )


def _gustafson_cases(
    scaled_speedup: Callable[[dict[int, float]], Mapping[int, float]],
    gustafson_serial_share: Callable[[float, int], float],
) -> None:
    """Exercise `ex-gustafson`'s two functions on every case of WEAK_CASES and SHARE_CASES, each named if it fails."""
    for case in WEAK_CASES:
        got = scaled_speedup(dict(case.times))
        expect(
            isinstance(got, Mapping) and set(got) == set(case.times),
            f"{case.name}: scaled_speedup({case.times}) should have one entry per number of workers",
        )
        for n, want in case.want.items():
            expect(
                abs(got[n] - want) < 1e-9,
                f"{case.name}: scaled_speedup({case.times}) gives {n} worker(s) {got[n]:.4g}; the rule gives "
                f"{want:.4g}: n times the one-worker time over theirs",
            )
    for case in SHARE_CASES:
        got = gustafson_serial_share(case.speedup, case.n)
        expect(
            abs(got - case.share) < 1e-9,
            f"{case.name}: gustafson_serial_share({case.speedup:g}, {case.n}) is {got:.6g}, Gustafson's law gives "
            f"{case.share:.6g}",
        )


@check
def gustafson_law(
    scaled_speedup: Callable[[dict[int, float]], Mapping[int, float]],
    gustafson_serial_share: Callable[[float, int], float],
    gustafson: Mapping[int, float],
    s_measured: float,
    weak_time: Mapping[int, float],
    workers: Sequence[int],
) -> None:
    """Exercise `ex-gustafson`: `scaled_speedup` on made-up weak-scaling times (flat: S = n; slower: n T(1) / T(n)),
    `gustafson_serial_share` on speedups whose share is plain, both on the cases of WEAK_CASES and SHARE_CASES (a
    larger run faster than one worker, counts no powers of two, no gain at all), and `gustafson` and `s_measured`
    against the notebook's own weak-scaling measurements (`weak_time`, on `workers`)."""
    flat = scaled_speedup({1: 10.0, 2: 10.0, 4: 10.0})  # made-up weak scaling: the time stays flat
    expect(set(flat) == {1, 2, 4}, "one entry per number of workers")
    expect(
        abs(flat[4] - 4.0) < 1e-9,
        "when 4 workers do 4 times the work in the same time as one worker does its share, the scaled speedup is 4",
    )
    slower = scaled_speedup({1: 10.0, 2: 12.5})
    expect(
        abs(slower[2] - 1.6) < 1e-9,
        "2 workers doing twice the work in 12.5 s against 10 s for one share: 2 x 10 / 12.5",
    )
    expect(
        abs(gustafson_serial_share(1.6, 2) - 0.4) < 1e-9,
        "S = 1.6 on 2 workers: S = n - s (n - 1) gives s = 0.4",
    )
    expect(
        abs(gustafson_serial_share(3.4, 4) - 0.2) < 1e-9,
        "S = 3.4 on 4 workers: S = n - s (n - 1) gives s = 0.2",
    )
    expect(
        abs(gustafson_serial_share(4, 4)) < 1e-9,
        "a scaled speedup of n on n workers leaves no serial share",
    )
    _gustafson_cases(scaled_speedup, gustafson_serial_share)
    most = max(workers)
    expect(
        abs(gustafson[most] - most * weak_time[1] / weak_time[most]) < 1e-9,
        "gustafson should come from your weak-scaling times, weak_time",
    )
    expect(
        abs(s_measured - gustafson_serial_share(gustafson[most], most)) < 1e-12,
        f"s_measured is the serial share for the largest run, {most} workers",
    )


@check
def faster_device(
    efficiencies: Callable[[dict[int, float]], Mapping[int, float]],
    device_efficiency: Mapping[str, Mapping[int, float]],
    rest_ms: Mapping[str, float],
    letters: Any,
    step_time: Mapping[str, Mapping[int, float]],
    compute_time: Mapping[str, Mapping[int, float]],
    workers: Sequence[int],
) -> None:
    """Exercise `ex-device`: `efficiencies` on made-up times, `device_efficiency` and `rest_ms` against the
    notebook's measurements of each device (`step_time`, `compute_time`, on `workers`), and the letters that
    explain the fast device's lower efficiency (`faster_device`), judged one by one against digests."""
    made_up = efficiencies({1: 10.0, 2: 6.0, 4: 4.0})
    expect(set(made_up) == {1, 2, 4}, "one entry per number of workers")
    expect(abs(made_up[1] - 1.0) < 1e-9, "one worker is the reference: its efficiency is 1")
    expect(
        abs(made_up[2] - 10 / 12) < 1e-9,
        "2 workers taking 6 s where one takes 10: speedup 10/6 shared by 2 workers",
    )
    expect(
        abs(made_up[4] - 0.625) < 1e-9,
        "4 workers taking 4 s where one takes 10: efficiency is speedup / workers",
    )
    devices = list(step_time)
    expect(set(device_efficiency) == set(devices), f"device_efficiency needs one entry per device: {devices}")
    most = max(workers)
    for d in devices:
        for n in workers:
            expect(
                abs(device_efficiency[d][n] - step_time[d][1] / (n * step_time[d][n])) < 1e-9,
                f"device_efficiency[{d!r}] should be the efficiencies of your measurements, step_time[{d!r}]",
            )
        rest = 1000 * (step_time[d][most] - compute_time[d][most])
        expect(
            abs(rest_ms[d] - rest) < 1e-6,
            f"rest_ms[{d!r}]: a step's time on {most} workers minus its computing, in milliseconds",
        )
    _letters(letters, "faster_device should be a set of letters A-E", DEVICE_KEY, DEVICE_WHY, prefix="device-")


@check
def sublinear_causes(sublinear: Collection[str]) -> None:
    """Exercise `ex3`: the letters that explain why data-parallel speedup stays below n, each judged against a
    digest (right or not yet, and why once right) without showing the key."""
    _letters(sublinear, "sublinear should be a set of letters among A-E", SUBLINEAR_KEY, SUBLINEAR_WHY)
