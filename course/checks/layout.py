"""Notebook 14 (part 5)'s check of choosing a layout: notebook 09's data x tensor x pipeline chooser with context
and expert dimensions added, Megatron-Core's order tp-cp-ep-dp-pp. The learner's `layout(model, seq, experts,
devices, gpus_per_node)` is judged by properties on cases of the check's own, never against a layout the check
computes: the sizes multiply to the devices, each within its limits (tensor parallelism inside a node, expert
parallelism carved from the data-parallel ranks), the memory per GPU by the notebook's formula within the GPU's,
and no layout the rules allow that also fits comes earlier in the notebook's order of preference.

    chosen(layout)                                        # ex-layout: -> what is wrong, or None
    chosen(layout, HIDDEN_CASES)                          # more cases, that the notebook does not show
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from course.checks import check, expect
from course.shortcuts import Watch

KEYS = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True)
class Case:
    """One question: a model (`dense_gb`, `experts_gb`: training state; `act_gb_per_1k`: activations per 1,000
    tokens of one sequence through every layer; `layers`; `gpu_gb`), a sequence length, experts, devices."""

    name: str
    model: dict = field(hash=False)
    seq: int
    experts: int
    devices: int
    gpus_per_node: int


def _model(dense_gb, experts_gb, act_gb_per_1k, layers, gpu_gb=80.0) -> dict:
    return {"dense_gb": dense_gb, "experts_gb": experts_gb, "act_gb_per_1k": act_gb_per_1k, "layers": layers,
            "gpu_gb": gpu_gb}  # fmt: skip


DENSE_7B = _model(112.0, 0.0, 1.5, 32)
MOE_8X7B = _model(21.0, 730.0, 2.0, 32)

SEVENTY_B = _model(1120.0, 0.0, 5.0, 80)

CASES = (
    Case("a 7B dense model, 4k tokens, 8 nodes of 8 GPUs", DENSE_7B, 4096, 1, 64, 8),
    Case("the 8x7B mixture of experts, 4k tokens, 8 nodes of 8 GPUs", MOE_8X7B, 4096, 8, 64, 8),
    Case("the 7B model, 512k tokens, 8 nodes of 8 GPUs", DENSE_7B, 524288, 1, 64, 8),
    Case("a 70B dense model, 4k tokens, 8 nodes of 8 GPUs", SEVENTY_B, 4096, 1, 64, 8),
    Case("the 70B model, 24k tokens, 16 nodes of 8 GPUs", SEVENTY_B, 24576, 1, 128, 8),
    Case("the 8x7B model on 4 nodes of 4 GPUs", MOE_8X7B, 4096, 8, 16, 4),
    Case("the 8x7B model on one node of 4 GPUs", MOE_8X7B, 4096, 8, 4, 4),
)
HIDDEN_CASES = (
    Case("a 30B dense model, 64k tokens, 8 nodes of 8 GPUs", _model(480.0, 0.0, 3.0, 60), 65536, 1, 64, 8),
    Case("a 175B dense model, 4k tokens, 32 nodes of 8 GPUs", _model(2800.0, 0.0, 8.0, 96), 4096, 1, 256, 8),
    Case("64 experts, 32k tokens, 8 nodes of 8 GPUs", _model(40.0, 2400.0, 2.5, 48), 32768, 64, 64, 8),
    Case("6 experts on 3 nodes of 4 GPUs", _model(12.0, 300.0, 1.0, 24, 40.0), 4096, 6, 12, 4),
    Case("the 7B model, 1M tokens, 4 nodes of 8 GPUs", DENSE_7B, 1048576, 1, 32, 8),
    Case("a 7B model on one GPU of 80 GB", DENSE_7B, 4096, 1, 1, 1),
)


def memory_gb(model: dict, seq: int, tp: int, cp: int, ep: int, pp: int) -> float:
    """The notebook's formula: the dense state cut by tp and pp, the experts' state also by ep, the activations of
    one sequence (every layer: 1F1B keeps about that much on stage 0) by tp and cp."""
    return (
        model["dense_gb"] / (tp * pp)
        + model["experts_gb"] / (ep * tp * pp)
        + model["act_gb_per_1k"] * seq / 1000 / (tp * cp)
    )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _allowed(case: Case):
    """Every layout the rules allow for `case` (fitting or not), as dicts."""
    for tp in _divisors(case.gpus_per_node):
        for cp in _divisors(case.devices // tp) if case.devices % tp == 0 else []:
            for pp in _divisors(case.devices // (tp * cp)):
                if case.model["layers"] % pp:
                    continue
                dp = case.devices // (tp * cp * pp)
                for ep in _divisors(math.gcd(case.experts, dp)):
                    yield {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp}


def _fits(case: Case, got: dict) -> bool:
    return memory_gb(case.model, case.seq, got["tp"], got["cp"], got["ep"], got["pp"]) <= case.model["gpu_gb"]


def _order(got: dict) -> tuple:
    """The notebook's preference: fewest GPUs per model copy, then fewest stages, then least cp, then most ep."""
    return (got["tp"] * got["cp"] * got["pp"], got["pp"], got["cp"], -got["ep"])


def _earlier(mine: dict, other: dict) -> str:
    """Why `other` comes before `mine` in the order of preference, in words."""
    if other["tp"] * other["cp"] * other["pp"] < mine["tp"] * mine["cp"] * mine["pp"]:
        return "fewer GPUs hold one copy of the model (more data parallelism)"
    if other["pp"] < mine["pp"]:
        return "as many GPUs per copy with fewer pipeline stages"
    if other["cp"] < mine["cp"]:
        return "as many GPUs per copy and stages with less context parallelism"
    return "the same otherwise with the experts spread over more ranks"


def _ask(layout, case: Case) -> tuple[object, bool]:
    """The learner's layout for `case` and whether it raised ValueError; refused if it calls the check's own search."""
    got, raised = None, False
    with Watch((_allowed, _fits, _order, _earlier, _divisors)) as seen:
        try:
            got = layout(dict(case.model), case.seq, case.experts, case.devices, case.gpus_per_node)
        except ValueError:
            raised = True
    expect(not seen.called, f"your layout calls {seen.called[0] if seen.called else ''}, this check's own search: "
           "write the search yourself (memory_gb, the notebook's formula, you may call)")  # fmt: skip
    return got, raised


def _one(layout, case: Case) -> None:
    fitting = [a for a in _allowed(case) if _fits(case, a)]
    said = f"{case.name} (devices={case.devices}, gpus_per_node={case.gpus_per_node}, experts={case.experts}, seq={case.seq})"
    got, raised = _ask(layout, case)
    if not fitting:
        expect(raised, f"{said}: no layout the rules allow fits in {case.model['gpu_gb']:g} GB, yet you "
               f"returned {got}; raise ValueError")  # fmt: skip
        return
    expect(got is not None, f"{said}: you raised ValueError (or returned None), but a layout the rules allow fits")
    expect(isinstance(got, dict) and set(got) == set(KEYS), f"{said}: return a dict with the keys {', '.join(KEYS)}")
    expect(
        all(isinstance(got[k], int) and not isinstance(got[k], bool) and got[k] >= 1 for k in KEYS),
        f"{said}: every size is a positive integer, not {got}",
    )
    product = got["tp"] * got["cp"] * got["dp"] * got["pp"]
    expect(product == case.devices, f"{said}: tp x cp x dp x pp = {product}, not the {case.devices} devices (ep is "
           "carved from the data-parallel ranks: it is not a factor of its own)")  # fmt: skip
    expect(case.gpus_per_node % got["tp"] == 0, f"{said}: tp = {got['tp']} does not divide a node's "
           f"{case.gpus_per_node} GPUs: tensor parallelism stays inside a node")  # fmt: skip
    expect(case.model["layers"] % got["pp"] == 0, f"{said}: pp = {got['pp']} stages do not divide the "
           f"{case.model['layers']} layers")  # fmt: skip
    expect(case.experts % got["ep"] == 0 and got["dp"] % got["ep"] == 0, f"{said}: ep = {got['ep']} must divide "
           f"the {case.experts} experts and the {got['dp']} data-parallel ranks it is carved from")  # fmt: skip
    need = memory_gb(case.model, case.seq, got["tp"], got["cp"], got["ep"], got["pp"])
    expect(need <= case.model["gpu_gb"], f"{said}: {got} needs {need:.1f} GB per GPU by the notebook's formula, "
           f"more than the GPU's {case.model['gpu_gb']:g}")  # fmt: skip
    better = [a for a in fitting if _order(a) < _order(got)]
    expect(not better, f"{said}: {got} fits, but a layout that fits too comes first in the order of preference: "
           f"{_earlier(got, min(better, key=_order)) if better else ''}")  # fmt: skip


@check
def chosen(layout, cases: tuple[Case, ...] = CASES) -> None:
    """On each case: the sizes multiply to the devices, each within its limits, the layout fits by the notebook's
    formula, and none that also fits comes earlier in its order of preference (or ValueError where none fits)."""
    for case in cases:
        _one(layout, case)
