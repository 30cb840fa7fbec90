"""Notebook 06's checks, both parts: a learner's input pipeline (part one: 06_input_pipeline_and_profiler) and loss
scaling (part two: 06_mixed_precision_and_xla). Part one: the pipeline's batches (fingerprints, in order), its
parallel decoding, caching and prefetching measured in the profiler's traces of its first two passes
(course.tfprofiler), its wait for data measured by running it (course.input_pipeline). Part two: a hand-written
loss-scaling step run side by side with Keras's LossScaleOptimizer from the same weights and scale
(course.precision.keras_steps). The reading of the profiler's trace (part one) is checked in
course.checks.trace_waits.

    pipeline(fast_pipeline, raw, BATCH, slow, slow_timing, train_step, EPOCHS, WAIT_BOUND)   # None, or what is wrong
    loss_scaling(my_scaled_step, build_small, batches)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from course.checks import check, expect


def decoding(fast: Any) -> tuple[list[str], int, int]:
    """A first pass over a new pipeline with the profiler on: its batches' fingerprints, how many files the runtime
    decoded (`DecodeJpeg` ops, on tf.data's threads) and the most it decoded at one instant."""
    import tempfile

    from course import input_pipeline, tfprofiler

    with tempfile.TemporaryDirectory(prefix="course-pipeline-") as logdir:
        prints, events = tfprofiler.record(lambda: input_pipeline.fingerprints(fast), logdir)
    decodes = tfprofiler.ops(events, input_pipeline.DECODE_OP)
    return prints, len(decodes), tfprofiler.most_at_once(decodes)


def parallel_decoding(fast_pipeline: Callable, raw: Any, batch_size: int) -> tuple[Any, list[str], int, int]:
    """`fast_pipeline(raw, batch_size)` read once (`decoding`); if it decoded one file at a time on a machine of
    several cores, built and read once more (other work on the cores can hold one of tf.data's threads a pass
    long). The pipeline last read, its batches' fingerprints, the files it decoded and the most at once."""
    import tensorflow as tf

    from course import devices

    fast = fast_pipeline(raw, batch_size)
    expect(isinstance(fast, tf.data.Dataset), "fast_pipeline should return a tf.data.Dataset built from raw")
    got, decoded, at_once = decoding(fast)
    if at_once < 2 and devices.cores() > 1:
        fast = fast_pipeline(raw, batch_size)
        got, decoded, again = decoding(fast)
        at_once = max(at_once, again)
    print(f"first pass: {decoded} files decoded, at most {at_once} at once")
    return fast, got, decoded, at_once


def second_pass(fast: Any) -> tuple[int, list[str]]:
    """A second pass over a pipeline already read once, with the profiler on: how many files the runtime decoded
    again (none, where decoded images are cached) and the stages it built iterators for, outermost first."""
    import tempfile

    from course import input_pipeline, tfprofiler

    with tempfile.TemporaryDirectory(prefix="course-pipeline-") as logdir:
        _, events = tfprofiler.record(lambda: input_pipeline.fingerprints(fast), logdir)
    return len(tfprofiler.ops(events, input_pipeline.DECODE_OP)), tfprofiler.iterators_built(events)


def expect_cached_and_prefetched(stages: list[str], decoded_again: int, built: list[str]) -> None:
    """Measured on the second pass: no file decoded again (a cache after the decoding), and the stage the runtime
    built outermost, where the model pulls, a prefetch. `stages` (the dataset's own) only chooses the words."""
    first_map = min((i for i, stage in enumerate(stages) if stage.endswith("map")), default=-1)
    expect(
        decoded_again == 0,
        "the cache holds the files before decoding, so every epoch still decodes them all"
        if "cache" in stages and stages.index("cache") < first_map
        else f"every epoch decodes every file again ({decoded_again} decodes in a second pass): keep what is "
        "already decoded",
    )
    outermost = built[0] if built else "none"
    expect(
        outermost.startswith("Prefetch"),
        f"the model pulls batches, but the last stage is {stages[-1]!r} (the runtime built {outermost} "
        "outermost): the stage that prepares ahead belongs where the model pulls",
    )


def expect_parallel(fast: Any, decoded: int, at_once: int) -> None:
    """Files were decoded, several at once; on one core, where tf.data decodes one at a time whatever the map asks,
    the map's configuration is what there is to read (`num_parallel_calls` other than 1)."""
    from course import devices, input_pipeline

    expect(
        decoded > 0,
        f"reading your pipeline the first time decoded no file ({input_pipeline.DECODE_OP}, decode's op): build it "
        "on raw with decode (and no cache kept from an earlier run)",
    )
    one_at_a_time = (
        f"the decoding map decodes one file at a time (at most {at_once} at once in its first pass): tf.data can "
        "decode several at once"
    )
    if devices.cores() > 1:
        expect(at_once > 1, one_at_a_time)
    else:
        expect(any(calls != 1 for calls in input_pipeline.parallel_calls(fast)), one_at_a_time)


@check
def pipeline(
    fast_pipeline: Callable,
    raw: Any,
    batch_size: int,
    slow: Any,
    before: Any,
    train_step: Callable,
    epochs: int,
    bound: float,
) -> None:
    """Exercise `ex1`: the dataset `fast_pipeline(raw, batch_size)` feeds the same batches, in the same order, as
    `slow` (raw.map(decode).batch(batch_size)), decodes files in parallel (measured: the profiler's trace of its
    first pass holds two decodes at once, or that of a second pipeline built the same way; on one core, where
    tf.data decodes one at a time whatever the map asks, its map's configuration), caches the decoded images
    and prefetches where the model pulls (measured: a second pass decodes no file, and the runtime builds a
    prefetch outermost), and leaves `train_step` waiting for its data less than `bound` of the time
    (measured over `epochs`, the first not counted; once more if the first measurement misses). `before` is the
    slow pipeline's Timing."""
    from course import input_pipeline

    want = input_pipeline.fingerprints(slow)
    fast, got, decoded, at_once = parallel_decoding(fast_pipeline, raw, batch_size)
    stages = input_pipeline.stages(fast)
    print("stages:", stages)
    expect(
        len(got) == len(want),
        f"the pipeline yields {len(got)} batches, the slow one {len(want)}: batch the decoded images with the "
        "batch_size given",
    )
    expect(
        sorted(got) != sorted(want) or got == want,
        "the same batches, but in another order: keep the order of raw (no shuffle; a map that keeps its order)",
    )
    expect(
        got == want,
        "the batches differ from the slow pipeline's: keep the order of raw inside each batch too (no shuffle; a "
        "map that keeps its order), and decode every file with decode, then batch",
    )
    expect_parallel(fast, decoded, at_once)
    expect_cached_and_prefetched(stages, *second_pass(fast))
    timing = input_pipeline.measure(fast, train_step, epochs)
    if timing.wait_fraction >= bound:  # once more: other work on the cores can stall one measurement
        timing = min(timing, input_pipeline.measure(fast, train_step, epochs), key=lambda t: t.wait_fraction)
    print(
        f"before: step {before.step_ms:.1f} ms, waiting {before.wait_fraction:.0%}; "
        f"after: step {timing.step_ms:.1f} ms, waiting {timing.wait_fraction:.0%}"
    )
    expect(
        timing.wait_fraction < bound,
        f"the model still waits {timing.wait_fraction:.0%} of the time (bound {bound:.0%}): look at what each "
        "epoch still does before the model gets a batch",
    )


@dataclass(frozen=True)
class PipelineCase:
    """A dataset fast_pipeline is tried on: the first `files` of raw in batches of `batch`, and a name to cite."""

    name: str
    files: int
    batch: int


# Batch sizes that do not divide the files (a short last batch), a batch larger than the files, batches of one
PIPELINE_CASES = (
    PipelineCase("50 files in batches of 16 (the last batch holds 2)", 50, 16),
    PipelineCase("5 files in batches of 8 (one short batch)", 5, 8),
    PipelineCase("3 files in batches of 1", 3, 1),
)


@check
def pipeline_cases(fast_pipeline: Callable, raw: Any, decode: Callable) -> None:
    """Exercise `ex1` on PIPELINE_CASES: `fast_pipeline(raw.take(files), batch)` yields the batches of
    `raw.take(files).map(decode).batch(batch)`, in order; the message names the case."""
    from course import input_pipeline

    for case in PIPELINE_CASES:
        few = raw.take(case.files)
        want = input_pipeline.fingerprints(few.map(decode).batch(case.batch))
        got = input_pipeline.fingerprints(fast_pipeline(few, case.batch))
        expect(
            len(got) == len(want),
            f"{case.name}: your pipeline yields {len(got)} batch(es), raw.map(decode).batch({case.batch}) {len(want)}",
        )
        expect(got == want, f"{case.name}: the batches differ from raw.map(decode).batch({case.batch})'s")


def side_by_side(
    step: Callable, build: Callable, initial: float, growth: int, batches: Sequence, lr: float = 0.05
) -> list[dict]:
    """Keras's LossScaleOptimizer and `step(model, optimizer, images, labels, state)` from the same weights
    (`build()` under mixed_float16) and scale, on the same batches: per step, the scale before it, each one's scale
    after it, whether the weights are finite, each one's loss, and how far the weights are from Keras's."""
    import tensorflow as tf

    from course import precision

    with precision.policy("mixed_float16"):
        keras = precision.keras_steps(build, batches, initial, growth, lr)
        mine = build()
    plain, state = tf.keras.optimizers.SGD(lr), {"scale": initial, "good_steps": 0, "growth_steps": growth}
    rows, before = [], initial
    for k, ((images, labels), ref) in enumerate(zip(batches, keras), 1):
        loss = step(mine, plain, images, labels, state)
        weights = mine.get_weights()
        rows.append(
            {
                "step": k,
                "before": before,
                "keras": ref["scale"],
                "mine": float(state["scale"]),
                "finite": all(np.isfinite(w).all() for w in weights),
                "ref_loss": ref["loss"],
                "loss": float(loss),
                "moved": sum(float(np.abs(w).sum()) for w in weights),
                "diff": max(float(np.abs(a - b).max()) for a, b in zip(weights, ref["weights"])),
            }
        )
        before = ref["scale"]
    return rows


@check
def agrees(rows: list[dict]) -> None:
    """After every step of `side_by_side`: finite weights, the unscaled loss, Keras's scale and Keras's weights."""
    for r in rows:
        k = r["step"]
        event = (
            "its gradients overflowed"
            if r["keras"] < r["before"]
            else "it ends a run of good steps"
            if r["keras"] > r["before"]
            else ""
        )
        expect(
            r["finite"], f"after step {k} the weights hold inf or nan: {event or 'an overflowed update was applied'}"
        )
        expect(
            np.isclose(r["loss"], r["ref_loss"], rtol=1e-4, equal_nan=True),
            f"step {k}: the loss returned is {r['loss']:.4g}, the loss itself {r['ref_loss']:.4g}: return it unscaled",
        )
        expect(
            r["mine"] == r["keras"],
            f"after step {k} your scale is {r['mine']:g}, Keras's {r['keras']:g} (it was {r['before']:g} before the "
            f"step{', and ' + event if event else ''})",
        )
        should = (
            "this step should not update them"
            if event.startswith("its")
            else "the update applied should be the gradient itself, at the learning rate"
        )
        expect(r["diff"] < 1e-4, f"after step {k} the weights differ from Keras's by {r['diff']:.3g}: {should}")


@check
def loss_scaling(my_scaled_step: Callable, build: Callable, batches: Sequence) -> None:
    """Exercise `ex3`: `my_scaled_step`, written without Keras's loss scaling, agrees with LossScaleOptimizer at
    every step from S = 2^17, doubling after 2 good steps, on `batches` (8 of 32 images: the scale grows until the
    float16 gradients overflow); prints the scales side by side; then on SCALING_CASES, overflows after every
    number of good steps a growth count holds."""
    from course.shortcuts import names_used

    keras = {"LossScaleOptimizer", "get_scaled_loss", "get_unscaled_gradients", "keras_steps"} & names_used(
        my_scaled_step
    )
    expect(
        not keras, f"my_scaled_step uses Keras's loss scaling ({min(keras, default='')}): write the scaling yourself"
    )
    rows = side_by_side(my_scaled_step, build, 2.0**17, 2, batches)
    print("step  scale before  Keras after  yours after  weights differ by")
    for r in rows:
        print(f"{r['step']:>4} {r['before']:>13g} {r['keras']:>12g} {r['mine']:>12g} {r['diff']:>18.2e}")
    expect(any(r["keras"] < r["before"] for r in rows), "(no step overflowed: the comparison shows nothing)")
    problem = agrees(rows)
    expect(problem is None, problem or "")
    problem = scaling_cases(my_scaled_step, build, batches)
    expect(problem is None, problem or "")


@dataclass(frozen=True)
class ScalingCase:
    """A run of loss scaling: its start and growth, the steps (from 1) whose gradients overflow whatever the scale
    (their batch holds a nan), how many steps, and a name the message cites."""

    name: str
    initial: float
    growth: int
    overflows: tuple[int, ...]
    steps: int


# Overflows after every number of good steps a growth count can hold (0 to growth - 1), two in a row, none
SCALING_CASES = (
    ScalingCase(
        "growth every 3 good steps, overflows after 0, 2 and 1 good steps (steps 1, 4, 6)", 2.0**10, 3, (1, 4, 6), 9
    ),
    ScalingCase("growth every 2 good steps, two overflows in a row (steps 2 and 3)", 2.0**10, 2, (2, 3), 4),
)


def poisoned(batches: Sequence, overflows: Sequence[int], steps: int, images_per_batch: int = 4) -> list:
    """The first `steps` of `batches` (cycled, the first `images_per_batch` images of each), with a nan in the first
    image of the steps in `overflows` (from 1): their loss and gradients are nan at any scale: the step is skipped."""
    import tensorflow as tf

    out = []
    for k in range(1, steps + 1):
        images, labels = batches[(k - 1) % len(batches)]
        images, labels = images[:images_per_batch], labels[:images_per_batch]  # a few: the run is the learner's wait
        if k in overflows:
            images = np.array(images)
            images[0, 0, 0, 0] = np.nan
            images = tf.constant(images)
        out.append((images, labels))
    return out


@check
def scaling_cases(
    my_scaled_step: Callable, build: Callable, batches: Sequence, cases: Sequence = SCALING_CASES
) -> None:
    """Loss scaling beside Keras's LossScaleOptimizer on each case of `cases`, with the overflows where the case puts
    them (`poisoned`): the scale and the weights after every step; the message names the case."""
    for case in cases:
        rows = side_by_side(
            my_scaled_step, build, case.initial, case.growth, poisoned(batches, case.overflows, case.steps)
        )
        problem = agrees(rows)
        expect(problem is None, f"{case.name}: {problem}")
