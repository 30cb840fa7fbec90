"""Parameter directions, as in `pycompss.api.parameter`: how a task uses each argument.

IN is the default. A direction tells the runtime which earlier tasks a call depends on (it reads
what they wrote) and which later calls depend on it (they read what it writes).
"""

from __future__ import annotations


class ParameterDirection:
    """One direction: whether the task reads and/or writes the argument, and of what kind it is."""

    def __init__(self, name: str, read: bool, write: bool, kind: str = "object", commutative: bool = False):
        self.name, self.read, self.write, self.kind, self.commutative = name, read, write, kind, commutative

    def __repr__(self) -> str:
        return self.name


IN = ParameterDirection("IN", read=True, write=False)
OUT = ParameterDirection("OUT", read=False, write=True)
INOUT = ParameterDirection("INOUT", read=True, write=True)
CONCURRENT = ParameterDirection("CONCURRENT", read=True, write=True, commutative=True)
COMMUTATIVE = ParameterDirection("COMMUTATIVE", read=True, write=True, commutative=True)
COLLECTION_IN = ParameterDirection("COLLECTION_IN", read=True, write=False, kind="collection")
COLLECTION_OUT = ParameterDirection("COLLECTION_OUT", read=False, write=True, kind="collection")
COLLECTION_INOUT = ParameterDirection("COLLECTION_INOUT", read=True, write=True, kind="collection")
FILE_IN = ParameterDirection("FILE_IN", read=True, write=False, kind="file")
FILE_OUT = ParameterDirection("FILE_OUT", read=False, write=True, kind="file")
FILE_INOUT = ParameterDirection("FILE_INOUT", read=True, write=True, kind="file")

# PyCOMPSs's dictionary form, e.g. `@task(c={Type: COLLECTION_INOUT, Depth: 2})`.
Type = "type"
Direction = "direction"
Depth = "depth"
Weight = "weight"
Keep_rename = "keep_rename"
Cache = "cache"
Prefix = "prefix"

DIRECTIONS = {d.name: d for d in (IN, OUT, INOUT, CONCURRENT, COMMUTATIVE, COLLECTION_IN, COLLECTION_OUT,
                                   COLLECTION_INOUT, FILE_IN, FILE_OUT, FILE_INOUT)}

__all__ = ["ParameterDirection", *DIRECTIONS, "Type", "Direction", "Depth", "Weight", "Keep_rename", "Cache", "Prefix"]
