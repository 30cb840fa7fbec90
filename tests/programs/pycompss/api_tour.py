"""The rest of the API real programs import: groups, exceptions, functions, dictionaries, files, binaries."""

import os

from pycompss.api.api import (
    TaskGroup,
    compss_barrier,
    compss_barrier_group,
    compss_delete_object,
    compss_open,
    compss_wait_on,
    compss_wait_on_directory,
)
from pycompss.api.binary import binary
from pycompss.api.exceptions import COMPSsException
from pycompss.api.implement import implement
from pycompss.api.mpi import mpi
from pycompss.api.parameter import (
    COLLECTION_FILE_IN,
    COLLECTION_FILE_OUT,
    DICTIONARY_INOUT,
    DIRECTORY_OUT,
    FILE,
    FILE_OUT,
    FILE_OUT_STDOUT,
    IN_DELETE,
    STDOUT,
    Depth,
    StdIOStream,
    Type,
)
from pycompss.api.task import task
from pycompss.functions.data import chunks, generator
from pycompss.functions.elapsed_time import timeit
from pycompss.functions.reduce import merge_reduce


@task(returns=1)
def add(a, b):
    return a + b


@task(returns=1)
def check(x):
    if x > 2:
        raise COMPSsException(f"{x} is too big")
    return x


@task(scores={Type: DICTIONARY_INOUT, Depth: 1})
def grade(scores):
    for name in scores:
        scores[name].append(len(name))


@task(path=FILE, returns=1)
def count_lines(path):
    with open(path) as f:
        return len(f.readlines())


@task(parts=COLLECTION_FILE_OUT)
def split(parts, text):
    for part, word in zip(parts, text.split()):
        with open(part, "w") as f:
            f.write(word)


@task(parts=COLLECTION_FILE_IN, returns=1)
def join(parts):
    return " ".join(open(p).read() for p in parts)


@task(folder=DIRECTORY_OUT)
def fill(folder, n):
    for i in range(n):
        with open(os.path.join(folder, f"{i}.txt"), "w") as f:
            f.write(str(i))


@task(data=IN_DELETE, returns=1)
def size(data):
    return len(data)


@implement(source_class="__main__", method="add")
@task(returns=1)
def add_again(a, b):
    return b + a


@binary(binary="echo")
@task(out={Type: FILE_OUT, StdIOStream: STDOUT})
def say(word, out):
    pass


@mpi(binary="hostname", processes=2)
@task(out=FILE_OUT_STDOUT)
def hosts(out):
    pass


@timeit()
def total(values):
    return compss_wait_on(merge_reduce(add, values))


if __name__ == "__main__":
    result, seconds = total([1, 2, 3, 4, 5])
    print("reduce:", result, seconds >= 0)
    print("chunks:", list(chunks([1, 2, 3, 4, 5], 2)))
    fragments = compss_wait_on(generator((8, 3), 2, seed=1))
    print("generator:", [f.shape for f in fragments])

    try:
        with TaskGroup("checks"):
            values = [check(i) for i in range(5)]
        print("group: no exception")
    except COMPSsException as exc:
        print("group:", exc)
    with TaskGroup("later", False):
        later = [check(i) for i in range(2)]
    compss_barrier_group("later")
    print("later:", compss_wait_on(later))

    scores = {"ada": [1], "bo": []}
    grade(scores)
    print("dict:", compss_wait_on(scores))

    with open("poem.txt", "w") as f:
        f.write("a\nb\nc\n")
    print("lines:", compss_wait_on(count_lines("poem.txt")))
    parts = ["w0.txt", "w1.txt", "w2.txt"]
    split(parts, "to be sure")
    print("join:", compss_wait_on(join(parts)))
    fill("numbers", 3)
    compss_wait_on_directory("numbers")
    print("directory:", sorted(os.listdir("numbers")))
    data = [1, 2, 3]
    print("size:", compss_wait_on(size(data)))
    s = add_again(1, 2)
    print("implement:", compss_wait_on(s))
    print("deleted:", compss_delete_object(s))
    say("hello", "said.txt")
    hosts("hosts.txt")
    compss_barrier()
    with compss_open("said.txt") as f:
        print("binary:", f.read().strip())
    with compss_open("hosts.txt") as f:
        print("mpi:", len(f.read().split()))
