"""What a failed task does to the program, for each on_failure policy."""

from pycompss.api.api import compss_barrier, compss_wait_on
from pycompss.api.on_failure import on_failure
from pycompss.api.task import task


@task(returns=1, on_failure="IGNORE")
def fragile(x):
    raise ValueError(f"fragile {x}")


@on_failure(management="IGNORE", returns=-1)
@task(returns=1)
def guarded(x):
    return 10 // x


@task(returns=1, on_failure="CANCEL_SUCCESSORS")
def step(x):
    if x == 1:
        raise RuntimeError("step 1 fails")
    return x


@task(returns=1)
def follow(value):
    return value * 100


@task(returns=1)
def flaky(x):
    with open("attempts.txt", "a") as f:  # each attempt leaves a line
        f.write("attempt\n")
    return 1 / x


if __name__ == "__main__":
    print("fragile:", compss_wait_on(fragile(1)))
    print("guarded:", compss_wait_on(guarded(0)), compss_wait_on(guarded(5)))
    results = [follow(step(i)) for i in range(3)]
    compss_barrier()  # a CANCEL_SUCCESSORS failure does not stop the program
    for i, r in enumerate(results):
        try:
            print("follow", i, compss_wait_on(r))
        except RuntimeError as exc:
            print("follow", i, "cancelled:", exc)
    flaky(0)  # default on_failure: retried, then the application fails when it ends
    print("main program done")
