"""Run in a fresh process (2 logical CPU devices): course.checks.mirrored_loop's checks on a right build and step and on
plausible wrong ones (the right loop passes in notebook 08's own execution test); prints one line `RESULT {json}` mapping each case to "pass" or the check's message."""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from course import training

training.replica_devices(2)  # before TensorFlow starts
import tensorflow as tf  # noqa: E402

from course.checks import mirrored_loop  # noqa: E402

tf.get_logger().setLevel("ERROR")


def build(strategy, make_model, learning_rate, optimizer_in_scope=True, model_in_scope=True):
    model = optimizer = None
    with strategy.scope():
        if model_in_scope:
            model = make_model()
        if optimizer_in_scope:
            optimizer = tf.keras.optimizers.SGD(learning_rate)
    return model or make_model(), optimizer or tf.keras.optimizers.SGD(learning_rate)


def build_in_a_new_strategy(strategy, make_model, learning_rate):
    with tf.distribute.MirroredStrategy(strategy.extended.worker_devices).scope():  # the same devices, another strategy
        return make_model(), tf.keras.optimizers.SGD(learning_rate)


def make_step(per_replica_mean=False, forward_outside_tape=False):
    def replica_step(model, optimizer, images, labels, global_batch):
        if forward_outside_tape:
            probabilities = model(images, training=True)
        with tf.GradientTape() as tape:
            if not forward_outside_tape:
                probabilities = model(images, training=True)
            per_image = tf.keras.losses.sparse_categorical_crossentropy(labels, probabilities)
            loss = (
                tf.reduce_mean(per_image)
                if per_replica_mean
                else tf.nn.compute_average_loss(per_image, global_batch_size=global_batch)
            )
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(probabilities, axis=1), labels), tf.float32))
        return loss, correct

    return replica_step


def make_train(step, reduce="sum", distribute=True, gather=False):
    def train(strategy, model, optimizer, dataset, global_batch, epochs):
        batches = dataset.batch(global_batch, drop_remainder=True)
        if distribute:
            batches = strategy.experimental_distribute_dataset(batches)

        @tf.function
        def distributed_step(images, labels):
            if gather:  # the replicas' parts gathered and the step run once, on the whole global batch
                return step(model, optimizer, strategy.gather(images, 0), strategy.gather(labels, 0), global_batch)
            loss, correct = strategy.run(step, args=(model, optimizer, images, labels, global_batch))
            if reduce == "none":
                return strategy.experimental_local_results(loss)[0], strategy.experimental_local_results(correct)[0]
            op = tf.distribute.ReduceOp.SUM if reduce == "sum" else tf.distribute.ReduceOp.MEAN
            return strategy.reduce(op, loss, axis=None), strategy.reduce(op, correct, axis=None)

        history = []
        for _ in range(epochs):
            total_loss = total_correct = steps = 0
            for images, labels in batches:
                loss, correct = distributed_step(images, labels)
                total_loss, total_correct, steps = total_loss + float(loss), total_correct + float(correct), steps + 1
            history.append({"loss": total_loss / steps, "accuracy": total_correct / (steps * global_batch)})
        return history

    return train


def outcome(check):
    try:
        value = check()
    except AssertionError as exc:
        return str(exc)
    return ["pass", value]


right, mean_step = make_step(), make_step(per_replica_mean=True)
cases = {
    "build right": lambda: mirrored_loop.check_build(build)["kind"],
    "step right": lambda: mirrored_loop.check_step(right)["loss"],
    "model outside scope": lambda: mirrored_loop.check_build(lambda s, m, lr: build(s, m, lr, model_in_scope=False)),
    "optimizer outside scope": lambda: mirrored_loop.check_build(
        lambda s, m, lr: build(s, m, lr, optimizer_in_scope=False)
    ),
    "step per-replica mean": lambda: mirrored_loop.check_step(mean_step),
    "loop per-replica mean": lambda: mirrored_loop.check_same_as_one_device(
        mirrored_loop.compare_replicas(build, make_train(mean_step))
    ),
    "loop no reduce": lambda: mirrored_loop.check_same_as_one_device(
        mirrored_loop.compare_replicas(build, make_train(right, reduce="none"))
    ),
    "build in a new strategy": lambda: mirrored_loop.check_build(build_in_a_new_strategy),
    "step forward outside tape": lambda: mirrored_loop.check_step(make_step(forward_outside_tape=True)),
    "loop undistributed dataset": lambda: mirrored_loop.check_same_as_one_device(
        mirrored_loop.compare_replicas(build, make_train(right, distribute=False))
    ),
}
cases["loop gathered, no strategy.run"] = lambda: mirrored_loop.check_same_as_one_device(
    mirrored_loop.compare_replicas(build, make_train(right, gather=True))
)
cases["loop right"] = lambda: mirrored_loop.check_same_as_one_device(
    mirrored_loop.compare_replicas(build, make_train(right))
)
print("RESULT " + json.dumps({name: outcome(check) for name, check in cases.items()}), flush=True)
