"""`horovodrun`, its build probe answered once per test session (tests/script_runs.py installs it in trial kernels).

Before it launches anything, every `horovodrun --gloo` asks whether this Horovod was built with Gloo
(horovod.common.util.gloo_built): a forked process that imports horovod.tensorflow, and so TensorFlow, to read one
flag, about 1.6 core-s and 2-6 s before the first rank starts. The answer is this installation's: here the first
launch of the session asks Horovod for real and writes it down in the session's folder (script_runs.VARIABLE); later
launches read it. Everything else is horovodrun's own: its arguments, the rendezvous, the ranks it starts.

    python -c "...; from tests.horovodrun_once import main; main()" -np 2 -H localhost:1,127.0.0.1:1 --gloo ...
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path

VARIABLE = "COURSE_TEST_SCRIPT_RUNS"  # tests.script_runs.VARIABLE (not imported: that module imports the checks)
ANSWER = "horovod-gloo-built.json"


def once(probe, folder: Path):
    """PROBE (horovod's gloo_built), called for real by the first caller with FOLDER, its answer read by the rest."""

    def answered(verbose: bool = False):
        kept = folder / ANSWER
        folder.mkdir(parents=True, exist_ok=True)
        with open(f"{kept}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a second launch waits for the first one's answer
            if not kept.is_file():
                kept.write_text(json.dumps(probe(verbose=verbose)))
        return json.loads(kept.read_text())

    return answered


def main() -> None:
    from horovod.runner import launch

    if os.environ.get(VARIABLE):
        launch.gloo_built = once(launch.gloo_built, Path(os.environ[VARIABLE]))
    sys.argv[0] = "horovodrun"
    launch.run_commandline()


if __name__ == "__main__":
    main()
