"""course.memory.PeakMemory: the sampler `course run` and the notebook tests use to keep notebooks under Binder's 2 GB.

It must see memory that a child, and a child's child, really allocates (so the 2 GB check can fail), and leave out
processes started before its block.
"""

import subprocess
import sys
import time

from course.memory import BINDER_LIMIT, PeakMemory

MB = 2**20
# allocate and touch `size` MB, say so, and hold it until stdin closes
HOLD = "import sys; a = b'x' * ({size} * 2**20); print('ready', flush=True); sys.stdin.read()"
# the same one level further down: a child whose own child allocates
NESTED = "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {code!r}], stdin=sys.stdin); p.wait()"


def start(code: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"  # the memory is allocated and touched
    return child


def end(child: subprocess.Popen) -> None:
    child.stdin.close()
    child.wait(timeout=60)


def test_peak_counts_what_a_grandchild_allocates_and_ignores_earlier_children():
    earlier = start(HOLD.format(size=300))  # started before the block: not the notebook's
    try:
        with PeakMemory(interval=0.05) as memory:
            child = start(NESTED.format(code=HOLD.format(size=400)))
            seen = memory.samples
            while memory.samples < seen + 2:  # the background sampler, not only an explicit sample, sees it
                time.sleep(0.01)
            end(child)
        assert 400 * MB <= memory.peak < 600 * MB, memory.peak / MB  # 400 MB + two interpreters, not + 300 MB
    finally:
        end(earlier)


def test_a_child_not_yet_exec_d_does_not_count_this_process_again():
    """Between fork and exec a child is a copy of this process, whose pages are left out: a sample then must not
    count them (a test worker that ran TensorFlow is 1 GB)."""
    held = b"x" * (500 * MB)  # this process is large
    with PeakMemory(interval=0.02) as memory:
        # the child stays a copy for a second before it becomes a small interpreter
        subprocess.run([sys.executable, "-c", "pass"], preexec_fn=lambda: time.sleep(1), check=True)
    assert memory.samples >= 10 and memory.peak < 100 * MB, (memory.samples, memory.peak / MB)
    assert len(held) == 500 * MB


def test_the_binder_check_can_fail():
    with PeakMemory(interval=60) as memory:
        child = start(HOLD.format(size=2100))
        memory.sample()
        end(child)
    assert memory.peak > BINDER_LIMIT


def test_arrays_kept_counts_what_a_call_leaves_allocated_views_whole(tmp_path, monkeypatch):
    """arrays_kept measures the memory held, not what the returned objects say of themselves: a slice of 1000
    floats keeps all 8000 bytes, an array kept elsewhere counts, a temporary does not, nor a module's own arrays."""
    import numpy as np

    from course.memory import arrays_kept

    view, kept = arrays_kept(lambda: np.zeros(1000)[:10])
    assert view.nbytes == 80 and kept == 8000
    copy, kept = arrays_kept(lambda: np.zeros(1000)[:10].copy())
    assert copy.nbytes == 80 and kept == 80
    elsewhere: list = []
    _, kept = arrays_kept(lambda: elsewhere.append(np.ones(500)))
    assert kept == 4000
    _, kept = arrays_kept(lambda: float(np.ones(2000).sum()))
    assert kept == 0
    (tmp_path / "module_with_table.py").write_text("import numpy as np\nTABLE = np.zeros(3000)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _, kept = arrays_kept(lambda: __import__("module_with_table").TABLE[:1].copy())
    assert kept == 8
