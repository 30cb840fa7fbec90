"""A small fully connected network in NumPy, written out so learners can see every step of training.

Parameters are a plain list of arrays `[W1, b1, W2, b2, ...]` (float64), so they can be sent to engines,
averaged and compared like any other arrays. Hidden layers use ReLU, the output layer softmax, the loss is
the mean cross-entropy over the batch. Notebook 02 builds SGD and parallel SGD on top of these functions.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from course import UserError

Params = list[np.ndarray]


def init(sizes: Sequence[int], seed: int = 0) -> Params:
    """Weights for layers of `sizes` (inputs first, classes last): He-normal W, zero b, reproducible by `seed`."""
    if len(sizes) < 2 or any(int(s) < 1 for s in sizes):
        raise UserError(f"sizes must list at least an input and an output size, all positive, not {list(sizes)}")
    rng = np.random.default_rng(seed)
    params: Params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append(rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in))
        params.append(np.zeros(fan_out))
    return params


def flatten(x: np.ndarray) -> np.ndarray:
    """Images (N, H, W, C) -> float64 rows (N, H*W*C), the input a dense network takes."""
    x = np.asarray(x)
    return x.reshape(len(x), -1).astype(np.float64)


def relu(z: np.ndarray) -> np.ndarray:
    """The activation max(0, z): a neuron passes its summed input on only when it is positive."""
    return np.maximum(z, 0.0)


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise probabilities from scores (shifted by the row maximum so exp never overflows)."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def forward(params: Params, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Class probabilities for the rows of `x`, and every layer's input (kept for the backward pass)."""
    _check(params)
    inputs = []
    a = flatten(x)
    layers = len(params) // 2
    for i in range(layers):
        inputs.append(a)
        z = a @ params[2 * i] + params[2 * i + 1]
        a = relu(z) if i < layers - 1 else softmax(z)
    return a, inputs


def cross_entropy(probs: np.ndarray, y: np.ndarray) -> float:
    """Mean negative log-probability of the true classes `y` (int labels)."""
    return float(-np.mean(np.log(probs[np.arange(len(y)), y] + 1e-12)))


def loss(params: Params, x: np.ndarray, y: np.ndarray) -> float:
    """The mean cross-entropy of the network on (x, y)."""
    return cross_entropy(forward(params, x)[0], np.asarray(y))


def accuracy(params: Params, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of rows whose most probable class is the label."""
    return float(np.mean(forward(params, x)[0].argmax(axis=1) == np.asarray(y)))


def gradients(params: Params, x: np.ndarray, y: np.ndarray) -> tuple[float, Params]:
    """Loss and its gradient with respect to every parameter (backpropagation, the chain rule layer by layer).

    The gradient is of the MEAN loss over the batch, so shards of different sizes must be averaged weighted
    by their sizes to give the whole batch's gradient (see `average`).
    """
    y = np.asarray(y)
    if len(y) == 0:
        raise UserError("gradients need at least one sample")
    probs, inputs = forward(params, x)
    n = len(y)
    delta = probs.copy()
    delta[np.arange(n), y] -= 1.0  # d loss / d scores of the softmax layer, per sample
    delta /= n  # ... of the mean over the batch
    grads: Params = [np.empty(0)] * len(params)
    for i in reversed(range(len(params) // 2)):
        grads[2 * i] = inputs[i].T @ delta
        grads[2 * i + 1] = delta.sum(axis=0)
        if i > 0:
            delta = (delta @ params[2 * i].T) * (inputs[i] > 0)  # back through W, then through ReLU
    return cross_entropy(probs, y), grads


def sgd_update(params: Params, grads: Params, learning_rate: float) -> Params:
    """One gradient-descent step: new parameters = parameters - learning_rate * gradient (new arrays)."""
    if len(params) != len(grads):
        raise UserError(f"{len(grads)} gradients for {len(params)} parameters")
    return [p - learning_rate * g for p, g in zip(params, grads)]


def average(shard_grads: Sequence[Params], counts: Sequence[int] | None = None) -> Params:
    """Average the gradients computed on several shards; weighted by `counts` (samples per shard) if given.

    With counts this equals the gradient of the whole batch even when the shards are unequal.
    """
    if not shard_grads:
        raise UserError("average needs the gradients of at least one shard")
    weights = np.ones(len(shard_grads)) if counts is None else np.asarray(counts, dtype=np.float64)
    if len(weights) != len(shard_grads) or weights.sum() <= 0:
        raise UserError(f"counts must give one positive size per shard, got {list(weights)}")
    weights = weights / weights.sum()
    return [sum(w * g[j] for w, g in zip(weights, shard_grads)) for j in range(len(shard_grads[0]))]


def numerical_gradient(params: Params, x: np.ndarray, y: np.ndarray, eps: float = 1e-6) -> Params:
    """Central finite differences of `loss` for every parameter: slow, but independent of backpropagation."""
    grads = []
    for p in params:
        g = np.zeros_like(p)
        for index in np.ndindex(p.shape):
            saved = p[index]
            p[index] = saved + eps
            up = loss(params, x, y)
            p[index] = saved - eps
            down = loss(params, x, y)
            p[index] = saved
            g[index] = (up - down) / (2 * eps)
        grads.append(g)
    return grads


def batches(n: int, batch_size: int, rng: np.random.Generator):
    """Endless index arrays of `batch_size` samples from range(n): shuffled each epoch, the last one dropped."""
    if not 1 <= batch_size <= n:
        raise UserError(f"batch size must be between 1 and the {n} samples, not {batch_size}")
    while True:
        order = rng.permutation(n)
        for start in range(0, n - batch_size + 1, batch_size):
            yield order[start : start + batch_size]


def linear_scaled_lr(base_lr: float, base_batch: int, batch: int) -> float:
    """Goyal et al.'s linear scaling rule: when the batch grows k times, so does the learning rate."""
    return base_lr * batch / base_batch


def warmup_lr(step: int, target_lr: float, warmup_steps: int, start_lr: float | None = None) -> float:
    """Learning rate at `step` with a linear warm-up from `start_lr` (default target/10) to `target_lr`."""
    start = target_lr / 10 if start_lr is None else start_lr
    if warmup_steps <= 0 or step >= warmup_steps:
        return target_lr
    return start + (target_lr - start) * step / warmup_steps


def steps_to_target(
    params: Params,
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    learning_rate: float,
    target: float,
    max_steps: int,
    eval_every: int = 5,
    seed: int = 0,
    x_eval: np.ndarray | None = None,
    y_eval: np.ndarray | None = None,
) -> int | None:
    """SGD steps until the loss on (x_eval, y_eval) (default: x, y) falls to `target`.

    None if it does not within `max_steps`, or if training diverges (the loss doubles or stops being finite).
    """
    x = flatten(x)
    x_eval, y_eval = (x, y) if x_eval is None else (flatten(x_eval), y_eval)
    start = loss(params, x_eval, y_eval)
    rng = np.random.default_rng(seed)
    stream = batches(len(x), batch_size, rng)
    for step in range(1, max_steps + 1):
        index = next(stream)
        _, grads = gradients(params, x[index], y[index])
        params = sgd_update(params, grads, learning_rate)
        if step % eval_every == 0:
            current = loss(params, x_eval, y_eval)
            if not np.isfinite(current) or current > 2 * start:
                return None
            if current <= target:
                return step
    return None


def _check(params: Params) -> None:
    if len(params) < 2 or len(params) % 2:
        raise UserError(f"params must be [W1, b1, W2, b2, ...]; got {len(params)} arrays")
