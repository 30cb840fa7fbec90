"""environment.yml and binder/ install the same stack as pyproject.toml; a drifted pin fails here."""

import re
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement

from tests.conftest import ROOT


def pins(lines) -> dict[str, str]:
    """{normalised name: specifier} of requirement strings, skipping comments and pip's options (an index)."""
    result = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            result[req.name.lower().replace("_", "-")] = str(req.specifier)
    return result


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]
# The stack conda and Binder install (CPU): the dependencies, the `cpu` TensorFlow and Horovod (built separately).
PYPROJECT = pins(PROJECT["dependencies"] + EXTRAS["cpu"] + EXTRAS["horovod"])


def environment_yml_pins() -> dict[str, str]:
    spec = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_list = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict))
    conda = [d for d in spec["dependencies"] if isinstance(d, str)]
    assert "python=3.11" in conda
    return pins(pip_list)


def horovod_pins(text: str) -> set[str]:
    return set(re.findall(r"horovod==[\d.]+", text))


@pytest.mark.parametrize("source", ["environment.yml", "binder/requirements.txt"])
def test_pins_agree_with_pyproject(source):
    found = environment_yml_pins() if source == "environment.yml" else pins((ROOT / source).read_text().splitlines())
    expected = {name: spec for name, spec in PYPROJECT.items() if name != "horovod"}  # built separately, see below
    assert {name: found.get(name) for name in expected} == expected


@pytest.mark.parametrize("source", ["environment.yml", "binder/postBuild"])
def test_horovod_is_built_at_the_pinned_version(source):
    assert horovod_pins((ROOT / source).read_text()) == {f"horovod{PYPROJECT['horovod']}"}


def test_binder_uses_python_311_and_debian_open_mpi():
    assert (ROOT / "binder/runtime.txt").read_text().strip() == "python-3.11"
    assert {"openmpi-bin", "libopenmpi-dev"} <= set((ROOT / "binder/apt.txt").read_text().split())


def test_pin_parser_sees_a_drift():
    drifted = pins(["tensorflow-cpu==2.16.1"])
    assert drifted["tensorflow-cpu"] != PYPROJECT["tensorflow-cpu"]


def test_the_cpu_and_cuda_builds_are_alternatives_of_one_tensorflow():
    """Neither build is a dependency (one would overwrite the other); the two extras pin the same version."""
    assert not [d for d in PROJECT["dependencies"] if d.startswith(("tensorflow", "horovod"))]
    cpu, gpu = pins(EXTRAS["cpu"]), pins(EXTRAS["gpu"])
    assert (
        list(cpu) == ["tensorflow-cpu"] and list(gpu) == ["tensorflow"] and cpu["tensorflow-cpu"] == gpu["tensorflow"]
    )
    assert EXTRAS["gpu"] == [f"tensorflow[and-cuda]{gpu['tensorflow']}"]


@pytest.mark.parametrize("source", ["environment.yml", "binder/requirements.txt", "scripts/setup-python.sh"])
def test_torch_comes_from_pytorchs_cpu_index_where_it_answers(source):
    """The CPU build (~200 MB), not the default index's CUDA build (~3 GB with its libraries), on CPU machines."""
    assert "https://download.pytorch.org/whl/cpu" in (ROOT / source).read_text()
    assert PYPROJECT["torch"] == "==2.13.0"
