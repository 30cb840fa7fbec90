"""For each pipeline answer in the JSON file given: one batch through course.checks.data_and_model's sleeping stages
on 2 new MPI ranks (`course.comm.on_ranks`), with 8 micro-batches and with 1. Prints, as JSON by label, how long the
two ranks' stages worked at the same time with 8 (`overlap`) and the batch's time with 8 and with 1 (`eight`,
`one`). tests/test_checks_data_and_model.py runs it on a capped, busy CPU.

    python tests/programs/pipeline_overlap.py ANSWERS.json     # {label: source defining pipeline(...)}
"""

import json
import sys

import numpy as np

from course.checks import data_and_model
from course.comm import on_ranks


def main() -> None:
    found = {}
    for label, source in json.loads(open(sys.argv[1]).read()).items():
        names = {"np": np}
        exec(source, names)
        eight = on_ranks(data_and_model.batch_seconds, 2, names["pipeline"], 8)
        one = on_ranks(data_and_model.batch_seconds, 2, names["pipeline"], 1)
        together = data_and_model.overlap(eight[0][2], eight[1][2])
        found[label] = {"overlap": together, "eight": eight[0][0], "one": one[0][0]}
    print(json.dumps(found))


if __name__ == "__main__":
    main()
