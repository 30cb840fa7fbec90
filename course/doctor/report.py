"""The doctor's report: one line per check, problems last with what to do; the exit status from the essentials."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Check:
    """One line of the report; `essential` checks decide the exit status."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    essential: bool = True
    facts: dict = field(default_factory=dict)


def report(checks: list[Check]) -> str:
    """The human-readable report, problems last with what to do."""
    lines = ["Distributed Deep Learning on HPC - environment report"]
    for c in checks:
        mark = "ok  " if c.ok else ("FAIL" if c.essential else "note")
        lines.append(f"  {mark}  {c.name:<12} {c.detail}")
    problems = [c for c in checks if not c.ok and c.fix]
    if problems:
        lines.append("What to do:")
        lines += [f"  - {c.name}: {c.fix}" for c in problems]
    lines.append("Essentials work." if all_essentials_ok(checks) else "Some essentials are broken (FAIL above).")
    return "\n".join(lines)


def all_essentials_ok(checks: list[Check]) -> bool:
    return all(c.ok for c in checks if c.essential)
