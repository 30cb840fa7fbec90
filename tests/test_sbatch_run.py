"""course.checks.sbatch_run: a batch script run for real on the virtual cluster's gpu partition (2 nodes of 48 cores
and 8 device-file GPUs), its program replaced by a probe, and judged by what each rank got."""

from __future__ import annotations

import json
import subprocess

import pytest

from course.checks import sbatch_run, sbatch_script
from course.checks.sbatch_run import Rank
from tests.conftest import ROOT
from tests.test_sbatch_check import RIGHT, WANT
from tests.virtual_cluster import SCRIPT

FIXTURES = ROOT / "tests" / "fixtures"


def _scripts(kind: str) -> list[tuple[str, str]]:
    """(why, script) of each fixture answer of the batch-script exercise, without the %%writefile line."""
    answers = json.loads((FIXTURES / kind / "11_job_scripts.json").read_text())
    return [(a["why"], a["ex-sbatch-answer"].split("\n", 1)[1]) for a in answers if "ex-sbatch-answer" in a]


def _ranks(per_node: int = 8, nodes: int = 2, **env: str) -> list[Rank]:
    """Ranks as mpiexec starts them: numbered in node order, each seeing its node's 8 GPUs unless env says."""
    records = []
    for rank in range(per_node * nodes):
        seen = {"OMPI_COMM_WORLD_RANK": str(rank), "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", **env}
        records.append({"host": f"n{rank // per_node + 1}", "env": {k: v for k, v in seen.items() if v is not None}})
    return [Rank.read(r) for r in records]


def test_sixteen_ranks_eight_per_node_each_on_its_own_gpu_is_right():
    assert sbatch_run.problems(_ranks(), WANT) == []
    bound = _ranks()
    for r in bound:  # srun's per-task binding: one GPU each, the same index on both nodes
        r.visible = [str(r.rank % 8)]
    assert sbatch_run.problems(bound, WANT) == []


def test_ranks_of_a_node_on_one_gpu_are_named_with_their_node():
    said = sbatch_run.problems(_ranks(CUDA_VISIBLE_DEVICES="0"), WANT)
    assert len(said) == 2 and "on n1, 8 ranks compute on 1 GPU(s): ranks 0, 1, ..., 7 all on GPU 0" in said[0], said
    assert "on n2, 8 ranks compute on 1 GPU(s): ranks 8, 9, ..., 15" in said[1], said


def test_an_unset_cuda_visible_devices_falls_back_to_the_jobs_gpus_on_the_node():
    """srun --gpu-bind=none sets no CUDA_VISIBLE_DEVICES: the rank sees the node's GPUs of the job."""
    assert sbatch_run.problems(_ranks(CUDA_VISIBLE_DEVICES=None, SLURM_JOB_GPUS="0,1,2,3,4,5,6,7"), WANT) == []
    said = sbatch_run.problems(_ranks(CUDA_VISIBLE_DEVICES=None), WANT)
    assert said == ["rank(s) 0, 1, ..., 15 see no GPU (CUDA_VISIBLE_DEVICES empty): they would train on CPUs"]


def test_the_count_the_nodes_the_numbers_and_the_threads_are_each_named():
    one = sbatch_run.problems(_ranks(per_node=1, nodes=1), WANT)
    assert one[0].startswith("the job started 1 process(es); the exercise needs 16") and "1 on n1" in one[1], one
    uneven = sbatch_run.problems(_ranks(per_node=16, nodes=1), WANT)
    assert uneven[0] == "the ranks ran 16 on n1: the exercise needs 8 on each of 2 nodes", uneven
    assert uneven[1].startswith("on n1, 16 ranks compute on 8 GPU(s): ranks 0, 8 all on GPU 0"), uneven
    twice = _ranks()
    for r in twice[8:]:  # two launchers, each numbering its own ranks from 0
        r.rank -= 8
    assert any("not 0 to 15" in p for p in sbatch_run.problems(twice, WANT))
    threads = sbatch_run.problems(_ranks(OMP_NUM_THREADS="48"), WANT)
    assert threads == [
        "the ranks run OMP_NUM_THREADS=48 thread(s) each, but each has 6 CPUs: one thread per CPU of its task"
    ]


def test_the_probe_replaces_the_program_and_a_gpu_type_but_keeps_the_rest():
    typed = RIGHT.replace("--gres=gpu:8", "--gres=gpu:a100:8").replace(
        "--map-by slot python", "--map-by slot \\\n    python"
    )
    probed = sbatch_run.probe_script(typed, WANT)
    assert "#SBATCH --gres=gpu:8\n" in probed and "horovod_mnist" not in probed
    assert f"--map-by slot {sbatch_run.sys.executable} {sbatch_run.PROBE}\n" in probed
    assert "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK\n" in probed
    assert sbatch_run.probe_script(RIGHT.replace("horovod_mnist", "other"), WANT) is None


@pytest.fixture(scope="module")
def gpu_site(virtual_cluster, tmp_path_factory):
    """The virtual cluster's environment for this process (the check reads SLURM_CONF), and a work folder."""
    # started again (idempotent): test_virtual_cluster's last test stops it, and xdist may run that one first
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", "--nodes", "2"], capture_output=True, text=True, timeout=180
    )
    assert started.returncode == 0, started.stderr
    with pytest.MonkeyPatch.context() as patch:
        for name, value in virtual_cluster.items():
            patch.setenv(name, value)
        part = sbatch_run.site_partition(WANT)
        assert part is not None and (part.nodes, part.cpus_per_node, part.gpus_per_node) == (2, 48, 8), part
        yield part, tmp_path_factory.mktemp("site")


@pytest.mark.slow
@pytest.mark.parametrize("why, script", _scripts("right_answers"), ids=lambda v: v[:60])
def test_every_right_script_runs_as_asked_on_the_gpu_partition(gpu_site, why, script):
    part, folder = gpu_site
    (folder / "logs").mkdir(exist_ok=True)
    (folder / "hvd_mnist.sbatch").write_text(script)
    said = sbatch_script.check(folder / "hvd_mnist.sbatch", WANT)
    assert "it ran as asked on Slurm's partition gpu" in said and "16 ranks, 8 on each of vc3, vc4" in said, said


@pytest.mark.slow
@pytest.mark.parametrize("why, script", _scripts("wrong_answers"), ids=lambda v: v[:60])
def test_every_wrong_script_is_caught_by_its_run_alone(gpu_site, why, script):
    """Not by the text's rules: the run itself (Slurm's refusal, a failed job, or what the ranks got)."""
    part, folder = gpu_site
    ranks, failed = sbatch_run.run(script, WANT, part, folder)
    assert failed or sbatch_run.problems(ranks, WANT), f"{why}: ran as asked: {ranks}"
    assert not list(folder.glob(".probe-*")), "the run's folder is removed"


@pytest.mark.slow
def test_a_job_that_does_not_end_in_time_is_cancelled_and_said_so(gpu_site, virtual_cluster):
    part, folder = gpu_site
    slow = RIGHT.replace("export OMP", "sleep 60\nexport OMP")
    with pytest.raises(TimeoutError, match="did not end within 1 s on partition gpu"):
        sbatch_run.run(slow, WANT, part, folder, timeout=1)
    queued = subprocess.run(
        ["squeue", "-h", "-n", "course-probe", "-t", "PD,R"], capture_output=True, text=True, env=virtual_cluster
    )
    assert queued.returncode == 0 and queued.stdout.strip() == "", queued.stdout
    assert not list(folder.glob(".probe-*"))
