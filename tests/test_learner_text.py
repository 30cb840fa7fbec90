"""What learners read in the released notebooks: no words about our tests or the seed workshops' numbering, stubs
in the language of the cell, and counts that are the models'. (README's table of notebooks: tests/test_contents.py.)"""

from __future__ import annotations

import re

import nbformat
import pytest

from tests.conftest import ROOT

RELEASED = sorted((ROOT / "notebooks").glob("*.ipynb"))
INTERNAL = re.compile(r"test suite|\bseed\s?0*\d\d?\d?\b|\bseed0\d\d|the seed'?s\b|seed workshop", re.IGNORECASE)
# Case-sensitive: "CI" (continuous integration), a grader's "autograding", and names with a notebook's number in
# them, which go stale at the next renumbering (results_04.csv in 05, course-05- in 06, 08- in 09 were left from
# one): name files for what they hold.
STALE = re.compile(r"\bCI\b|[Aa]utograding|\w_\d\d\.csv\b|\bcourse-\d\d-|prefix=\"\d\d-")


@pytest.mark.parametrize("path", RELEASED, ids=[p.stem for p in RELEASED])
def test_no_words_about_our_tests_or_seed_numbers(path):
    nb = nbformat.read(str(path), as_version=4)
    said = [f"cell {i}: {m.group(0)!r}" for i, c in enumerate(nb.cells) for m in INTERNAL.finditer(c.source)]
    assert not said, f"{path.name} shows learners: {said}"


@pytest.mark.parametrize("path", RELEASED, ids=[p.stem for p in RELEASED])
def test_no_ci_and_no_notebook_numbers_in_file_names(path):
    nb = nbformat.read(str(path), as_version=4)
    said = [f"cell {i}: {m.group(0)!r}" for i, c in enumerate(nb.cells) for m in STALE.finditer(c.source)]
    assert not said, f"{path.name} shows learners: {said}"


@pytest.mark.parametrize("path", RELEASED, ids=[p.stem for p in RELEASED])
def test_a_script_cell_is_not_stubbed_with_python(path):
    """A %%writefile cell that writes a batch script gets a comment to replace, not Python's raise."""
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        first = cell.source.split("\n", 1)[0]
        if cell.cell_type == "code" and first.startswith("%%writefile") and not first.rstrip().endswith(".py"):
            assert "raise NotImplementedError" not in cell.source, f"{path.name}: {cell.source[:200]}"


def _text(name: str) -> str:
    """A released notebook's cells as one string, whitespace runs made single spaces."""
    nb = nbformat.read(str(ROOT / "notebooks" / name), as_version=4)
    return " ".join(" ".join(c.source.split()) for c in nb.cells)


def test_gradient_tensor_counts_in_03_and_08_are_the_models():
    """03 counts the MNIST CNN's and ResNet50V2's gradient tensors, 08 ResNet50V2's: counted from the models here."""
    import tensorflow as tf

    from course import models

    three, six = _text("03_parallelism_and_collectives.ipynb"), _text("08_mirrored_strategy.ipynb")
    cnn = len(models.mnist_cnn((28, 28, 1), 10).trainable_weights)
    resnet = len(tf.keras.applications.ResNet50V2(weights=None, input_shape=(32, 32, 3), classes=10).trainable_weights)
    said = re.search(r"\((\d+) for the course's MNIST CNN", three)
    assert said and int(said.group(1)) == cnn, (
        f"03 says {said and said.group(1)} tensors for the MNIST CNN; it has {cnn}"
    )
    assert f"{resnet} for ResNet50V2" in three, f"03 should count ResNet50V2's {resnet} trainable tensors"
    assert f"against {resnet})" in six, f"08 should count ResNet50V2's {resnet} trainable tensors"


HEADING = re.compile(r"^#+ .*?\bExercise (\d+)\b", re.M)
MENTION = re.compile(r"(?<!lab, )\b[Ee]xercise (\d+)\b")  # not "(the DeepHealth lab, exercise 5)": a workshop's


@pytest.mark.parametrize("path", RELEASED, ids=[p.stem for p in RELEASED])
def test_exercises_are_numbered_once_in_order_and_the_text_names_only_those(path):
    """An exercise inserted in the middle renumbers those after it: two "Exercise 5" headings, or a mention of an
    exercise the notebook does not have, is a renumbering left half done."""
    nb = nbformat.read(str(path), as_version=4)
    numbers = [int(n) for c in nb.cells if c.cell_type == "markdown" for n in HEADING.findall(c.source)]
    assert numbers == list(range(1, len(numbers) + 1)), f"{path.name}'s exercise headings are numbered {numbers}"
    named = {int(m.group(1)) for c in nb.cells for m in MENTION.finditer(c.source)}
    assert named <= set(numbers), f"{path.name} mentions exercise(s) {sorted(named - set(numbers))}, not in it"
