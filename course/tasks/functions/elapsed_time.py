"""`@timeit` (as `pycompss.functions.elapsed_time`): a call returns [its result, the seconds it took]."""

from __future__ import annotations

import functools
import time
from typing import Any, Callable


class TimeIt:
    """Decorator: the wrapped call returns `[result, elapsed seconds]` (of the call, not of the task it submits)."""

    def __init__(self, *_args: Any, **_kwargs: Any):
        pass

    def __call__(self, function: Callable) -> Callable:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> list:
            start = time.time()
            result = function(*args, **kwargs)
            return [result, time.time() - start]

        return timed


timeit = TimeIt
TimeIT = TIMEIT = TimeIt
