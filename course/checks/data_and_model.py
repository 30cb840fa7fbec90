"""Notebook 04's checks of data and model parallelism: the rule of thumb on where to cut a model, a two-stage
pipeline, a data x model grid of communicators, and one SPMD step of K-Means. The answers run on the notebook's
MPI engines and on new `mpiexec` jobs of other sizes (`course.comm.on_ranks`); what they send, how often each stage
runs and when each stage worked are measured around them (course.comm.CountingComm, stages that count and time
their calls), not taken from the answer.

    cuts(cheaper_cuts, choose, rows)                        # None, or what is wrong
    pipeline(pipeline, view, x_in, expected)
    layout(layout)
    kmeans(kmeans_step, view, all_points, initial, centroids)

The functions the checks send to the ranks (`on_model`, `stages_seen`, `batch_seconds`, `layout_groups`,
`kmeans_on_ranks`, `kmeans_traffic`) and `overlap` are public, for the notebook's hidden tests too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from course.checks import Wrong, check, deadline, expect
from course.comm import RUN_TIMEOUT, on_ranks
from course.shortcuts import shortcut

# --- exercise ex-cuts: the rule of thumb ----------------------------------------------------------------------------


def cut_problems(got: Any, want: list[str], rows: list[dict]) -> str:
    """What is wrong in a list of cut names, in words ('' if nothing)."""
    if not isinstance(got, list):
        return f"cheaper_cuts should return a list of layer names, got {type(got).__name__}"
    extra = [name for name in got if name not in want]
    missing = [name for name in want if name not in got]
    words = []
    if extra:
        last = " (there is no cut after the last layer)" if rows[-1]["layer"] in extra else ""
        words.append(f"{extra} should not be in it{last}")
    if missing:
        words.append(f"{missing} is missing")
    if not words and got != want:
        words.append("the names should be in model order, each once")
    return "; ".join(words)


@dataclass(frozen=True)
class CutCase:
    """A made-up model for `cheaper_cuts`: its rows and, by the exercise's rule, the cuts that are cheaper."""

    name: str
    rows: tuple[dict, ...]
    cuts: tuple[str, ...]


def _rows(*layers: tuple[str, int, int]) -> tuple[dict, ...]:
    return tuple({"layer": n, "parameters": p, "activations": a} for n, p, a in layers)


# The boundaries of the rule: one layer holding the gradients, ties, gradients spread over several layers (their
# sum counts, not the largest), a cheaper cut only in the middle, and models too short to cut.
CUT_CASES = (
    CutCase(
        "a huge dense layer (50 million gradients)",
        _rows(("embed", 0, 1000), ("huge_dense", 50_000_000, 400), ("out", 4000, 10)),
        ("embed", "huge_dense"),
    ),
    CutCase(
        "ties (30 gradients: a cut that passes as many values is not cheaper)",
        _rows(("a", 10, 30), ("b", 20, 30), ("c", 0, 5)),
        (),
    ),
    CutCase(
        "gradients spread over two layers (600 in all, no layer holds more than 300)",
        _rows(("a", 300, 500), ("b", 300, 500), ("c", 0, 5)),
        ("a", "b"),
    ),
    CutCase(
        "a cheaper cut only in the middle (210 gradients)",
        _rows(("a", 0, 5000), ("b", 100, 50), ("c", 100, 2000), ("d", 10, 10)),
        ("b",),
    ),
    CutCase("one layer (nowhere to cut)", _rows(("only", 10, 1)), ()),
    CutCase("two layers (one place to cut)", _rows(("a", 4, 3), ("b", 4, 1)), ("a",)),
)


@check
def cuts(cheaper_cuts: Callable, choose: Callable, rows: list[dict]) -> None:
    """Exercise `ex-cuts`: on every made-up model of CUT_CASES, the cuts whose activations are fewer than all the
    gradients (never after the last layer), and `choose` on those and on `rows`."""
    for case in CUT_CASES:
        made_up = [dict(r) for r in case.rows]
        problem = cut_problems(cheaper_cuts(made_up), list(case.cuts), made_up)
        expect(not problem, f"cheaper_cuts on {[r['layer'] for r in made_up]} ({case.name}): {problem}")
    for case in CUT_CASES:
        want = "model" if case.cuts else "data"
        expect(
            choose([dict(r) for r in case.rows]) == want,
            f"choose on {case.name}: with {'a cheaper cut' if case.cuts else 'no cheaper cut'} the rule of thumb "
            f"says {want} parallelism",
        )
    expect(choose(rows) == "data", "for the small CNN at this batch, every cut passes more values than the gradients")


# --- exercise ex-pipeline: two stages, micro-batches ----------------------------------------------------------------


def on_model(pipeline: Callable, front: Any, back: Any, batch: np.ndarray, micro_batches: int) -> Any:
    """On every engine: `pipeline` with the two halves of the Keras model as NumPy functions (as the notebook's
    `pipeline_on_model`)."""
    from mpi4py import MPI

    def as_numpy(model: Any) -> Callable:
        return lambda x: model(x, training=False).numpy()

    return pipeline(MPI.COMM_WORLD, as_numpy(front), as_numpy(back), batch, micro_batches)


def stages_seen(pipeline: Callable, micro_batches: int, samples: int = 12) -> dict[str, list[int]]:
    """On every rank: how many times, and on how many samples in all, `front` and `back` ran there."""
    from mpi4py import MPI

    seen = {"front": [0, 0], "back": [0, 0]}

    def stage(name: str) -> Callable:
        def run(x):
            seen[name][0] += 1
            seen[name][1] += len(x)
            return np.asarray(x) + 1

        return run

    batch = np.arange(float(samples)).reshape(samples, 1)
    pipeline(MPI.COMM_WORLD, stage("front"), stage("back"), batch, micro_batches)
    return seen


STAGE_SECONDS = 0.4  # each stage's sleep per whole batch in `batch_seconds`
OVERLAP_SHARE = 0.25  # of a stage's time, the least its two ranks must work at once (8 micro-batches: 7/8 at best)


def batch_seconds(
    pipeline: Callable, micro_batches: int, stage_seconds: float = STAGE_SECONDS, samples: int = 64
) -> tuple[float, Any, list[tuple[float, float]]]:
    """On every engine: seconds for one batch through two stages that each sleep `stage_seconds` per whole batch
    (as the notebook's `pipeline_timing`), what `pipeline` returned, and when each of this rank's stage calls ran:
    (start, end) by the wall clock, which a cluster's nodes keep in step to milliseconds."""
    import time

    from mpi4py import MPI

    comm, batch = MPI.COMM_WORLD, np.arange(float(samples)).reshape(samples, 1)
    ran = []

    def stage(x):  # costs in proportion to its share of the batch
        started = time.time()
        time.sleep(stage_seconds * len(x) / samples)
        ran.append((started, time.time()))
        return x + 1

    comm.Barrier()
    start = time.perf_counter()
    out = pipeline(comm, stage, stage, batch, micro_batches)
    comm.Barrier()
    return time.perf_counter() - start, out, ran


def overlap(first: list[tuple[float, float]], second: list[tuple[float, float]]) -> float:
    """Seconds during which one of the calls `first` and one of the calls `second` ran at the same time (each
    list one rank's calls, one after the other)."""
    return sum(
        max(0.0, min(end, other_end) - max(start, other_start))
        for start, end in first
        for other_start, other_end in second
    )


def _pipeline_output(pipeline: Callable, view: Any, x_in: np.ndarray, expected: np.ndarray) -> None:
    """The pipeline's output on rank 1 against the unsplit model's, and None on every other rank."""
    from ipyparallel import Reference

    front, back = Reference("front"), Reference("back")
    for m in (1, 3, 8):
        out = deadline.apply(view, on_model, pipeline, front, back, x_in, m)[1]
        expect(
            out is not None and np.shape(out) == expected.shape,
            f"with {m} micro-batches rank 1 returned shape {np.shape(out)}; the unsplit model gives {expected.shape}",
        )
        expect(
            np.allclose(out, expected, rtol=1e-5, atol=1e-6),
            f"with {m} micro-batches the pipeline's output differs from the unsplit model's (are the slices in order?)",
        )
    others = [r for i, r in enumerate(deadline.apply(view, on_model, pipeline, front, back, x_in, 2)) if i != 1]
    expect(all(r is None for r in others), "every rank but rank 1 should return None")


def _pipeline_stages(pipeline: Callable, view: Any, timeout: float) -> None:
    """Each stage once per micro-batch, on its own rank, on the engines and on 3 ranks."""
    seen = deadline.apply(view, stages_seen, pipeline, 3)
    idle = {"front": [0, 0], "back": [0, 0]}
    want = [{"front": [3, 12], "back": [0, 0]}, {"front": [0, 0], "back": [3, 12]}] + [idle] * (len(seen) - 2)
    for rank, (got, w) in enumerate(zip(seen, want)):
        expect(
            got == w,
            f"with 3 micro-batches of a batch of 12, rank {rank} ran front {got['front'][0]} time(s) on "
            f"{got['front'][1]} samples and back {got['back'][0]} time(s) on {got['back'][1]} samples: "
            "rank 0 runs front once per micro-batch, rank 1 back once per micro-batch",
        )
    try:
        three = on_ranks(stages_seen, 3, pipeline, 3, timeout=timeout)
    except AssertionError as error:
        raise Wrong(
            f"on 3 ranks the pipeline did not finish ({error}): the stages are ranks 0 and 1, and every "
            "other rank should return None at once"
        ) from None
    expect(three[2] == idle, f"on 3 ranks, rank 2 ran {three[2]}: only ranks 0 and 1 are stages")


@check
def pipeline(
    pipeline: Callable,
    view: Any,
    x_in: np.ndarray,
    expected: np.ndarray,
    together: dict[int, float] | None = None,
    timeout: float = RUN_TIMEOUT,
) -> None:
    """Exercise `ex-pipeline`: on the notebook's engines (holding `front` and `back`) rank 1's output equals the
    unsplit model's for 1, 3 and 8 micro-batches; each stage runs once per micro-batch on its own rank (also on 3
    ranks, the third idle); and with 8 micro-batches through two sleeping stages, rank 0's stage and rank 1's
    work at the same time for at least OVERLAP_SHARE of a stage's time. The overlap, not the clock around the
    batch: where the CPU is capped and busy, a rank waiting in `recv` (MPI polls) delays the other's wake-ups,
    and even a right pipeline's batch takes as long as without one. `together`, if given, receives the overlap
    in seconds (key 8: the micro-batches)."""
    _pipeline_output(pipeline, view, x_in, expected)
    _pipeline_stages(pipeline, view, timeout)
    ranks = deadline.apply(view, batch_seconds, pipeline, 8)
    out, seconds = ranks[1][1], overlap(ranks[0][2], ranks[1][2])
    if together is not None:
        together[8] = seconds
    expect(
        np.allclose(out.ravel(), np.arange(64.0) + 2),
        "through two stages that add 1 each, every value should grow by 2",
    )
    expect(
        seconds >= OVERLAP_SHARE * STAGE_SECONDS,
        f"with 8 micro-batches rank 0's and rank 1's stages worked at the same time for {seconds:.2f} s of the "
        f"{STAGE_SECONDS} s each works: does rank 0 go on with the next micro-batch while rank 1 works on the "
        "previous one?",
    )


# --- exercise ex-layout: data x model groups with comm.Split --------------------------------------------------------


@dataclass(frozen=True)
class LayoutCase:
    """A grid for `layout`: `model_size` on `ranks` ranks; `fits` is False where model_size does not divide them."""

    ranks: int
    model_size: int
    fits: bool = True

    def rows(self) -> list[list[int]]:
        """The grid by rows, as the exercise writes it: row d holds world ranks M d, ..., M d + M - 1."""
        m = self.model_size
        return [list(range(m * d, m * d + m)) for d in range(self.ranks // m)]


# The rule's boundaries: square and oblong grids, one copy of the model (M = ranks) and no model split (M = 1), an
# odd number of ranks, and sizes that do not divide the ranks. One mpiexec job per number of ranks.
LAYOUT_CASES = (
    LayoutCase(3, 3),
    LayoutCase(3, 1),
    LayoutCase(3, 2, fits=False),
    LayoutCase(4, 2),
    LayoutCase(4, 4),
    LayoutCase(6, 3),
    LayoutCase(6, 2),
    LayoutCase(6, 1),
    LayoutCase(6, 6),
    LayoutCase(6, 4, fits=False),
)


def layout_groups(layout: Callable, model_size: int) -> Any:
    """On every rank: (the world ranks of its model group, of its data group), each in the group's own rank order;
    "refused" if `layout` raised ValueError."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    try:
        model_comm, data_comm = layout(world, model_size)
    except ValueError:
        return "refused"
    return model_comm.allgather(world.Get_rank()), data_comm.allgather(world.Get_rank())


def layout_cases(layout: Callable, model_sizes: list[int]) -> list:
    """On every rank: `layout_groups` for each model size in turn (one job tries several grids)."""
    return [layout_groups(layout, m) for m in model_sizes]


def layout_problem(got: list, expected_rows: list[list[int]], ranks: int, model_size: int) -> str:
    """What is wrong in one run's groups, in words ('' if nothing); the expected grid is written out by rows."""
    expected_columns = [list(column) for column in zip(*expected_rows)]
    for rank, groups in enumerate(got):
        if groups == "refused":
            return f"on {ranks} ranks with model_size={model_size} your layout raised ValueError, but a grid fits"
        row = next(r for r in expected_rows if rank in r)
        column = next(c for c in expected_columns if rank in c)
        for name, members, want in (("model group", groups[0], row), ("data group", groups[1], column)):
            if sorted(members) != want:
                return (
                    f"on {ranks} ranks with model_size={model_size}, world rank {rank}'s {name} holds world ranks "
                    f"{sorted(members)}; it should hold {len(want)} ranks: the "
                    f"{'row' if name == 'model group' else 'column'} of the grid that rank {rank} is in"
                )
            if members != want:
                return (
                    f"on {ranks} ranks with model_size={model_size}, world rank {rank}'s {name} numbers its ranks "
                    f"{members}: number them in world order (the key)"
                )
    return ""


@check
def layout(layout: Callable) -> None:
    """Exercise `ex-layout`: on every grid of LAYOUT_CASES (3, 4 and 6 ranks), every rank's model group is its row
    of the grid and its data group its column, in world order; ValueError on every rank where no grid fits."""
    for ranks in sorted({c.ranks for c in LAYOUT_CASES}):
        table = [c for c in LAYOUT_CASES if c.ranks == ranks]
        try:
            found = on_ranks(layout_cases, ranks, layout, [c.model_size for c in table])
        except AssertionError as error:  # a rank raised, or some ranks split while others refused
            raise Wrong(f"on {ranks} ranks with model_size {[c.model_size for c in table]} in turn: {error}") from None
        for k, case in enumerate(table):
            got = [groups[k] for groups in found]
            if case.fits:
                problem = layout_problem(got, case.rows(), ranks, case.model_size)
                expect(not problem, problem)
            else:
                expect(
                    got == ["refused"] * ranks,
                    f"model_size={case.model_size} on {ranks} ranks should raise ValueError on every rank: no grid "
                    "fits",
                )


# --- exercise ex-kmeans: one SPMD step ------------------------------------------------------------------------------


def single_process_kmeans(points: np.ndarray, initial: np.ndarray, iterations: int) -> np.ndarray:
    """scikit-learn's K-Means (Lloyd), from the given centres, for exactly `iterations` steps."""
    from sklearn.cluster import KMeans

    return (
        KMeans(n_clusters=len(initial), init=initial, n_init=1, max_iter=iterations, tol=0, algorithm="lloyd")
        .fit(points)
        .cluster_centers_
    )


def kmeans_on_ranks(step: Callable, points: np.ndarray, initial: np.ndarray, iterations: int) -> tuple:
    """On every rank: `iterations` of `step` on this rank's chunk; the centres and the collectives per step."""
    from mpi4py import MPI

    from course.comm import CountingComm  # counts the collectives asked of it, passes them to MPI

    world = MPI.COMM_WORLD
    comm = CountingComm(world)
    chunk = np.array_split(points, world.Get_size())[world.Get_rank()]
    centres = np.array(initial, dtype=np.float64)
    for _ in range(iterations):
        centres = step(comm, chunk, centres)
    return np.asarray(centres), comm.calls / iterations


def kmeans_traffic(step: Callable, points: np.ndarray, initial: np.ndarray) -> dict:
    """On every rank: what one `step` on this rank's chunk asked of MPI (course.comm.CountingComm)."""
    from mpi4py import MPI

    from course.comm import CountingComm

    world = MPI.COMM_WORLD
    counted = CountingComm(world)
    step(counted, np.array_split(points, world.Get_size())[world.Get_rank()], np.array(initial, dtype=np.float64))
    return counted.traffic()


@dataclass(frozen=True)
class KMeansCase:
    """Made-up points for `kmeans_step`: `clusters` blobs in `dimensions`, started from one point of each blob; run
    on a new job of `ranks` ranks, or on the notebook's engines (ranks=0)."""

    name: str
    ranks: int
    points: int
    clusters: int
    dimensions: int

    def data(self) -> tuple[np.ndarray, np.ndarray]:
        """(points, initial centres), the same every time."""
        generator = np.random.default_rng([self.points, self.clusters, self.dimensions])
        centres = generator.uniform(-20, 20, (self.clusters, self.dimensions))
        labels = generator.permutation(np.arange(self.points) % self.clusters)
        points = centres[labels] + generator.normal(size=(self.points, self.dimensions))
        return points, points[[int(np.flatnonzero(labels == c)[0]) for c in range(self.clusters)]].copy()


# The rule's boundaries where ranks divide points: uneven chunks, a rank holding none of a cluster's points, other
# numbers of clusters and dimensions than the notebook's (one cluster, one dimension).
KMEANS_CASES = (
    KMeansCase("601 points in uneven chunks", 3, 601, 3, 2),
    KMeansCase("5 clusters in 3 dimensions", 3, 300, 5, 3),
    KMeansCase("7 points in 4 clusters (a rank holds none of some clusters)", 3, 7, 4, 2),
    KMeansCase("2 clusters in 1 dimension, 101 points", 0, 101, 2, 1),
    KMeansCase("1 cluster in 4 dimensions", 0, 40, 1, 4),
)


def kmeans_cases(step: Callable, datasets: list[tuple], iterations: int) -> list:
    """On every rank: `kmeans_on_ranks` for each (points, initial) in turn, or the error it raised, in words; after
    a case where any rank raised, every rank stops (their collectives would no longer match)."""
    from mpi4py import MPI

    found = []
    for points, initial in datasets:
        try:
            found.append(kmeans_on_ranks(step, points, initial, iterations))
        except Exception as error:  # the learner's step on other sizes
            found.append(f"{type(error).__name__}: {error}")
        if MPI.COMM_WORLD.allreduce(isinstance(found[-1], str), op=MPI.LOR):
            break
    return found


def _kmeans_results(found: list, cases: list[tuple[str, np.ndarray, np.ndarray]], iterations: int) -> None:
    """Every rank's centres and collectives per step, case by case, against scikit-learn from the same start."""
    ranks = len(found)
    for k, (name, points, initial) in enumerate(cases):
        where = f"on {ranks} ranks with {name} (chunks of {[len(c) for c in np.array_split(points, ranks)]} points)"
        want = single_process_kmeans(points, initial, iterations)
        for rank, results in enumerate(found):
            got = results[k] if k < len(results) else "no result (an earlier case failed)"
            expect(not isinstance(got, str), f"{where}, rank {rank} raised {got}")
            centres, calls = got
            expect(
                calls == 1,
                f"{where}, rank {rank} asked for {calls:g} collective(s) per step: pack the sums and the counts into "
                "one array and all-reduce it once",
            )
            expect(
                np.shape(centres) == np.shape(initial),
                f"{where}, rank {rank} returned centres of shape {np.shape(centres)} for {np.shape(initial)}",
            )
            expect(
                np.allclose(centres, want, atol=1e-8),
                f"{where}, rank {rank}'s centres differ from scikit-learn's K-Means from the same start",
            )


def _kmeans_cases(kmeans_step: Callable, view: Any, notebook: tuple[np.ndarray, np.ndarray]) -> None:
    """The notebook's points on 3 ranks and every case of KMEANS_CASES, 10 steps each: one mpiexec job for the
    3-rank cases, the rest on the notebook's engines."""
    on_three = [("the notebook's first 600 points", *notebook)]
    on_three += [(c.name, *c.data()) for c in KMEANS_CASES if c.ranks == 3]
    on_engines = [(c.name, *c.data()) for c in KMEANS_CASES if c.ranks == 0]
    try:
        three = on_ranks(kmeans_cases, 3, kmeans_step, [c[1:] for c in on_three], 10)
    except AssertionError as error:  # a collective that some ranks skipped
        raise Wrong(f"on 3 ranks: {error}") from None
    _kmeans_results(three, on_three, 10)
    _kmeans_results(deadline.apply(view, kmeans_cases, kmeans_step, [c[1:] for c in on_engines], 10), on_engines, 10)


def _kmeans_messages(kmeans_step: Callable, view: Any, all_points: np.ndarray, initial: np.ndarray) -> None:
    """One all-reduce per step, of the clusters' sums and counts, not of the points."""
    k, d = np.shape(initial)
    for rank, traffic in enumerate(deadline.apply(view, kmeans_traffic, kmeans_step, all_points[:600], initial)):
        other = [name for name in traffic["collectives"] if name not in ("Allreduce", "allreduce")]
        expect(
            not other,
            f"on rank {rank}, kmeans_step asked for comm.{other[0] if other else ''}: every rank needs only the "
            "sums and counts of all ranks, which one all-reduce gives (no rank needs the points)",
        )
        expect(
            traffic["collective_bytes"] <= 8 * k * (d + 1),
            f"on rank {rank}, kmeans_step all-reduced {traffic['collective_bytes']:,d} bytes for {k} clusters in "
            f"{d} dimensions: all-reduce each cluster's sum and count ({k} x {d + 1} values), not the points",
        )


def _kmeans_empty_and_single(kmeans_step: Callable, view: Any, all_points: np.ndarray, initial: np.ndarray) -> None:
    """A cluster with no points keeps its centre; a cluster of one point moves onto it."""
    far = np.vstack([initial[:2], [[100.0, 100.0]]])  # a centre no point is nearest to
    for centres, _ in deadline.apply(view, kmeans_on_ranks, kmeans_step, all_points[:300], far, 3):
        expect(np.all(np.isfinite(centres)), "a cluster with no points should keep its centre, not become NaN")
        expect(np.allclose(centres[2], [100.0, 100.0]), "a cluster with no points should keep its centre")
    alone = np.vstack([all_points[:300], [[90.0, 90.0]]])  # one point, alone near the far centre
    for centres, _ in deadline.apply(view, kmeans_on_ranks, kmeans_step, alone, far, 1):
        expect(np.allclose(centres[2], [90.0, 90.0]), "a cluster of one point should move its centre onto that point")


@check
def kmeans(
    kmeans_step: Callable, view: Any, all_points: np.ndarray, initial: np.ndarray, centroids: np.ndarray
) -> None:
    """Exercise `ex-kmeans`: `centroids`, the notebook's 10 steps on its engines from `initial`, against
    scikit-learn's K-Means from the same start (the difference printed); the same on 3 ranks with one collective
    per step, for the notebook's points and every case of KMEANS_CASES (uneven chunks, other numbers of clusters and
    dimensions); only the sums and counts all-reduced; empty clusters kept, a one-point cluster moved onto it."""
    ranks = len(view)
    used = [u for u in deadline.apply(view, shortcut, kmeans_step, all_points[:60], initial, collectives=True) if u]
    expect(
        not used,
        f"kmeans_step: {used[0] if used else ''}: write the step yourself (assign, sum and count, one comm.Allreduce)",
    )
    single = single_process_kmeans(all_points, initial, 10)
    expect(
        np.shape(centroids) == np.shape(initial),
        f"kmeans_step should return the centres as an array of shape {np.shape(initial)}, like `centroids`",
    )
    print("largest difference from single-process K-Means:", float(np.abs(single - centroids).max()))
    expect(
        np.allclose(single, centroids, atol=1e-8),
        f"after 10 steps on {ranks} ranks the centres differ from scikit-learn's K-Means from the same start",
    )
    _kmeans_cases(kmeans_step, view, (all_points[:600], initial))
    _kmeans_messages(kmeans_step, view, all_points, initial)
    _kmeans_empty_and_single(kmeans_step, view, all_points, initial)
