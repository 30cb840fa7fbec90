"""Notebook 02's checks of SGD written from scratch: one training step against `course.nn`'s own loss and
update, the engines' averaged gradient against the whole batch's (and which processes computed it, read from
the controller's records and a count of `nn.gradients` calls in the notebook, not from the answer), and the
learning-rate schedule with warm-up at the steps that tell its mistakes apart.

    training_step(train_step, params, X[:64], Y[:64])          # None, or what is wrong
    parallel_gradient(parallel_gradient, view, params, X, Y)
    warmup_schedule(lr_schedule)
    momentum(momentum_step)                                     # SGD with momentum on made-up parameters
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from course.checks import check, deadline, expect


@check
def training_step(train_step: Callable, params: list[np.ndarray], xb: np.ndarray, yb: np.ndarray) -> None:
    """Exercise `ex1`: `train_step(params, xb, yb, learning_rate)` returns new parameters and the loss before the
    update, as a mean over the batch, leaves `params` alone, steps downhill, and scales its step with the rate."""
    from course import nn

    before = [p.copy() for p in params]
    out = train_step(params, xb, yb, 0.1)
    expect(isinstance(out, tuple) and len(out) == 2, "train_step should return (new_params, loss)")
    new, loss = out
    expect(
        all(np.array_equal(a, b) for a, b in zip(params, before)),
        "train_step changed `params` in place: return a new list (nn.sgd_update makes one) and leave `params` "
        "as it was",
    )
    expect(np.ndim(loss) == 0, f"the loss should be one number, got an array of shape {np.shape(loss)}")
    n, right = len(yb), nn.loss(params, xb, yb)
    expect(
        abs(loss * n - right) > 1e-9,
        "your loss is divided by the batch size twice: nn.cross_entropy already averages over the batch",
    )
    expect(abs(loss / n - right) > 1e-9, "your loss is summed over the batch: the loss is the mean over the batch")
    expect(
        abs(loss - nn.loss(new, xb, yb)) > 1e-9,
        "your loss is the loss after the update: measure it before the update (steps 1-3 come before step 5)",
    )
    expect(
        abs(loss - right) < 1e-9,
        f"the loss returned, {loss:.4f}, is not the cross-entropy of the batch before the update",
    )
    expect(nn.loss(new, xb, yb) < loss, "one step should lower the loss on the same batch: step against the gradient")
    half = train_step(params, xb, yb, 0.05)[0]
    expect(
        all(np.allclose(2 * (h - p), m - p) for h, p, m in zip(half, params, new)),
        "half the learning rate should give half the step: use the `learning_rate` argument",
    )


def difference(got: Any, want: Sequence[np.ndarray]) -> float:
    """The largest absolute difference between a returned gradient and `want`, once it has one array per
    parameter array."""
    expect(
        isinstance(got, (list, tuple)) and len(got) == len(want),
        "return one gradient array per parameter array (W1, b1, W2, b2)",
    )
    return max(float(np.abs(np.asarray(g) - w).max()) for g, w in zip(got, want))


def _parts(n: int, engines: int) -> list[int]:
    return [len(part) for part in np.array_split(np.arange(n), engines)]


@check
def parallel_gradient(
    parallel_gradient: Callable, view: Any, params: list[np.ndarray], x: np.ndarray, y: np.ndarray
) -> None:
    """Exercise `ex2`: `parallel_gradient(view, params, xb, yb)` equals the whole batch's gradient for a batch that
    splits into equal parts (64 samples on 2 engines) and one that does not (33), and every engine computes a part
    (the samples of each engine's `nn.gradients` calls, recorded on the engines, add up to the batch) while the
    notebook's own process computes none."""
    from course import nn

    engines = len(view)
    got = deadline.call(view, parallel_gradient, view, params, x[:64], y[:64])
    want = nn.gradients(params, x[:64], y[:64])[1]
    error = difference(got, want)
    parts = " + ".join(map(str, _parts(64, engines)))
    print(f"equal parts ({parts} samples): largest difference from the whole-batch gradient {error:.2e}")
    ratio = sum(float(np.vdot(g, w)) for g, w in zip(got, want)) / sum(float(np.vdot(w, w)) for w in want)
    expect(
        error < 1e-10 or abs(ratio - 1) < 1e-6 or difference(got, [ratio * w for w in want]) > 1e-10,
        f"your result is {ratio:.3g} times the whole-batch gradient: the weights of the average should add up to 1",
    )
    expect(error < 1e-10, "the averaged engine gradients should equal the whole-batch gradient (equal parts)")
    got = deadline.call(view, parallel_gradient, view, params, x[:33], y[:33])
    error = difference(got, nn.gradients(params, x[:33], y[:33])[1])
    parts = " + ".join(map(str, _parts(33, engines)))
    print(f"unequal parts ({parts} samples): largest difference from the whole-batch gradient {error:.2e}")
    plain = nn.average(
        [
            nn.gradients(params, xs, ys)[1]
            for xs, ys in zip(np.array_split(x[:33], engines), np.array_split(y[:33], engines))
        ]
    )
    unequal = " and ".join(map(str, _parts(33, engines)))
    expect(
        error < 1e-10 or difference(got, plain) > 1e-10,
        f"with unequal parts ({unequal} samples) your result is the plain mean of the engines' gradients: "
        "weight each engine's gradient by its number of samples",
    )
    expect(error < 1e-10, f"with unequal parts ({unequal} samples) the result should still be the whole-batch gradient")
    _computed_on_the_engines(parallel_gradient, view, params, x[:40], y[:40])


def _computed_on_the_engines(
    parallel_gradient: Callable, view: Any, params: list, x: np.ndarray, y: np.ndarray
) -> None:
    """Every engine computes the gradient of its own part, the notebook's process of none: measured around one call."""
    from course import nn
    from course.checks import where

    engines, since = len(view), len(view.client.history)
    deadline.apply(view, record_gradient_samples)
    try:
        with where.counting(nn, "gradients") as kernel:
            deadline.call(view, parallel_gradient, view, params, x, y)
    finally:
        samples = deadline.apply(view, recorded_gradient_samples)
    ran = {c.engine for c in where.engine_calls(view.client, since)}
    total = sum(map(sum, samples))
    expect(
        total in (0, len(y)),  # 0: the answer reached a gradient function bound before the check, so nothing is known
        f"for a batch of {len(y)} the engines computed gradients on {total} samples ({' + '.join(map(str, map(sum, samples)))}"
        "): each engine should compute the gradient of its own part only, the parts adding up to the batch",
    )
    expect(
        kernel.calls == 0,
        f"nn.gradients ran {kernel.calls} time(s) in the notebook's own process: each engine should compute the "
        "gradient of its part, and the notebook only average them",
    )
    expect(
        len(ran) >= engines,
        f"only engine(s) {sorted(ran)} ran anything: every engine of the view should compute on its part of the batch",
    )


def record_gradient_samples() -> None:
    """On an engine: note the number of samples of every `nn.gradients` call from now on (the function still runs)."""
    from course import nn

    original = getattr(nn.gradients, "__wrapped__", nn.gradients)
    samples: list[int] = []

    def recorded(params, x, y):
        samples.append(len(y))
        return original(params, x, y)

    recorded.__wrapped__, recorded.samples = original, samples
    nn.gradients = recorded


def recorded_gradient_samples() -> list[int]:
    """On an engine: the samples of each `nn.gradients` call since `record_gradient_samples`; puts the function back."""
    from course import nn

    samples = getattr(nn.gradients, "samples", [])
    nn.gradients = getattr(nn.gradients, "__wrapped__", nn.gradients)
    return samples


@dataclass(frozen=True)
class WarmupCase:
    """One call of lr_schedule, the rate it must give, and a name the message cites."""

    name: str
    step: int
    base_lr: float
    base_batch: int
    batch: int
    warmup_steps: int
    rate: float


# Batches that are no whole multiple of the base (larger and smaller), the shortest warm-up and its last step
WARMUP_CASES = (
    WarmupCase("a batch 1.5 times the base (96 from 64), after the warm-up", 100, 0.1, 64, 96, 10, 0.15),
    WarmupCase("a batch half the base (16 from 32), no warm-up", 5, 0.2, 32, 16, 0, 0.1),
    WarmupCase("a warm-up of one step, at step 0", 0, 0.1, 32, 64, 1, 0.02),
    WarmupCase("a warm-up of one step, at step 1", 1, 0.1, 32, 64, 1, 0.2),
    WarmupCase("the last step of a 10-step warm-up, batch 48 from 32", 9, 0.1, 32, 48, 10, 0.1365),
)


@check
def warmup_schedule(lr_schedule: Callable) -> None:
    """Exercise `ex3`: `lr_schedule(step, base_lr, base_batch, batch, warmup_steps)` scales the rate linearly with
    the batch and ramps it from a tenth of that target over the warm-up, also when there is none; then the cases of
    WARMUP_CASES (batches no whole multiple of the base, a one-step warm-up)."""
    expect(abs(lr_schedule(1000, 0.1, 32, 256, 50) - 0.8) < 1e-12, "after warm-up: base_lr * batch / base_batch")
    expect(abs(lr_schedule(0, 0.1, 32, 256, 50) - 0.08) < 1e-12, "warm-up starts at a tenth of the target rate")
    mid = lr_schedule(25, 0.1, 32, 256, 50)
    expect(
        abs(mid - 0.8) > 1e-12,
        "half-way through the warm-up your rate is already the target: it should rise linearly over the warm-up, "
        "not jump",
    )
    expect(
        abs(mid - 0.08) > 1e-12,
        "half-way through the warm-up your rate is still the starting one: it should rise linearly over the warm-up",
    )
    expect(
        abs(mid - 0.44) < 1e-12,
        "half-way through the warm-up (step 25 of 50) the rate should be half-way between the start and the "
        f"target; got {mid:.4g}",
    )
    expect(abs(lr_schedule(50, 0.1, 32, 256, 50) - 0.8) < 1e-12, "the target is reached at step warmup_steps")
    try:
        none = lr_schedule(0, 0.1, 32, 256, 0)
    except ZeroDivisionError:
        expect(
            False,
            "with warmup_steps=0 (no warm-up) your schedule divides by zero: without a warm-up the rate is the "
            "target from step 0",
        )
    expect(abs(none - 0.8) < 1e-12, "with warmup_steps=0 (no warm-up) the rate should be the target from step 0")
    for case in WARMUP_CASES:
        got = lr_schedule(case.step, case.base_lr, case.base_batch, case.batch, case.warmup_steps)
        expect(
            abs(got - case.rate) < 1e-12,
            f"{case.name}: lr_schedule({case.step}, {case.base_lr}, {case.base_batch}, {case.batch}, "
            f"{case.warmup_steps}) is {got:.6g}, it should be {case.rate:g}",
        )


def _arrays(shapes: list[tuple[int, ...]], seed: int, dtype: type = np.float64) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


MOMENTUM_DTYPES = (np.float64, np.float32)  # the notebook's parameters, then a GPU's usual dtype: a step keeps each


@check
def momentum(momentum_step: Callable, shapes: tuple = ((3, 4), (4,)), dtype: type | None = None) -> None:
    """Exercise `ex-momentum`: `momentum_step(params, grads, velocity, learning_rate, beta)` returns new lists
    (params - learning_rate * v', v' = beta * v + grads), leaves its inputs alone, is plain SGD at beta 0 and keeps
    the parameters' dtype; on `dtype`, else on each of MOMENTUM_DTYPES."""
    for each in [dtype] if dtype is not None else MOMENTUM_DTYPES:
        _momentum_on(momentum_step, shapes, each)


def _momentum_on(momentum_step: Callable, shapes: tuple, dtype: type) -> None:
    from course import nn

    params, grads, velocity = (_arrays(list(shapes), seed, dtype) for seed in (1, 2, 3))
    kept = [a.copy() for a in params + grads + velocity]
    out = momentum_step(params, grads, velocity, 0.1, 0.9)
    expect(isinstance(out, tuple) and len(out) == 2, "momentum_step should return (new_params, new_velocity)")
    new_params, new_velocity = out
    expect(
        all(np.array_equal(a, b) for a, b in zip(params + grads + velocity, kept)),
        "momentum_step changed its inputs in place: return new arrays",
    )
    expect(
        [np.shape(p) for p in new_params] == [np.shape(p) for p in params]
        and [np.shape(v) for v in new_velocity] == [np.shape(v) for v in velocity],
        "new_params and new_velocity should hold one array per parameter, each in its parameter's shape",
    )
    plain, fresh = momentum_step(params, grads, [np.zeros_like(v) for v in velocity], 0.1, 0.0)
    expect(
        all(np.allclose(a, b) for a, b in zip(plain, nn.sgd_update(params, grads, 0.1))),
        "with beta = 0 and no velocity yet, the step should be plain SGD (nn.sgd_update)",
    )
    expect(all(np.allclose(f, g) for f, g in zip(fresh, grads)), "from zero velocity, the new velocity is the gradient")
    expect(
        all(np.allclose(v1, 0.9 * v0 + g) for v1, v0, g in zip(new_velocity, velocity, grads)),
        "the new velocity should keep beta times the old one and add the gradient",
    )
    expect(
        all(np.allclose(p1, p0 - 0.1 * v1) for p1, p0, v1 in zip(new_params, params, new_velocity)),
        "the parameters should move against the new velocity, scaled by the learning rate",
    )
    expect(
        all(np.asarray(a).dtype == dtype for a in new_params + new_velocity),
        f"the results should keep the parameters' dtype ({np.dtype(dtype).name})",
    )
