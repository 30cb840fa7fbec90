"""Sharded training for notebook 09: cutting a flat parameter vector into one contiguous part per rank, a small
network whose parameters are one flat vector, and Adam written element by element, so that it updates a shard
exactly as it updates the whole vector. The ZeRO steps and the tensor-parallel block are the learner's to write;
this module holds only what they are built on.

    >>> shard_counts(10, 3)                      # as np.array_split cuts: the first parts one longer
    [4, 3, 3]
    >>> shard_bounds(10, 3, 1)                   # rank 1 of 3 holds values 4, 5, 6
    (4, 7)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from course import UserError


def shard_counts(n: int, parts: int) -> list[int]:
    """The length of each of `parts` contiguous shards of `n` values (np.array_split's cut; MPI's recvcounts)."""
    if parts < 1 or n < 0:
        raise UserError(f"cannot cut {n} values into {parts} shards")
    size, extra = divmod(n, parts)
    return [size + (1 if i < extra else 0) for i in range(parts)]


def shard_bounds(n: int, parts: int, index: int) -> tuple[int, int]:
    """(start, stop) of shard `index` of `parts` of `n` values: `flat[start:stop]` is that rank's part."""
    counts = shard_counts(n, parts)
    if not 0 <= index < parts:
        raise UserError(f"shard {index} does not exist: there are {parts} (0 to {parts - 1})")
    start = sum(counts[:index])
    return start, start + counts[index]


def nbytes(held: object) -> int:
    """Bytes of every NumPy array in `held` (an array, or dicts, lists and tuples of them); numbers count 0."""
    if isinstance(held, np.ndarray):
        return int(held.nbytes)
    if isinstance(held, dict):
        return sum(nbytes(v) for v in held.values())
    if isinstance(held, (list, tuple)):
        return sum(nbytes(v) for v in held)
    return 0


# --- a small network over one flat parameter vector ----------------------------------------------------------


def mlp_size(sizes: Sequence[int]) -> int:
    """Number of parameters (weights and biases) of a fully connected network with layer widths `sizes`."""
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def mlp_init(sizes: Sequence[int], seed: int = 0) -> np.ndarray:
    """The parameters of a network of widths `sizes` as one float64 vector: each layer's W (row-major), then b."""
    if len(sizes) < 2 or any(int(s) < 1 for s in sizes):
        raise UserError(f"sizes must list at least an input and an output width, all positive, not {list(sizes)}")
    rng = np.random.default_rng(seed)
    parts = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        parts += [rng.standard_normal(fan_in * fan_out) / np.sqrt(fan_in), np.zeros(fan_out)]
    return np.concatenate(parts)


def _layers(params: np.ndarray, sizes: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(W, b) views into the flat vector, layer by layer."""
    if len(params) != mlp_size(sizes):
        raise UserError(f"{len(params)} parameters given; a network of widths {list(sizes)} has {mlp_size(sizes)}")
    layers, offset = [], 0
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w = params[offset : offset + fan_in * fan_out].reshape(fan_in, fan_out)
        offset += fan_in * fan_out
        layers.append((w, params[offset : offset + fan_out]))
        offset += fan_out
    return layers


def mlp_loss_and_gradient(params: np.ndarray, sizes: Sequence[int], x: np.ndarray, y: np.ndarray):
    """(loss, gradient) of the mean squared error (halved) of a tanh network with a linear output, on (x, y);
    the gradient is a flat vector laid out as `params`."""
    layers = _layers(params, sizes)
    inputs, a = [], x
    for i, (w, b) in enumerate(layers):
        inputs.append(a)
        a = a @ w + b
        if i < len(layers) - 1:
            a = np.tanh(a)
    error = a - y
    loss = 0.5 * float(np.mean(np.sum(error**2, axis=1)))
    delta = error / len(x)
    grads: list[np.ndarray] = []
    for i in range(len(layers) - 1, -1, -1):
        w, _ = layers[i]
        grads = [(inputs[i].T @ delta).ravel(), delta.sum(axis=0)] + grads
        if i > 0:
            delta = (delta @ w.T) * (1 - inputs[i] ** 2)  # inputs[i] = tanh of the layer below
    return loss, np.concatenate(grads)


def regression_batches(sizes: Sequence[int], batch: int, steps: int, seed: int = 0) -> list:
    """`steps` batches (x, y) of `batch` rows: inputs from a normal distribution, targets from a fixed random
    network of the same widths (a problem the network can learn)."""
    rng = np.random.default_rng(seed)
    teacher = mlp_init(sizes, seed + 1000) + 0.1
    out = []
    for _ in range(steps):
        x = rng.standard_normal((batch, sizes[0]))
        a = x
        for i, (w, b) in enumerate(_layers(teacher, sizes)):
            a = a @ w + b if i == len(sizes) - 2 else np.tanh(a @ w + b)
        out.append((x, a))
    return out


def adam(
    param: np.ndarray,
    grad: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    step: int,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
) -> None:
    """One Adam update (Kingma and Ba) of `param` in place, with its moments `m` and `v` (also in place); `step`
    counts from 1. Every operation is element by element: on a shard it gives that shard of the whole update."""
    m *= beta1
    m += (1 - beta1) * grad
    v *= beta2
    v += (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1**step)
    v_hat = v / (1 - beta2**step)
    param -= lr * m_hat / (np.sqrt(v_hat) + eps)
