"""nbgrader's ClearSolutions, with a stub in the script's own language for a %%writefile cell that writes a
batch script: Python's `raise NotImplementedError()` in a `#SBATCH` file would be nonsense to a learner.

Used by `course release` and, through nbgrader_config.py, by nbgrader's own `generate_assignment`, so both
give learners the same notebooks.
"""

from __future__ import annotations

from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import ClearSolutions

PYTHON_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"  # nbgrader's stub for Python (nbgrader_course)
SCRIPT_STUB = "# YOUR SCRIPT HERE"


class ClearSolutionsAnyLanguage(ClearSolutions):
    """ClearSolutions; then, in a %%writefile cell whose file is not a .py, the Python stub becomes a comment."""

    def preprocess_cell(self, cell, resources, index):
        cell, resources = super().preprocess_cell(cell, resources, index)
        first = cell.source.split("\n", 1)[0]
        if cell.cell_type == "code" and first.startswith("%%writefile") and not first.rstrip().endswith(".py"):
            cell.source = cell.source.replace(PYTHON_STUB, SCRIPT_STUB)
        return cell, resources


def generate_assignment_preprocessors() -> list:
    """nbgrader's own GenerateAssignment list, with ClearSolutions replaced by ClearSolutionsAnyLanguage."""
    default = GenerateAssignment.class_traits()["preprocessors"].default()
    return [ClearSolutionsAnyLanguage if p is ClearSolutions else p for p in default]
