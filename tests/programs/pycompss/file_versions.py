"""Write after read: a task that updates a file or an object must not change what earlier readers see."""

import time

from pycompss.api.api import compss_open, compss_wait_on
from pycompss.api.parameter import FILE_IN, FILE_INOUT, FILE_OUT, INOUT
from pycompss.api.task import task


@task(path=FILE_OUT)
def write(path, text):
    with open(path, "w") as f:
        f.write(text)


@task(path=FILE_IN, returns=1)
def read_later(path, delay):
    time.sleep(delay)  # the reader is slow: the updates below are ready to run long before it reads
    with open(path) as f:
        return f.read()


@task(path=FILE_INOUT)
def append(path, text):
    with open(path, "a") as f:
        f.write(text)


@task(returns=1)
def copy_later(values, delay):
    time.sleep(delay)
    return list(values)


@task(values=INOUT)
def push(values, value):
    values.append(value)


if __name__ == "__main__":
    write("log.txt", "one\n")
    first = read_later("log.txt", 2.0)
    append("log.txt", "two\n")
    second = read_later("log.txt", 0.0)
    write("log.txt", "three\n")
    third = read_later("log.txt", 0.0)

    values = [1]
    before = copy_later(values, 2.0)
    push(values, 2)
    after = copy_later(values, 0.0)

    print("first:", repr(compss_wait_on(first)))
    print("second:", repr(compss_wait_on(second)))
    print("third:", repr(compss_wait_on(third)))
    print("before:", compss_wait_on(before))
    print("after:", compss_wait_on(after))
    with compss_open("log.txt") as f:
        print("file:", repr(f.read()))
