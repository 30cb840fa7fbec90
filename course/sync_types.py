"""The synchronisation names of parameter averaging (sync, async, full-async): the one table of their spellings.

`course.averaging` trains with them, `course.results` records them, `python -m course train --sync` accepts
them; all three read this table. A small module of its own, so the command line can list the names without
importing NumPy and the task runtime.
"""

from __future__ import annotations

from course import UserError

# Each strategy, then the other spellings accepted for it. The first alias is the number the DeepHealth HPC lab's
# run script gives it (--sync_type 0, 1, 2).
SYNC_NAMES: dict[str, tuple[str, ...]] = {
    "sync": ("0",),
    "async": ("1", "relaxed"),
    "full-async": ("2", "full_async", "fullasync", "none"),
}
STRATEGIES = tuple(SYNC_NAMES)
ALIASES = {alias: name for name, aliases in SYNC_NAMES.items() for alias in aliases}
LAB_NUMBERS = {aliases[0]: name for name, aliases in SYNC_NAMES.items()}  # {"0": "sync", "1": "async", ...}
VALID = f"{', '.join(STRATEGIES)} (or {', '.join(LAB_NUMBERS)} as in the DeepHealth lab)"  # for help and errors


def strategy_name(sync: str | int) -> str:
    """The strategy for a --sync value: sync, async, full-async, an alias, or the lab's run-script numbers 0, 1, 2."""
    key = str(sync).strip().lower()
    key = ALIASES.get(key, key)
    if key not in STRATEGIES:
        raise UserError(f"unknown sync type {sync!r}; valid: {VALID}")
    return key
