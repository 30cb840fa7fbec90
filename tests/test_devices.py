"""course.devices: the GPUs a process may use, its CPU threads, and TensorFlow pinned to them (real TensorFlow)."""

from __future__ import annotations

import os
import subprocess
import sys

from course import devices
from tests.conftest import ROOT


def test_a_sites_thread_setting_wins_over_the_default():
    environ = {"OMP_NUM_THREADS": "4"}
    devices.default_threads(environ, 1)
    assert environ["OMP_NUM_THREADS"] == "4", "the site's OMP_NUM_THREADS was overwritten"
    assert environ["TF_NUM_INTRAOP_THREADS"] == environ["OPENBLAS_NUM_THREADS"] == environ["MKL_NUM_THREADS"] == "1"
    assert environ["TF_NUM_INTEROP_THREADS"] == "1"


def test_scheduler_masks_hide_every_gpu(tmp_path):
    driver = tmp_path / "gpus"
    for index in range(2):
        (driver / f"0000:0{index}:00.0").mkdir(parents=True)
    assert devices.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, proc=str(driver)) == []
    assert devices.visible_gpus({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, proc=str(driver)) == []
    assert devices.visible_gpus({"CUDA_VISIBLE_DEVICES": "2,-1"}, proc=str(driver)) == ["2"]


def test_pinning_on_cpu_sets_tensorflows_threads_in_a_fresh_process():
    code = (
        "from course import devices\n"
        "devices.pin_tensorflow(local_rank=1, threads=3)\n"
        "import tensorflow as tf\n"
        "print('THREADS', tf.config.threading.get_intra_op_parallelism_threads(),"
        " tf.config.threading.get_inter_op_parallelism_threads())\n"
        "tf.constant(1.0)\n"
        "devices.pin_tensorflow(local_rank=1, threads=2)  # TensorFlow started: no error, nothing changes\n"
        "print('AFTER', tf.config.threading.get_intra_op_parallelism_threads())\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "THREADS 3 1" in done.stdout and "AFTER 3" in done.stdout, done.stdout


def test_limit_threads_sets_what_is_unset_and_limits_blas_already_loaded():
    """What a task worker does with the runtime's threads per task: a site's own setting stays."""
    code = (
        "import os, numpy\n"
        "from threadpoolctl import threadpool_info\n"
        "from course import devices\n"
        "devices.limit_threads(1)\n"
        "print('ENV', os.environ['OMP_NUM_THREADS'], os.environ['TF_NUM_INTRAOP_THREADS'], os.environ['MKL_NUM_THREADS'])\n"
        "print('POOLS', sorted({p['num_threads'] for p in threadpool_info()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_THREADS")}
    env.update(OMP_NUM_THREADS="2", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ENV 2 1 1" in done.stdout, done.stdout
    assert "POOLS [1]" in done.stdout, f"a BLAS pool loaded before the call kept its threads: {done.stdout}"
