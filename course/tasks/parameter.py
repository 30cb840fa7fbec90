"""Parameter directions, as in `pycompss.api.parameter`: how a task uses each argument.

IN is the default. A direction tells the runtime which earlier tasks a call depends on (it reads
what they wrote) and which later calls depend on it (they read what it writes).
"""

from __future__ import annotations


class ParameterDirection:
    """One direction: whether the task reads and/or writes the argument, and of what kind it is.

    kind: object, collection (lists; dicts for DICTIONARY_*), file, file_collection (a list of paths) or
    directory. stream: for @binary/@mpi tasks, the file is the program's STDIN, STDOUT or STDERR."""

    def __init__(
        self,
        name: str,
        read: bool,
        write: bool,
        kind: str = "object",
        commutative: bool = False,
        stream: str | None = None,
        delete: bool = False,
    ):
        self.name, self.read, self.write, self.kind, self.commutative = name, read, write, kind, commutative
        self.stream, self.delete = stream, delete

    def __repr__(self) -> str:
        return self.name


def _family(prefix: str, kind: str) -> dict[str, ParameterDirection]:
    """PREFIX (= PREFIX_IN), PREFIX_IN, PREFIX_OUT, PREFIX_INOUT of one kind."""
    return {
        f"{prefix}{suffix}": ParameterDirection(f"{prefix}{suffix}", read, write, kind)
        for suffix, read, write in (
            ("", True, False),
            ("_IN", True, False),
            ("_OUT", False, True),
            ("_INOUT", True, True),
        )
    }


IN = ParameterDirection("IN", read=True, write=False)
OUT = ParameterDirection("OUT", read=False, write=True)
INOUT = ParameterDirection("INOUT", read=True, write=True)
CONCURRENT = ParameterDirection("CONCURRENT", read=True, write=True, commutative=True)
COMMUTATIVE = ParameterDirection("COMMUTATIVE", read=True, write=True, commutative=True)
IN_DELETE = ParameterDirection("IN_DELETE", read=True, write=False, delete=True)
_FILES = _family("FILE", "file")
FILE, FILE_IN, FILE_OUT, FILE_INOUT = (_FILES[k] for k in ("FILE", "FILE_IN", "FILE_OUT", "FILE_INOUT"))
_COLLECTIONS = _family("COLLECTION", "collection")
COLLECTION, COLLECTION_IN, COLLECTION_OUT, COLLECTION_INOUT = (
    _COLLECTIONS[k] for k in ("COLLECTION", "COLLECTION_IN", "COLLECTION_OUT", "COLLECTION_INOUT")
)
COLLECTION_IN_DELETE = ParameterDirection(
    "COLLECTION_IN_DELETE", read=True, write=False, kind="collection", delete=True
)
_DICTIONARIES = _family("DICTIONARY", "collection")
DICTIONARY, DICTIONARY_IN, DICTIONARY_OUT, DICTIONARY_INOUT = (
    _DICTIONARIES[k] for k in ("DICTIONARY", "DICTIONARY_IN", "DICTIONARY_OUT", "DICTIONARY_INOUT")
)
DICTIONARY_IN_DELETE = ParameterDirection(
    "DICTIONARY_IN_DELETE", read=True, write=False, kind="collection", delete=True
)
_FILE_COLLECTIONS = _family("COLLECTION_FILE", "file_collection")
COLLECTION_FILE, COLLECTION_FILE_IN, COLLECTION_FILE_OUT, COLLECTION_FILE_INOUT = (
    _FILE_COLLECTIONS[k]
    for k in ("COLLECTION_FILE", "COLLECTION_FILE_IN", "COLLECTION_FILE_OUT", "COLLECTION_FILE_INOUT")
)
_DIRECTORIES = _family("DIRECTORY", "directory")
DIRECTORY, DIRECTORY_IN, DIRECTORY_OUT, DIRECTORY_INOUT = (
    _DIRECTORIES[k] for k in ("DIRECTORY", "DIRECTORY_IN", "DIRECTORY_OUT", "DIRECTORY_INOUT")
)

# The standard streams of a @binary/@mpi task: `{Type: FILE_OUT, StdIOStream: STDOUT}` or FILE_OUT_STDOUT.
STDIN, STDOUT, STDERR = "STDIN", "STDOUT", "STDERR"
_STREAMS = {}
for _base in ("FILE", "FILE_IN", "FILE_OUT", "FILE_INOUT"):
    for _stream in (STDIN, STDOUT, STDERR):
        _d = _FILES[_base]
        _STREAMS[f"{_base}_{_stream}"] = ParameterDirection(
            f"{_base}_{_stream}", _d.read, _d.write, "file", stream=_stream
        )
globals().update(_STREAMS)

# PyCOMPSs's dictionary form, e.g. `@task(c={Type: COLLECTION_INOUT, Depth: 2})`.
Type = "type"
Direction = "direction"
StdIOStream = "stdiostream"
Depth = "depth"
Weight = "weight"
Keep_rename = "keep_rename"
Cache = "cache"
Prefix = "prefix"

DIRECTIONS = {
    d.name: d
    for d in (
        IN,
        OUT,
        INOUT,
        CONCURRENT,
        COMMUTATIVE,
        IN_DELETE,
        COLLECTION_IN_DELETE,
        DICTIONARY_IN_DELETE,
        *_FILES.values(),
        *_COLLECTIONS.values(),
        *_DICTIONARIES.values(),
        *_FILE_COLLECTIONS.values(),
        *_DIRECTORIES.values(),
        *_STREAMS.values(),
    )
}

__all__ = [
    "ParameterDirection",
    *DIRECTIONS,
    "STDIN",
    "STDOUT",
    "STDERR",
    "Type",
    "Direction",
    "StdIOStream",
    "Depth",
    "Weight",
    "Keep_rename",
    "Cache",
    "Prefix",
]
