"""Notebook 07's checks, both parts: the Horovod exercises a learner writes on part one's MPI engines (`%%px`
cells) and what part two reads from its `horovodrun` runs: each engine's values are read on the engine itself (its
`me`, `lr`, `steps`, `callbacks`, `test_accuracy`) and compared with what the notebook's constants make right, `me`
with what Horovod itself says there, and the callbacks by what they do in a short fit (course.checks.horovod_trial); the
model files each rank saved come from the engines (course.checks.saves), not from the folder the ranks share. The
script exercise has its own module (course.checks.horovod_script), its quiz the key below (course.checks.quiz).

    horovod.me_on_every_rank(cluster.view)                                # None, or what is wrong
    horovod.learning_rate_and_steps(cluster.view, BASE_LR, BATCH)
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from course.checks import check, deadline, expect, horovod_trial
from course.checks.horovod_trial import WRITERS  # the callbacks that write files: rank 0's alone


def on_engine(expression: str) -> Any:
    """An argument for `view.apply_sync` that each engine evaluates in its own namespace (what its %%px cells
    defined), e.g. on_engine("callbacks"), on_engine("globals().get('me')")."""
    from ipyparallel import Reference

    return Reference(expression)


def _value(value: object) -> object:
    return value


def engine_values(view: Any, name: str) -> list:
    """Each engine's value of `name` (None on an engine that has none), in engine order."""
    return deadline.apply(view, _value, on_engine(f"globals().get({name!r})"))


def me_kinds(me: object) -> dict[str, str]:
    """On an engine: the type name of each value of its `me` ({} when `me` is no dict). Read there: a value that is
    a function cannot be sent back to the notebook."""
    return {k: type(v).__name__ for k, v in me.items()} if isinstance(me, dict) else {}


def horovod_identity() -> dict[str, int] | None:
    """On an engine: Horovod's own rank, local rank and size there, or None where Horovod was not initialised."""
    import horovod.tensorflow.keras as hvd

    if not hvd.is_initialized():
        return None
    return {"rank": hvd.rank(), "local_rank": hvd.local_rank(), "size": hvd.size()}


@check
def me_on_every_rank(view: Any) -> None:
    """Exercise 1: every engine's `me` holds its Horovod rank, local rank and size, as numbers; the ranks are
    0 .. size-1, one per engine, and the size is the number of engines. Measured from outside `me`: the check asks
    Horovod on every engine whether it was initialised, and its rank, local rank and size there."""
    kinds = deadline.apply(view, me_kinds, on_engine("globals().get('me')"))
    odd = sorted({f"me[{k!r}] is a {t}" for found in kinds for k, t in found.items() if t != "int"})
    expect(not odd, f"me should hold numbers: {', '.join(odd)} (call hvd.rank(), hvd.local_rank() and hvd.size())")
    everyone, n = engine_values(view, "me"), len(view)
    expect(
        all(isinstance(m, dict) and {"rank", "local_rank", "size"} <= set(m) for m in everyone),
        "every engine should define me = {'rank': ..., 'local_rank': ..., 'size': ...}",
    )
    actual = deadline.apply(view, horovod_identity)
    idle = [engine for engine, own in zip(view.targets, actual) if own is None]
    expect(not idle, f"Horovod is not initialised on engine(s) {idle}: call hvd.init() in the %%px cell")
    expect(
        all(own["size"] == n for own in actual),
        f"Horovod sees {actual[0]['size']} process(es), not the {n} engines: did every engine call hvd.init()?",
    )
    for engine, m, own in zip(view.targets, everyone, actual):
        wrong = [f"{k} {m[k]!r} (Horovod says {own[k]})" for k in ("rank", "local_rank", "size") if m[k] != own[k]]
        expect(
            not wrong,
            f"engine {engine}'s me has {', '.join(wrong)}: take each value from Horovod (hvd.rank(), "
            "hvd.local_rank(), hvd.size())",
        )
    expect(sorted(m["rank"] for m in everyone) == list(range(n)), "the ranks should be 0 .. size-1, one per engine")


@check
def learning_rate_and_steps(view: Any, base_lr: float, batch: int) -> None:
    """Exercise 2: every engine's `lr` is base_lr x size (Goyal et al.'s linear rule, not the square root), and
    its `steps` a whole number, the same on every rank, such that the ranks together see each training image once
    per epoch in whole batches."""
    n = len(view)
    lrs, all_steps = view["lr"], view["steps"]
    n_train = view["len(x_train)"][0]
    expect(
        n == 1 or not all(abs(v - base_lr * n**0.5) < 1e-12 for v in lrs),
        "that is square-root scaling (BASE_LR x sqrt(size)); Goyal et al.'s rule scales the rate with the batch: "
        "BASE_LR x size",
    )
    expect(
        all(abs(v - base_lr * n) < 1e-12 for v in lrs),
        "the learning rate should grow with the number of processes: BASE_LR x size",
    )
    expect(
        all(isinstance(s, numbers.Integral) for s in all_steps),
        f"steps is {all_steps[0]!r}, a {type(all_steps[0]).__name__}: Keras takes a whole number of steps (an int; "
        "round down)",
    )
    expect(
        len(set(all_steps)) == 1, "every rank must take the same number of steps (else the all-reduce waits forever)"
    )
    seen = all_steps[0] * batch * n  # images the ranks see together in one epoch
    expect(
        seen <= n_train,
        f"{all_steps[0]} steps x {batch} images x {n} ranks = {seen} images per epoch, more than the {n_train} "
        "training images: each rank must take fewer steps",
    )
    expect(
        seen + batch * n > n_train,
        f"{all_steps[0]} steps x {batch} images x {n} ranks = {seen} images per epoch, but {n_train} training "
        "images: one epoch is one pass over all of them (whole batches, round down)",
    )


def callback_facts(callbacks: Sequence) -> dict[str, Any]:
    """On an engine: its callbacks' class names in order, the first warm-up callback's initial_lr and length in
    epochs (None without one), the first callback's root_rank, and where each file-writing callback writes (an
    absolute path, as that engine resolves it)."""
    warm = next((c for c in callbacks if type(c).__name__ == "LearningRateWarmupCallback"), None)
    return {
        "names": [type(c).__name__ for c in callbacks],
        "initial_lr": float(warm.initial_lr) if warm is not None else None,
        "warmup_epochs": int(warm.end_epoch) - int(warm.start_epoch) if warm is not None else None,
        "root": getattr(callbacks[0], "root_rank", None) if callbacks else None,
        "writes": {
            type(c).__name__: os.path.abspath(str(getattr(c, "log_dir", getattr(c, "filepath", ""))))
            for c in callbacks
            if type(c).__name__ in WRITERS
        },
    }


TRIAL_TIMEOUT = 300.0  # seconds the callbacks' trial fit may take on the engines


def _what_the_callbacks_did(view: Any, base_lr: float, warmup: int, warmup_given: Any) -> None:
    """The callbacks run on every rank (course.checks.horovod_trial): whose weights the ranks hold after the first
    step, the losses they report, and the learning rate of every step of the warm-up and after it."""
    n = len(view)
    steps = [s if isinstance(s, int) and s > 0 else 3 for s in engine_values(view, "steps")][0]
    seen = deadline.apply(
        view, horovod_trial.run, on_engine("callbacks"), base_lr * n, warmup + 1, steps, seconds=TRIAL_TIMEOUT
    )
    owner = next((r for r, s in enumerate(seen) if s["before"] == seen[0]["after"]), None)
    expect(
        len({s["after"] for s in seen}) == 1,
        "after the first step the ranks hold different weights: the broadcast callback should send one rank's "
        "weights to all",
    )
    expect(
        owner == 0,
        f"after the broadcast every rank holds rank {owner}'s weights: every rank should start from rank 0's",
    )
    losses = [s["losses"] for s in seen]
    expect(
        all(max(epoch) - min(epoch) < 1e-6 for epoch in zip(*losses)),
        "the ranks report different losses after the callbacks ran: the metric-average callback should average "
        "them over the ranks",
    )
    scaled, rates = base_lr * n, seen[0]["rates"]
    end = rates[warmup * steps - 1]  # the last step of the warm-up
    expect(
        abs(end - base_lr) > 1e-6 * base_lr or n == 1,
        f"the warm-up ends at {end:.4g} = BASE_LR, not at the scaled rate lr = {scaled}: Horovod ramps from "
        "initial_lr / size up to initial_lr",
    )
    expect(
        all(abs(r - scaled) < 1e-6 * scaled for r in rates[warmup * steps - 1 :]),
        f"at the end of WARMUP = {warmup} epoch(s) the rate is {end:.4g}, then {rates[-1]:.4g}, not the scaled "
        f"rate lr = {scaled} (the warm-up lasts {warmup_given} epoch(s) as given; Horovod reads the "
        f"steps per epoch from fit, {steps} here, unless given others)",
    )
    first = base_lr * (1 + (n - 1) / (steps * warmup))  # one step into a linear ramp from base_lr
    expect(
        base_lr * (1 - 1e-6) <= rates[0] <= first * (1 + 1e-6),
        f"training starts at the rate {rates[0]:.4g}, not at one process's BASE_LR = {base_lr}",
    )
    expect(all(a <= b * (1 + 1e-6) for a, b in zip(rates, rates[1:])), "the rate should only grow during the warm-up")
    _what_rank0_wrote(seen[0], steps)


def _what_rank0_wrote(seen: dict, steps: int) -> None:
    """Rank 0's writers, used as the next step uses them: its last checkpoint resumes with the optimizer's state (as
    the notebook resumes, hvd.load_model), and TensorBoard logged the loss averaged over the ranks."""
    resumed, logged = seen.get("resumed"), seen.get("logged")
    if resumed is not None:
        expect(
            resumed["error"] is None,
            f"rank 0's last checkpoint (epoch {resumed['epoch']}) cannot be resumed from as the notebook resumes "
            f"(hvd.load_model): {resumed['error']}. A checkpoint to resume from holds the whole model with its "
            "optimizer, not the weights alone",
        )
        expect(
            resumed["iterations"] == resumed["epoch"] * steps,
            f"resuming from rank 0's checkpoint of epoch {resumed['epoch']} gives an optimizer at step "
            f"{resumed['iterations']}, not {resumed['epoch'] * steps}: the checkpoint should carry the optimizer's state",
        )
    if logged is not None:
        averaged = seen["losses"]
        expect(
            len(logged) == len(averaged)
            and all(abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in zip(logged, averaged)),
            f"rank 0's TensorBoard logged the losses {[round(v, 4) for v in logged]}, not the ones averaged over the "
            f"ranks {[round(v, 4) for v in averaged]}: a callback that reads the metrics sees them averaged only if "
            "it comes after the metric-average callback",
        )


@check
def callback_lists(view: Any, base_lr: float, out: str | os.PathLike, warmup: int) -> None:
    """Exercise 3: every rank's `callbacks` start with the broadcast, average the metrics and warm up; rank 0
    alone writes checkpoints and TensorBoard logs, under `out`. What the callbacks do is measured by running them
    on every rank (course.checks.horovod_trial): after the first step every rank holds rank 0's weights, the
    epochs' loss is the same on every rank, and the rate starts at `base_lr` and reaches base_lr x size at the end
    of `warmup` epochs (with the engines' `steps` per epoch, as the notebook's fit takes them) and stays there;
    rank 0's last checkpoint resumes with the optimizer's state and its TensorBoard logs the averaged loss."""
    facts = deadline.apply(view, callback_facts, on_engine("callbacks"))
    names = [f["names"] for f in facts]
    expect(
        all(found[:1] == ["BroadcastGlobalVariablesCallback"] for found in names),
        "the broadcast callback should come first on every rank",
    )
    expect(
        all("MetricAverageCallback" in found and "LearningRateWarmupCallback" in found for found in names),
        "every rank needs the metric-average and warm-up callbacks",
    )
    expect(set(WRITERS) <= set(names[0]), "rank 0 should write checkpoints and TensorBoard logs")
    expect(all(not set(WRITERS) & set(found) for found in names[1:]), "only rank 0 may write checkpoints and logs")
    roots = [f["root"] for f in facts]
    expect(len(set(roots)) == 1, f"the ranks broadcast from different roots {roots}: every rank should name rank 0")

    _what_the_callbacks_did(view, base_lr, warmup, facts[0]["warmup_epochs"])
    where = facts[0]["writes"]
    expect(
        where["TensorBoard"] == os.path.abspath(f"{out}/logs"),
        f"rank 0's TensorBoard writes to {where['TensorBoard']}, not to OUT + '/logs'",
    )
    expect(
        where["ModelCheckpoint"] == os.path.abspath(f"{out}/checkpoints/checkpoint-{{epoch:03d}}.h5"),
        f"rank 0's checkpoints go to {where['ModelCheckpoint']}, not to OUT + '/checkpoints/checkpoint-{{epoch:03d}}.h5'",
    )


def rank_saves() -> tuple[int, list[str]]:
    """On an engine: (its Horovod rank, the model files it saved since it was last asked), forgetting them."""
    import horovod.tensorflow.keras as hvd

    from course.checks import saves

    return hvd.rank(), saves.saved(forget=True)


def saves_by_rank(view: Any) -> dict[int, list[str]]:
    """rank -> the model files it saved since this was last called (each engine then forgets them: a learner who
    runs the exercise again is judged by the new run's saves). The engines must have called saves.watch()."""
    return dict(deadline.apply(view, rank_saves))


@check
def evaluated_and_saved(view: Any, out: str | os.PathLike, saved: Mapping[int, list[str]]) -> None:
    """Exercise 4: every rank holds the same test accuracy, a float in [0, 1]; OUT/model.h5 exists, no rank but 0
    saved it (`saved`: saves_by_rank, read before this check; the ranks share one folder, so the file alone cannot
    tell), and loaded as the next job loads it, it is the trained model and scores that accuracy."""
    accuracies = engine_values(view, "test_accuracy")
    expect(
        all(isinstance(a, float) and 0 <= a <= 1 for a in accuracies),
        "test_accuracy should be a float between 0 and 1 on every rank",
    )
    expect(
        max(accuracies) - min(accuracies) < 1e-6,
        "all ranks hold the same model, so they should agree on the test accuracy",
    )
    model = Path(out) / "model.h5"
    expect(model.is_file(), "rank 0 should save the model to OUT + '/model.h5'")
    others = [r for r, paths in sorted(saved.items()) if r != 0 and str(model.resolve()) in paths]
    expect(
        not others,
        f"rank(s) {others} saved model.h5 too: the engines share one folder, so the file looks right, but only "
        "rank 0 should save (the ranks hold the same model, and several writers of one file can corrupt it)",
    )
    used = deadline.apply(view, saved_model_used, str(model.resolve()), *map(on_engine, ("model", "x_test", "y_test")))
    used = next(u for u in used if u is not None)
    expect(
        used["error"] is None,
        f"OUT + '/model.h5' does not load as a model (tf.keras.models.load_model: {used['error']}): the next job "
        "needs the whole model (model.save), not its weights alone",
    )
    expect(
        used["same"] and abs(used["accuracy"] - accuracies[0]) < 1e-6,
        f"OUT + '/model.h5', loaded and evaluated, scores {used['accuracy']:.4f} on the test set, not the trained "
        f"model's {accuracies[0]:.4f}: save the model you evaluated",
    )


def saved_model_used(path: str, model: Any, x: Any, y: Any) -> dict | None:
    """On an engine: on Horovod's rank 0, PATH loaded as the next job loads it and evaluated on (x, y): its load
    error, whether it gives `model`'s outputs, its accuracy; None on the other ranks."""
    import horovod.tensorflow.keras as hvd
    import numpy as np
    import tensorflow as tf

    if hvd.rank() != 0:
        return None
    try:
        loaded = tf.keras.models.load_model(path, compile=False)
    except Exception as exc:  # noqa: BLE001 - any failure to load is the answer's, and said
        return {"error": type(exc).__name__, "same": False, "accuracy": float("nan")}
    probe = np.asarray(x[:16])
    same = bool(np.allclose(loaded(probe, training=False), model(probe, training=False), rtol=1e-5, atol=1e-6))
    accuracy = float(np.mean(np.argmax(loaded.predict(x, verbose=0), axis=1) == np.ravel(y)))
    return {"error": None, "same": same, "accuracy": accuracy}


@check
def efficiency_per_ranks(efficiency: object, runs: Mapping[int, Mapping], ranks: Sequence[int]) -> None:
    """Part two, exercise 2: `efficiency` maps each rank count to (epoch time on 1 / epoch time on n) / n from the
    runs' steady epoch times (or the same from their throughputs); each plausible slip is named."""
    expect(
        isinstance(efficiency, dict) and sorted(efficiency) == sorted(ranks),
        "efficiency should have one entry per rank count in RANKS",
    )
    expect(abs(efficiency[1] - 1.0) < 1e-9, "one rank compared with itself has efficiency 1")
    n = max(ranks)
    t1, tn = runs[1]["epoch_time"], runs[n]["epoch_time"]
    got = efficiency[n]
    expect(
        abs(got - t1 / tn) > 1e-9 or n == 1,
        f"efficiency[{n}] = {got:.3f} is the speedup {t1:.2f} s / {tn:.2f} s itself: share it among the {n} ranks",
    )
    expect(
        abs(got - tn / t1 / n) > 1e-9 or abs(t1 - tn) < 1e-12,
        f"efficiency[{n}] = {got:.3f} divides the epoch times the wrong way round ({tn:.2f} s / {t1:.2f} s)",
    )
    mean1, meann = (sum(runs[k]["epoch_times"]) / len(runs[k]["epoch_times"]) for k in (1, n))
    expect(
        abs(got - mean1 / meann / n) > 1e-9 or abs(mean1 / meann - t1 / tn) < 1e-9,
        f"efficiency[{n}] = {got:.3f} comes from every epoch's time, the first one (which also builds the model) "
        "included: use runs[n]['epoch_time'], the steady epoch time",
    )
    by_throughput = runs[n]["images_per_second"] / runs[1]["images_per_second"] / n
    expect(
        min(abs(got - t1 / tn / n), abs(got - by_throughput)) < 1e-9,
        f"efficiency[{n}] = {got:.3f}, but epochs of {t1:.2f} s on 1 rank and {tn:.2f} s on {n} give another value",
    )


@check
def collective_share_and_wait(share: float, most_waiting: object, breakdown: Any) -> None:
    """Part two, exercise 3: `share` is the fraction of the timeline's span with some collective open (1 - compute
    / span, negotiation included), and `most_waiting` the rank with the longest negotiation wait."""
    span, compute = breakdown.span, breakdown.compute
    expect(0 <= share <= 1, f"collective_share = {share}: a share is between 0 and 1")
    opened, none = 1 - compute / span, compute / span
    expect(
        abs(share - none) > 1e-9 or abs(opened - none) < 1e-9,
        f"collective_share = {share:.3f} is the share with NO collective open ({compute:.2f} s of {span:.2f} s): "
        "take the rest of the span",
    )
    reducing = breakdown.allreduce / span
    expect(
        abs(share - reducing) > 1e-9 or abs(opened - reducing) < 1e-9,
        f"collective_share = {share:.3f} counts only the all-reduce: a tensor negotiating is a collective open too "
        "(the ranks wait for each other)",
    )
    expect(
        abs(share - opened) < 1e-9,
        f"collective_share = {share:.3f}, but {compute:.2f} s of the {span:.2f} s span have no collective open",
    )
    expect(most_waiting in breakdown.ranks, "most_waiting should be one of the ranks in the timeline")
    waited = breakdown.ranks[most_waiting]["negotiation"]
    expect(
        waited == max(v["negotiation"] for v in breakdown.ranks.values()),
        f"rank {most_waiting} waited {waited:.2f} s in negotiation; another waited longer",
    )


# Made-up runs: the first epoch is slow (start-up), accuracy is noisy, as in real runs.
SLOW_START = {"val_accuracy": [0.5, 0.72, 0.69, 0.9], "epoch_time": 2.0, "epoch_times": [9.0, 2.0, 2.1, 1.9]}
MANY_FAST_EPOCHS = {"val_accuracy": [0.3, 0.5, 0.65, 0.75], "epoch_time": 0.5}  # epoch 4 at 0.5 s: 2.0 s
FEW_SLOW_EPOCHS = {"val_accuracy": [0.5, 0.8], "epoch_time": 1.5}  # epoch 2 at 1.5 s: 3.0 s
NEVER = {"val_accuracy": [0.1, 0.2], "epoch_time": 0.1}


@check
def time_to_accuracy_functions(
    time_to_accuracy: Callable, fastest: Callable, first: object, candidates: Mapping[str, Mapping]
) -> None:
    """Part two, exercise 4: time_to_accuracy(run, target) counts the epochs up to the first that reaches the
    target at the steady epoch time (None if none does); fastest(runs, target) names the run that needs the fewest
    seconds (None if none reaches it). Tried on made-up runs; `first` (FASTEST) must be a name of `candidates` or
    None."""
    got = time_to_accuracy(SLOW_START, 0.7)
    expect(got is not None, "a run whose accuracy reaches the target in some epoch has a time, not None")
    expect(
        abs(got - 11.0) > 1e-9,
        "your time includes the first epoch's start-up: count every epoch at the steady epoch time run['epoch_time']",
    )
    expect(
        abs(got - 8.0) > 1e-9,
        "you counted up to the best (or last) epoch; stop at the first epoch that reaches the target",
    )
    expect(
        abs(got - 4.0) < 1e-9,
        f"a run that first reaches 0.7 in epoch 2 at 2.0 s per epoch needs 2 x 2.0 s; you returned {got}",
    )
    expect(
        time_to_accuracy({"val_accuracy": [0.7], "epoch_time": 3.0}, 0.7) is not None,
        "an accuracy equal to the target reaches it (at least the target)",
    )
    expect(time_to_accuracy(SLOW_START, 0.95) is None, "a run that never reaches the target should give None")
    winner = fastest({"few slow": FEW_SLOW_EPOCHS, "many fast": MANY_FAST_EPOCHS, "never": NEVER}, 0.7)
    expect(winner != "few slow", "the run with the fewest epochs is not the first in time: compare the seconds")
    expect(winner != "never", "a run that never reaches the target cannot be the fastest")
    expect(
        winner == "many fast", f"fastest() returned {winner!r} for made-up runs; it should return the name of the run"
    )
    expect(fastest({"never": NEVER}, 0.7) is None, "when no run reaches the target, fastest() should return None")
    expect(first is None or first in candidates, "FASTEST should be a name from candidates (or None)")


# Part two, exercise 5, the Intel talk's Horovod questions: course.checks.quiz digests of the right letters (never
# the letters).
QUIZ_KEY = {
    1: "a5bbc0abfbf3c3499f5284151967559658adf1c9d4b9d52ccf258c152caffce3",
    2: "2dee100e6e2c39c1847e24569472cacc840f6f7a37664275b454a7863c6671b7",
    3: "cc0a52d792e455071b90856c142355d13d849b47c57e69e8ac9b883bc94df668",
    4: "43536415dffa79bf2fcd4505686755bbdc98f0ffc00b277f469ae89683b7c6be",
    5: "0b29c916622ad1d41c4fafca31a1d5a89a0a538c0fd34fcb666bda115347d982",
    6: "4a3b72df50e8423d03ca55f57638ae5e2448519cb72736fd28cc8e94536d7cf7",
}
QUIZ_WHY = {  # shown for a question once its answer is right
    1: "hvd.init() connects the processes (over MPI or Gloo): rank, size and every collective need it.",
    2: "Goyal et al. (section 2.1): one step at size x the rate on a size-times-larger batch stands in for the "
    "size small steps it replaces, so the epochs to converge stay about the same.",
    3: "Callbacks change the optimizer's rate while fit runs: a warm-up first, then a schedule.",
    4: "Rank 0 exists once in the whole job; local rank 0 exists once per node.",
    5: "Every step consumes one batch per rank, so one pass over the same data takes size times fewer steps.",
    6: "Computed from hvd.size() and the dataset when the job starts, the same script runs on any number of ranks.",
}
