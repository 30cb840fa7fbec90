"""Notebook 14 (part 5)'s checks of a mixture of experts written by hand: the learner's routing (top-k experts of
each token, their gates, the capacity per expert in GShard's priority order) checked by its properties on cases of
the check's own; the expert-parallel layer run on every rank of a gloo group, measured from outside (what each
all-to-all sent to each rank, which tokens each expert ran on and where, the output against one process's mixture
of experts); and the Switch Transformer's load-balancing loss against hand-worked values and its gradient.

    experts.routing(route)                                                      # ex-route: -> what is wrong, or None
    runs, problem = deadline.gather(view, experts.moe_run, moe_forward, route)  # on the engines
    problem or experts.expert_parallel(runs)                                    # ex-moe
    experts.balance(balance_loss, route)                                        # ex-balance
"""

from __future__ import annotations

from course.checks import check, expect, lent

D, HIDDEN, E, TOKENS = 8, 16, 12, 16  # E = 12 experts: 6, 4 or 3 on each of 2, 3 or 4 ranks
UNUSED = 5  # the expert the router is biased against in the layer's cases: it receives no token
TOLERANCE = 1e-10  # float64: the layer and one process's mixture of experts differ only by rounding
GROUP_TIMEOUT = 20  # s a rank waits for its peer in the layer's group: a wrong answer fails within the deadline
MOE_CASES = ((1, TOKENS), (1, 2), (2, 3))  # (k, capacity): no token dropped, then some dropped with k = 1 and 2
ROW_BYTES = D * 8  # one token's row, float64
ID_BYTES, COUNT_BYTES = 8, 64  # allowed besides the rows: an int64 expert id per row sent, 64 bytes of counts
# (other collectives: at most 8 p^2 bytes, an all-gather of every rank's int64 counts)


def logits(seed: int, tokens: int, experts: int, unused: int | None = None):
    """Router logits without ties (distinct random values), expert `unused` pushed far below the others."""
    import torch

    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(tokens, experts, generator=g, dtype=torch.float64) * 2
    if unused is not None:
        scores[:, unused] -= 40
    return scores


def route_cases() -> list[tuple[str, object, int, int]]:
    """(what it is, logits, k, capacity): k = 1 and 2, with room for every token and over capacity, an expert no
    token chooses, and a skewed router whose favourite is over capacity with first and second choices both."""
    skewed = logits(3, 12, 4)
    skewed[:, 2] += 1.5  # expert 2: the first choice of many tokens and the second choice of others
    return [
        ("k = 1, room for every token", logits(1, 10, 4), 1, 10),
        ("k = 2, room for every assignment", logits(2, 10, 5), 2, 20),
        ("k = 1, capacity 2", logits(4, 12, 4), 1, 2),
        ("k = 2, capacity 3", skewed, 2, 3),
        ("k = 2, capacity 4, expert 1 chosen by no token", logits(5, 9, 5, unused=1), 2, 4),
        ("k = 1, capacity 1, one token", logits(6, 1, 3), 1, 1),
    ]


def _route_problem(route, scores, k: int, capacity: int, case: str) -> None:
    """Expect the properties of a routing of `scores`, logits (tokens x experts), with `k` and `capacity`."""
    import torch

    tokens, n = scores.shape
    got = route(scores.clone(), k, capacity)
    expect(isinstance(got, tuple) and len(got) == 3, f"{case}: route returned {type(got).__name__}, not a 3-tuple")
    chosen, gates, kept = (torch.as_tensor(t) for t in got)
    for name, t in (("experts", chosen), ("gates", gates), ("kept", kept)):
        expect(
            tuple(t.shape) == (tokens, k), f"{case}: {name} has shape {tuple(t.shape)}, not (tokens, k) = {(tokens, k)}"
        )
    chosen = chosen.long()
    expect(bool(((chosen >= 0) & (chosen < n)).all()), f"{case}: experts holds ids outside 0..{n - 1}")
    probs = torch.softmax(scores, dim=-1)
    picked = probs.gather(1, chosen)
    for t in range(tokens):
        ids = chosen[t].tolist()
        expect(len(set(ids)) == k, f"{case}: token {t} chose experts {ids}: the same expert twice")
        others = [probs[t, e].item() for e in range(n) if e not in ids]
        order = picked[t].tolist()
        expect(
            all(a > b for a, b in zip(order, order[1:])) and all(order[-1] > o for o in others),
            f"{case}: token {t}'s experts {ids} are not its {k} most probable, most probable first",
        )
    expect(
        torch.allclose(gates.double(), picked, rtol=0, atol=1e-12),
        f"{case}: the gates are not the chosen experts' router probabilities (softmax over all experts, as they "
        "are: not renormalised over the k chosen)",
    )
    kept = kept.bool()
    for e in range(n):
        order = [(t, j) for j in range(k) for t in range(tokens) if chosen[t, j] == e]  # first choices, then second
        want = order[:capacity]
        got_kept = [(t, j) for t, j in order if kept[t, j]]
        expect(
            got_kept == want,
            f"{case}: expert {e} was chosen {len(order)} times and keeps {len(got_kept)} assignments "
            f"(token, choice) {got_kept}; it keeps at most {capacity}, all first choices in token order before any "
            "second choice",
        )


@check
def routing(route, cases: list | None = None) -> None:
    """The experts each token chose, top-k in order; gates their softmax probabilities; the kept assignments of
    each expert the first `capacity` in GShard's priority order; on `cases` (what, logits, k, capacity), by default
    route_cases()."""
    for case, scores, k, capacity in route_cases() if cases is None else cases:
        _route_problem(route, scores, k, capacity, case)


# ---- the expert-parallel layer


def router():
    """The layer's router, Linear(D, E) in float64, biased against expert UNUSED; the same wherever it is made."""
    import torch

    torch.manual_seed(0)
    linear = torch.nn.Linear(D, E).double()
    with torch.no_grad():
        linear.bias[UNUSED] -= 40
    return linear


def expert_modules() -> list:
    """The E experts, each Linear(D, HIDDEN), tanh, Linear(HIDDEN, D), float64; the same wherever they are made."""
    import torch

    torch.manual_seed(1)
    return [
        torch.nn.Sequential(torch.nn.Linear(D, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, D)).double()
        for _ in range(E)
    ]


def tokens(rank: int):
    """Rank `rank`'s TOKENS tokens of D features."""
    import torch

    return torch.randn(TOKENS, D, generator=torch.Generator().manual_seed(100 + rank), dtype=torch.float64)


def owner(expert: int, size: int) -> int:
    """The rank that holds expert `expert` of E on `size` ranks: E / size consecutive experts each."""
    return expert // (E // size)


def _splits_problem(table: list[list[int]], size: int) -> str | None:
    """What is wrong with one all_to_all_single's split sizes over the group, from every rank's (bad length, input
    rows, output rows, input row size, output row size, input splits..., output splits...): None if they agree."""
    for a, (bad, rows_in, rows_out, row_in, row_out, *splits) in enumerate(table):
        sent, got = splits[:size], splits[size:]
        if bad:
            return f"on rank {a}, all_to_all_single's split sizes do not name one count for each of the {size} ranks"
        if sum(sent) != rows_in:
            return f"on rank {a}, all_to_all_single's input_split_sizes add up to {sum(sent)}, its input has {rows_in} rows"
        if sum(got) != rows_out:
            return f"on rank {a}, all_to_all_single's output_split_sizes add up to {sum(got)}, its output has {rows_out} rows"
        if rows_in and rows_out and row_in != row_out:
            return f"on rank {a}, all_to_all_single's input rows hold {row_in} values and its output rows {row_out}"
    for a in range(size):
        for b in range(size):
            sends, expects = table[a][5 + b], table[b][5 + size + a]
            if sends != expects:
                return (
                    f"rank {b} expects {expects} rows from rank {a} (its output_split_sizes), but rank {a} sends it "
                    f"{sends} (its input_split_sizes): a rank learns what it receives from the others"
                )
    return None


def _checked_all_to_all(seen, given):
    """Make dist.all_to_all_single refuse a group other than `given` (the layer's), then compare the split sizes of
    every rank of its group (gloo aborts the process on a mismatch), raising ValueError on every rank if they
    disagree; the comparison's own all-gather is left out of `seen`. Returns a function that puts the original
    back."""
    import math

    import torch
    import torch.distributed as dist

    original = dist.all_to_all_single

    def checked(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
        if group is not given:
            raise ValueError("all_to_all_single ran on another group than the one the layer was given: pass it group")
        size = dist.get_world_size(group)

        def splits(asked, t):
            asked = [int(n) for n in (asked or [])] or [len(t) // size] * size
            return asked, len(asked) != size

        sent, bad_sent = splits(input_split_sizes, input)
        got, bad_got = splits(output_split_sizes, output)
        mine = [int(bad_sent or bad_got), len(input), len(output), math.prod(input.shape[1:]),
                math.prod(output.shape[1:]), *(sent + [0] * size)[:size], *(got + [0] * size)[:size]]  # fmt: skip
        marks = len(seen.seen), len(seen.groups), len(seen.sent)
        table = [torch.zeros(len(mine), dtype=torch.long) for _ in range(size)]
        dist.all_gather(table, torch.tensor(mine, dtype=torch.long), group=group)
        del seen.seen[marks[0] :], seen.groups[marks[1] :], seen.sent[marks[2] :]
        problem = _splits_problem([t.tolist() for t in table], size)
        if problem:
            raise ValueError(problem)
        return original(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)

    dist.all_to_all_single = checked
    return lambda: setattr(dist, "all_to_all_single", original)


def moe_run(moe_forward, route, cases=MOE_CASES) -> list[dict]:
    """On every rank, for each (k, capacity) of `cases`: the learner's routing of this rank's tokens, then
    `moe_forward(x, router, experts, k, capacity, group)` with this rank's experts on a gloo group of the check's
    own; what it returned, what each all-to-all sent to each rank, the other collectives, and the rows each of this
    rank's experts ran on (forward hooks)."""
    import datetime

    import torch
    import torch.distributed as dist

    from course.torch_collectives import Collectives

    rank, size = dist.get_rank(), dist.get_world_size()
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=GROUP_TIMEOUT))
    runs = []
    try:
        for k, capacity in cases:
            run = {"rank": rank, "size": size, "k": k, "capacity": capacity, "error": None}
            runs.append(run)
            gate, modules, x = router(), expert_modules(), tokens(rank)
            with torch.no_grad():
                routed = route(gate(x), k, capacity)
            run["route"] = [torch.as_tensor(t).tolist() for t in routed]
            ran: list = []
            mine = {e: modules[e] for e in range(E) if owner(e, size) == rank}
            for e, m in mine.items():
                m.register_forward_hook(lambda _m, args, _out, e=e: ran.append((e, rank, args[0].tolist())))
            dist.barrier(group)
            seen = Collectives()
            restore = _checked_all_to_all(seen, group)
            try:
                with torch.no_grad(), seen, lent(moe_forward, route=route):  # the layer calls `route` by name
                    out = moe_forward(x, gate, mine, k, capacity, group)
            except Exception as failed:  # noqa: BLE001 - the learner's layer failing is what the check tells
                run["error"] = f"{type(failed).__name__}: {str(failed).splitlines()[0][:300] if str(failed) else ''}"
                break
            finally:
                restore()
            run["out"] = torch.as_tensor(out).tolist()
            run["sent"], run["seen"], run["ran"] = list(seen.sent), list(seen.seen), ran
    finally:
        dist.destroy_process_group(group)
    return runs


def one_process(route_of_rank: list, size: int) -> list:
    """The mixture of experts of one process over every rank's tokens, given each rank's routing
    (experts, gates, kept): each token's output, the gate-weighted sum of its kept experts' outputs (zero if none)."""
    import torch

    modules = expert_modules()
    outs = []
    with torch.no_grad():
        for rank in range(size):
            x = tokens(rank)
            chosen, gates, kept = route_of_rank[rank]
            y = torch.zeros_like(x)
            for t in range(len(x)):
                for j in range(len(chosen[t])):
                    if kept[t][j]:
                        y[t] += float(gates[t][j]) * modules[int(chosen[t][j])](x[t : t + 1])[0]
            outs.append(y)
    return outs


def predicted_bytes(route_of_rank: list, size: int) -> dict[tuple[int, int], int]:
    """(from rank, to rank) -> the bytes of token rows the layer sends, the routing says: the kept assignments of the
    sender's tokens to the receiver's experts (dispatch), and of the receiver's tokens to the sender's (combine)."""
    rows = {(a, b): 0 for a in range(size) for b in range(size)}
    for rank, (chosen, _gates, kept) in enumerate(route_of_rank):
        for t, row in enumerate(chosen):
            for j, e in enumerate(row):
                if kept[t][j]:
                    rows[(rank, owner(int(e), size))] += 1
    return {(a, b): (rows[(a, b)] + rows[(b, a)]) * ROW_BYTES for a, b in rows if a != b}


def tokens_per_expert(route_of_rank: list) -> list[int]:
    """How many assignments each expert was chosen for over every rank, before the capacity."""
    counts = [0] * E
    for chosen, _gates, _kept in route_of_rank:
        for row in chosen:
            for e in row:
                counts[int(e)] += 1
    return counts


def measured_bytes(runs: list[dict]) -> dict[tuple[int, int], int]:
    """(from rank, to rank) -> the bytes every all-to-all and send of one case's run sent, as recorded."""
    size = len(runs)
    sent = {(a, b): 0 for a in range(size) for b in range(size) if a != b}
    for r in runs:
        for to, n in r["sent"]:
            sent[(r["rank"], to)] += n
    return sent


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def case_runs(runs: list[list[dict]]) -> list[list[dict]]:
    """The gathered runs (by rank, then case) as one list of the ranks' runs per case."""
    return [list(case) for case in zip(*runs)]


def _experts_ran(case: list[dict], routed: list, size: int, said: str) -> None:
    """Expect each expert to have run on its owner rank, on exactly the rows of the kept tokens routed to it."""
    ran: dict[int, list] = {e: [] for e in range(E)}
    for r in case:
        for e, where, rows in r["ran"]:
            expect(where == owner(e, size), f"{said}: expert {e} ran on rank {where}, not on its owner")
            ran[e] += [tuple(row) for row in rows]
    for e in range(E):
        routed_rows = [
            tuple(tokens(rank)[t].tolist())
            for rank, (chosen, _gates, kept) in enumerate(routed)
            for t in range(len(chosen))
            for j in range(len(chosen[t]))
            if chosen[t][j] == e and kept[t][j]
        ]
        expect(
            sorted(ran[e]) == sorted(routed_rows),
            f"{said}: expert {e} ran on {len(ran[e])} token(s); the routing sends it {len(routed_rows)} "
            "kept one(s) from all ranks (each token to the expert it chose, dropped ones to none)",
        )


def _outputs(case: list[dict], routed: list, size: int, said: str) -> None:
    """Expect every rank's output to be one process's mixture of experts of its tokens."""
    import torch

    want = one_process(routed, size)
    for r in case:
        got = torch.tensor(r["out"], dtype=torch.float64)
        expect(
            tuple(got.shape) == (TOKENS, D),
            f"{said}: rank {r['rank']}'s output has shape {tuple(got.shape)}, not its tokens' {(TOKENS, D)}",
        )
        gap = (got - want[r["rank"]]).abs().max().item()
        expect(
            gap <= TOLERANCE,
            f"{said}: rank {r['rank']}'s output differs from one process's mixture of experts by {gap:.2e} (each "
            "token: the sum of its kept experts' outputs, each weighted by that expert's gate)",
        )


def _traffic(case: list[dict], routed: list, size: int, said: str) -> None:
    """Expect the all-to-alls to have sent each other rank the rows the routing gives it (and ids and counts at
    most), and no other collective more than an all-gather of the counts."""
    for r in case:
        big = [(kind, n) for kind, n in r["seen"] if kind != "all_to_all" and n > 8 * size * size]
        expect(
            not big,
            f"{said}: rank {r['rank']} ran {big and _a(big[0][0].replace('_', '-'))} of {big and big[0][1]} bytes: "
            "tokens travel to their experts' ranks by all-to-all only",
        )
    measured, predicted = measured_bytes(case), predicted_bytes(routed, size)
    for (a, b), rows in sorted(predicted.items()):
        chosen, _gates, kept = routed[a]
        dispatched = sum(
            1 for t, row in enumerate(chosen) for j, e in enumerate(row) if kept[t][j] and owner(int(e), size) == b
        )
        allowed = rows + ID_BYTES * dispatched + COUNT_BYTES
        expect(
            rows <= measured[(a, b)] <= allowed,
            f"{said}: rank {a} sent rank {b} {measured[(a, b)]} bytes by all-to-all; its kept tokens for rank "
            f"{b}'s experts and rank {b}'s tokens' results back are {rows} bytes of rows (each of {ROW_BYTES}), "
            f"with expert ids and counts at most {allowed}",
        )


@check
def expert_parallel(runs: list[list[dict]]) -> None:
    """`runs`: moe_run on every rank. Each case: the layer ran; each expert ran on its owner rank, on exactly the
    tokens routed to it and kept; the output is one process's mixture of experts over the same tokens and routing;
    the all-to-alls sent each other rank the kept rows the routing says (and little else)."""
    size = len(runs)
    lost = [r for rank_runs in runs for r in rank_runs if r["error"]]
    lost.sort(key=lambda r: "Connection closed" in r["error"] or "imeout" in r["error"])
    expect(not lost, f"k = {lost and lost[0]['k']}: on rank {lost and lost[0]['rank']}, {lost and lost[0]['error']}")
    for case in case_runs(runs):
        said = f"k = {case[0]['k']}, capacity {case[0]['capacity']}, {size} ranks"
        routed = [r["route"] for r in case]
        _experts_ran(case, routed, size, said)
        _outputs(case, routed, size, said)
        _traffic(case, routed, size, said)


# ---- the load-balancing loss


def balance_cases() -> list[tuple[str, object, object, float]]:
    """(what it is, probs, experts, the loss worked by hand)."""
    import torch

    uniform = torch.full((8, 4), 0.25, dtype=torch.float64)
    spread = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [1, 3], [2, 0], [3, 1]])
    one = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    hand = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.8, 0.2]], dtype=torch.float64)
    skew = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.45, 0.15, 0.4]], dtype=torch.float64)
    return [
        ("uniform probabilities, first choices spread evenly over 4 experts", uniform, spread, 1.0),
        ("every token to expert 0 with probability 1, 3 experts", one, torch.tensor([[0, 1], [0, 1], [0, 2]]), 3.0),
        ("the notebook's worked case", hand, torch.tensor([[0], [0], [1], [0]]), 1.15),
        # f = (2/3, 1/3, 0) from first choices; P = (0.35, 0.35, 0.3): 3 * (2/3 * 0.35 + 1/3 * 0.35) = 1.05
        ("3 tokens, 3 experts, k = 2", skew, torch.tensor([[0, 1], [1, 2], [0, 2]]), 1.05),
    ]


def _loss_and_grad(balance_loss, probs, chosen):
    import torch

    p = probs.clone().requires_grad_(True)
    loss = balance_loss(p, chosen.clone())
    expect(isinstance(loss, torch.Tensor) and loss.numel() == 1, "balance_loss must return a one-element tensor")
    expect(loss.requires_grad, "the loss does not depend on probs differentiably: no gradient reaches the router")
    (grad,) = torch.autograd.grad(loss.reshape(()), p, allow_unused=True)
    expect(grad is not None, "the loss does not depend on probs differentiably: no gradient reaches the router")
    return float(loss.detach()), grad


@check
def balance(balance_loss, route, cases: list | None = None) -> None:
    """The loss on hand-worked `cases` (what, probs, experts, loss), by default balance_cases(); its gradient with
    respect to probs is E f_i / T for every token (f counted, not differentiated), on the cases and on the routing
    of the layer's tokens on 4 ranks (the learner's `route`, k = 2)."""
    import torch

    cases = balance_cases() if cases is None else cases
    for case, probs, chosen, want in cases:
        loss, _ = _loss_and_grad(balance_loss, probs, chosen)
        expect(abs(loss - want) <= 1e-12, f"{case}: the loss is {loss:.6g}, not {want:g}")
    gate = router()
    with torch.no_grad():
        scores = torch.cat([gate(tokens(rank)) for rank in range(4)])
    chosen = torch.as_tensor(route(scores.clone(), 2, 2 * TOKENS)[0]).long()
    probs = torch.softmax(scores, dim=-1)
    for case, probs, chosen in [*[(c, p, x) for c, p, x, _ in cases], ("the layer's tokens", probs, chosen)]:
        loss, grad = _loss_and_grad(balance_loss, probs, chosen)
        n, experts = probs.shape
        f = torch.bincount(chosen[:, 0], minlength=experts).double() / n
        expect(
            torch.allclose(grad, (experts * f / n).expand(n, experts), rtol=0, atol=1e-12),
            f"{case}: the gradient with respect to probs is not E f_i / T for each token and expert i: f (first "
            "choices, counted) is a constant of the loss, and P_i the mean of every token's probability",
        )
        expect(
            abs(loss - float((grad * probs).sum())) <= 1e-12,
            f"{case}: the loss is {loss:.6g}, not E sum_i f_i P_i ({float((grad * probs).sum()):.6g})",
        )
