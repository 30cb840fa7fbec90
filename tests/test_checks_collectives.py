"""course.checks.collectives, notebook 03's checks, tried directly on every answer the fixtures hold for its
exercises (tests/check_cases.py), on two MPI engines as the notebook's quick profile has."""

from __future__ import annotations

import numpy as np
import pytest

from course import cluster
from course.checks import collectives
from tests.check_cases import cases, define, judge

NOTEBOOK = "03_parallelism_and_collectives"
COVERED = {"ex3-answer"}  # the answer cells whose fixture answers this module tries


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """Two MPI engines in a profile of their own, as the notebook starts them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
        engines = cluster.start(2, engines="mpi", cluster_id="t-checks-collectives")
        try:
            yield engines.view
        finally:
            engines.stop()


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
def test_parameter_server(case, view):
    names = define(case, {"np": np})
    judge(case, lambda: collectives.parameter_server(names["my_parameter_server_allreduce"], view))
