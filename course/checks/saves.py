"""Which process saved which Keras model file: on engines that share one folder, a model saved by every rank
leaves the same file as one saved by rank 0 alone, so a check asks each engine what it saved.

    cluster.view.execute("from course.checks import saves; saves.watch()")    # before the exercise
    per_engine = cluster.view.apply_sync(saves.saved, True)                   # after it: the paths, per engine
"""

from __future__ import annotations

import os
from pathlib import Path

_SAVED: list[str] = []
_WATCHED = "_course_watched"


def watch() -> None:
    """From now on, note the path of every model this process saves (Model.save, Model.save_weights,
    tf.keras.models.save_model); calling it again changes nothing."""
    import tensorflow as tf

    for owner, name in ((tf.keras.Model, "save"), (tf.keras.Model, "save_weights"), (tf.keras.models, "save_model")):
        original = getattr(owner, name)
        if getattr(original, _WATCHED, False):
            continue
        if owner is tf.keras.models:

            def noted(model, filepath, *args, _original=original, **kwargs):
                _note(filepath)
                return _original(model, filepath, *args, **kwargs)

        else:

            def noted(self, filepath, *args, _original=original, **kwargs):
                _note(filepath)
                return _original(self, filepath, *args, **kwargs)

        setattr(noted, _WATCHED, True)
        setattr(owner, name, noted)


def _note(filepath: str | os.PathLike) -> None:
    _SAVED.append(str(Path(os.fspath(filepath)).resolve()))


def saved(forget: bool = False) -> list[str]:
    """The absolute paths this process saved a model to since watch() (or since the last forget), in order; with
    forget=True the list starts again empty, so that a check run after a retry sees the retry's saves only."""
    found = list(_SAVED)
    if forget:
        _SAVED.clear()
    return found


def savers(per_engine: list[list[str]], path: str | os.PathLike) -> list[int]:
    """The engines (positions in `per_engine`, each engine's saved()) that saved `path`."""
    wanted = str(Path(path).resolve())
    return [i for i, paths in enumerate(per_engine) if wanted in paths]
