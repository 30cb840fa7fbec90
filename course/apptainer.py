"""The course's stack in an Apptainer (formerly Singularity) container, the way HPC centres run containers:
a definition file with the course's exact pins, for `apptainer build` where Apptainer is installed.

    from course import apptainer
    Path("ddl-hpc.def").write_text(apptainer.definition(gpu=True))
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path


def definition(gpu: bool = False, pyproject: str | os.PathLike | None = None) -> str:
    """A definition file that builds the course's pinned stack (pyproject.toml) into an image. (Over 60 lines:
    most of it is the file itself, one template, so that it reads as the definition it writes.)

    Build on a machine with apptainer: `apptainer build ddl-hpc.sif ddl-hpc.def` (from the course checkout);
    run: `apptainer exec [--nv] ddl-hpc.sif python -m course doctor`. With GPUs, the TensorFlow CUDA build is
    installed and Horovod is built with NCCL; the host's MPI must match the container's Open MPI 4.1 for
    multi-node runs (the "hybrid" model: the host's mpiexec starts one container per rank).
    """
    import tomllib

    file = Path(pyproject) if pyproject else Path(__file__).resolve().parents[1] / "pyproject.toml"
    project = tomllib.loads(file.read_text())["project"]
    extras = project["optional-dependencies"]  # TensorFlow's two builds and Horovod are extras, not dependencies
    pins, tensorflow, horovod = project["dependencies"], extras["gpu" if gpu else "cpu"][0], extras["horovod"][0]
    horovod_env = (
        "HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_MPI=1 "
        "HOROVOD_WITH_GLOO=1 CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS=-j4"
        + (" HOROVOD_GPU_OPERATIONS=NCCL" if gpu else "")
    )
    base = "nvidia/cuda:12.2.2-cudnn8-devel-ubuntu22.04" if gpu else "python:3.11-slim-bookworm"
    python_setup = (
        (
            "    apt-get install -y --no-install-recommends software-properties-common\n"
            "    add-apt-repository -y ppa:deadsnakes/ppa && apt-get update\n"
            "    apt-get install -y --no-install-recommends python3.11 python3.11-dev python3.11-venv\n"
            "    python3.11 -m venv /opt/venv\n"
        )
        if gpu
        else "    python3 -m venv /opt/venv\n"
    )
    quoted = " ".join(shlex.quote(p) for p in pins)
    return f"""Bootstrap: docker
From: {base}

# The course stack ({"GPU" if gpu else "CPU"}): Python 3.11, {tensorflow}, {horovod} (built against it), Open MPI 4.1.
# Build: apptainer build ddl-hpc.sif ddl-hpc.def      (from the course checkout: %files copies the package)
# Use:   apptainer exec {"--nv " if gpu else ""}ddl-hpc.sif python -m course doctor
#        in a job script: mpiexec -n $SLURM_NTASKS apptainer exec {"--nv " if gpu else ""}ddl-hpc.sif python train.py

%files
    pyproject.toml /opt/course/pyproject.toml
    README.md /opt/course/README.md
    course /opt/course/course

%post
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev g++ make cmake git
{python_setup}    . /opt/venv/bin/activate
    pip install --no-cache-dir {shlex.quote(tensorflow)} cmake cloudpickle psutil pyyaml packaging cffi
    {horovod_env} pip install --no-cache-dir --no-build-isolation {shlex.quote(horovod)}
    pip install --no-cache-dir {quoted}
    pip install --no-cache-dir --no-deps /opt/course
    python -m ipykernel install --prefix /opt/venv --name ddl-hpc --display-name "Python (DDL on HPC)"
    rm -rf /var/lib/apt/lists/*

%environment
    export PATH=/opt/venv/bin:$PATH
    export OMPI_MCA_btl_vader_single_copy_mechanism=none

%runscript
    exec /opt/venv/bin/python "$@"

%test
    /opt/venv/bin/horovodrun --check-build
"""
