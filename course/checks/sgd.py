"""Notebook 02's check of SGD with momentum: a learner's step run on made-up parameters, gradients and velocities,
its results compared with the update rule's own terms and with `course.nn.sgd_update` (momentum 0 is plain SGD).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from course import nn
from course.checks import check, expect


def _arrays(shapes: list[tuple[int, ...]], seed: int, dtype: type = np.float64) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


@check
def momentum(momentum_step: Callable, shapes: tuple = ((3, 4), (4,)), dtype: type = np.float64) -> None:
    """Exercise `ex-momentum`: `momentum_step(params, grads, velocity, learning_rate, beta)` returns new lists
    (params - learning_rate * v', v' = beta * v + grads), leaves its inputs alone, and is plain SGD at beta 0."""
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
