"""Distributed Deep Learning on HPC: the Python package the course notebooks use.

A map, by role (each module's docstring says more):
- What notebooks teach with: cluster/ (engine clusters: local, MPI, Slurm; torch_group makes their engines one
  torch.distributed group, torch_data its data and model for notebook 12, torch_collectives the collectives a piece
  of PyTorch code runs, as the checks of notebook 13 count them; context_parallel, notebook 14's attention: what one
  process measures of it and DeepSpeed-Ulysses' all-to-all), tasks/ (PyCOMPSs-style task graphs),
  training, averaging (and sync_types, its strategies' names), parallelism, comm (and rank_pool, its MPI ranks kept
  between calls where a process asks), nn, models, data, perf,
  plots, results; for one device (notebook 06): input_pipeline (tf.data, the wait for data), tfprofiler (the
  TensorFlow profiler's trace), precision (mixed-precision policies, Keras's loss scaling); for models larger than
  one device (notebook 09): sharding (ZeRO's shards, a flat-vector network, Adam by elements).
- What notebooks check a learner's answer with: checks/ (one module per notebook or topic, each check returning
  what is wrong in words: quiz, a Horovod script, a MirroredStrategy loop, a batch script, ...), shortcuts (answers that call the course's own code), answers (instructor-only references).
- What runs as a job (`python -m course.programs.NAME`, under horovodrun, mpiexec or srun): programs/.
- The machine underneath, one place each: slurm (every Slurm command), mpi (Open MPI), launch (mpiexec or
  horovodrun from a notebook, a hung launch tried once more), devices (GPUs, threads),
  processes (finding and killing), memory, settings (every COURSE_* variable), profile.
- Tools on the command line (`python -m course ...`, cli): doctor/, hub (the end of a class on a JupyterHub), jobs,
  apptainer, run (and records: a run's date, commit and machine as data, for the website), lab, contents (README's
  table of notebooks, read from them), scaffold (new-exercise: a graded exercise's pieces, CONTRIBUTING.md), and
  grading/ (release, validate, grade a class locally or on Slurm, the student copy); for instructors, mutation/ (the mutation report: how many mutants of each exercise's solution its
  checks catch; not in the student copy).
"""

__version__ = "0.1.0"

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


def _follow_this_checkout() -> None:
    """Make the Pythons this course starts (kernels, ranks, engines) import this checkout's course where the
    environment has another checkout's installed (editable, a `.venv` shared by two clones)."""
    from importlib import metadata

    here = Path(__file__).resolve().parent.parent
    try:
        url = json.loads(metadata.distribution("ddl-hpc-course").read_text("direct_url.json") or "{}").get("url", "")
    except (metadata.PackageNotFoundError, ValueError):
        return
    if not url.startswith("file:") or Path(urlparse(url).path).resolve() == here:
        return
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(here)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(here), *paths])


_follow_this_checkout()


class UserError(Exception):
    """A mistake the user can fix (bad argument, missing file): shown as one line, never a traceback."""


def from_args(args: Any, names: str) -> dict[str, Any]:
    """The options `names` (separated by spaces) of parsed arguments `args`, as keywords of the same names: for the
    command line (course.cli, course.grading.cli, course.mutation.cli) and the job programs alike, so none imports
    another's parser."""
    return {name: getattr(args, name) for name in names.split()}
