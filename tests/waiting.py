"""The test files that wait on something outside the test process, with little work of their own while they wait.

scripts/flake-hunt.py runs them again and again on a machine made slow on purpose; a full run (tests/conftest.py)
runs them first, while the strength test's notebook runs (tests/test_strength.py) keep the cores busy in the
background, and the files that mostly compute after them, once the cores are free again.
"""

# The tests that wait on something outside the test process: time limits, a hub, a browser, Slurm, MPI launches.
# In the order a full run takes them: the longest waits first (the time-limit chain, then the hub's).
TESTS = [
    "tests/test_jobs.py",
    "tests/test_hub.py",
    "tests/test_browser.py",
    "tests/test_lab.py",
    "tests/test_slurm.py",
    "tests/test_virtual_cluster.py",
    "tests/test_sbatch_check.py",
    "tests/test_grading_timeout.py",
    "tests/test_nbgrader_isolation.py",
    "tests/test_horovod.py",
    "tests/test_horovod_training.py",
    "tests/test_comm.py",
    "tests/test_cluster.py",
    "tests/test_cluster_concurrency.py",
    "tests/test_processes.py",
    "tests/test_tasks.py",
]
