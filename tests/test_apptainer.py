"""The container definition installs the course's own pins."""

import pytest

from course import apptainer
from tests.conftest import ROOT


@pytest.mark.parametrize("gpu, tensorflow", [(False, "tensorflow-cpu==2.15.1"), (True, "tensorflow[and-cuda]==2.15.1")])
def test_container_definition_installs_one_tensorflow_and_the_pinned_horovod(gpu, tensorflow):
    """The container installs the same pins as pyproject.toml: exactly one TensorFlow build, Horovod built after it."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installs = [line for line in apptainer.definition(gpu=gpu).splitlines() if "pip install" in line]
    named = [line for line in installs if "tensorflow" in line]
    assert len(named) == 1 and tensorflow in named[0].replace("'", ""), installs
    assert tensorflow == extras["gpu" if gpu else "cpu"][0]
    other = "tensorflow-cpu" if gpu else "tensorflow[and-cuda]"
    assert not any(other in line for line in installs), f"both TensorFlow builds installed: {installs}"
    horovod = [n for n, line in enumerate(installs) if extras["horovod"][0] in line]
    assert horovod and horovod[0] > installs.index(named[0]), "Horovod must be built after TensorFlow is installed"
    assert ("HOROVOD_GPU_OPERATIONS=NCCL" in installs[horovod[0]]) == gpu
