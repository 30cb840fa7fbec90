"""Mutants of an answer cell's solution code, made with `ast`: what the mutation report runs against the checks.

Only the code between `### BEGIN SOLUTION` and `### END SOLUTION` is mutated (the rest of the cell is what a
learner is given). Each operator looks at one node of that code and offers its changes:

- `operator`: an arithmetic, comparison or boolean operator swapped (`+` -> `-`, `<` -> `<=`, `and` -> `or`);
- `constant`: a number, a flag or a string changed (`1` -> `2`, `True` -> `False`, `"a"` -> `"a?"`);
- `statement`: a statement removed;
- `keyword`: a keyword argument dropped (the function's default used instead);
- `rank`: a condition on the rank made always true (`if rank == 0:` -> `if True:`: every rank does it);
- `local`: a collective, an engine or a task call replaced by local computation (`view.apply_sync(f, x)` ->
  `f(x)`, `comm.Allreduce(a, b)` -> `b[...] = a`, `@task` removed, `strategy.run(f, args=a)` -> `f(*a)`);
- `gather`: an exchange replaced by a gather of everything (`comm.Sendrecv(s, dest, recvbuf=r, source=src)` ->
  `r[...] = comm.allgather(s)[src]`; an all-reduce summed from an all-gather);
- `record`: two fields of a record (a dict literal) given each other's values.

A mutant that cannot change what a learner is marked on is kept apart, with the reason (`Mutant.equivalent`).
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
OPERATORS = ("local", "gather", "rank", "record", "keyword", "statement", "operator", "constant")
Edit = Callable[[ast.AST, dict], None]  # changes a node of a fresh parse in place (given its parents)

_SWAPS = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.MatMult: ast.Mult, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
    ast.LShift: ast.RShift, ast.RShift: ast.LShift, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE,
    ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot,
    ast.IsNot: ast.Is, ast.And: ast.Or, ast.Or: ast.And,
}  # fmt: skip
_RANK = re.compile(r"rank|\broot\b")
_APPLY = {"apply_sync", "apply", "apply_async"}  # an engine view's: view.apply_sync(f, *args) runs f on the engines
_MAP = {"map_sync", "map_async"}
_TO_FIRST = {"allreduce", "bcast", "reduce", "broadcast", "experimental_distribute_dataset", "DistributedOptimizer"}
_TO_LIST = {"allgather", "gather"}
_BUFFERS = {"Allreduce", "Reduce"}  # (sendbuf, recvbuf, ...): the result lands in recvbuf
_COMMUNICATORS = re.compile(r"comm|COMM|world|hvd|strategy")


@dataclass
class Mutant:
    """One change to one solution region of an answer cell, and the cell it makes."""

    exercise: str  # the answer cell's grade_id
    operator: str  # one of OPERATORS
    what: str  # the change, in words
    region: int  # which BEGIN/END SOLUTION region of the cell (0, 1, ...)
    site: int  # the statement it changes (its index in ast.walk of the region), for the reachability probe
    source: str = ""  # the whole mutated cell
    diff: str = ""  # the region's lines that changed, - then +
    equivalent: str = ""  # why it cannot change what a learner is marked on ('' if it can)
    outcome: dict = field(default_factory=dict)  # filled in by the report's run

    @property
    def trial(self) -> dict[str, str]:
        """The answer cells this mutant writes: grade_id -> source."""
        return {self.exercise: self.source}

    @property
    def key(self) -> str:
        return hashlib.sha1(f"{self.exercise}|{self.region}|{self.diff}".encode()).hexdigest()[:10]


def regions(source: str) -> list[tuple[int, int, str]]:
    """(BEGIN line, END line, indentation) of each solution region of a cell's SOURCE."""
    lines, found, start = source.split("\n"), [], None
    for number, line in enumerate(lines):
        if line.strip() == BEGIN:
            start = number
        elif line.strip() == END and start is not None:
            found.append((start, number, lines[start][: len(lines[start]) - len(lines[start].lstrip())]))
            start = None
    return found


def region_code(source: str, region: tuple[int, int, str]) -> str:
    """The code of REGION of SOURCE, dedented to the left margin."""
    start, end, indent = region
    return "\n".join(
        line[len(indent) :] if line.startswith(indent) else line.lstrip()
        for line in source.split("\n")[start + 1 : end]
    )


def with_region(source: str, region: tuple[int, int, str], code: str) -> str:
    """SOURCE with REGION's code replaced by CODE (indented as the region was)."""
    start, end, indent = region
    lines = source.split("\n")
    body = [indent + line if line else line for line in code.split("\n")]
    return "\n".join(lines[: start + 1] + body + lines[end:])


def _parents(tree: ast.AST) -> dict:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _site(node: ast.AST, parents: dict, nodes: list) -> int:
    while not isinstance(node, ast.stmt) and node in parents:
        node = parents[node]
    return nodes.index(node) if isinstance(node, ast.stmt) else -1


def _replace(parents: dict, node: ast.AST, new) -> None:
    """Put NEW (a node, or a list of statements) where NODE is in its parent."""
    parent = parents[node]
    for name, value in ast.iter_fields(parent):
        if value is node:
            setattr(parent, name, new)
            return
        if isinstance(value, list) and any(v is node for v in value):
            at = next(i for i, v in enumerate(value) if v is node)
            value[at : at + 1] = new if isinstance(new, list) else [new]
            if not value and name in ("body", "finalbody"):
                value.append(ast.Pass())  # a block needs a statement
            return


def _expr(code: str) -> ast.expr:
    return ast.parse(code, mode="eval").body


def _is_docstring(node: ast.AST, parents: dict) -> bool:
    expr = parents.get(node)
    holder = parents.get(expr)
    return (
        isinstance(expr, ast.Expr)
        and isinstance(holder, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and holder.body[0] is expr
        and isinstance(node, ast.Constant)
        and isinstance(node.value, str)
    )


def _in_print(node: ast.AST, parents: dict) -> bool:
    """Whether NODE is (in) an argument of a print call, or is one."""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "print":
            return node is not parent.func
        node = parent
    return False


def _method(node: ast.AST) -> tuple[str, str] | None:
    """(receiver's source, method name) of a call `receiver.method(...)`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return ast.unparse(node.func.value), node.func.attr
    return None


# Each operator: node, parents -> (what, edit) for each change it offers at that node.


def op_operator(node: ast.AST, parents: dict) -> Iterator[tuple[str, Edit]]:
    if isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)) and type(node.op) in _SWAPS:
        new = _SWAPS[type(node.op)]

        def swap(n, _p, new=new):
            n.op = new()

        yield f"{_symbol(node.op)} -> {_symbol(new())}", swap
    if isinstance(node, ast.Compare):
        for k, op in enumerate(node.ops):
            if type(op) in _SWAPS:
                new = _SWAPS[type(op)]

                def swap_cmp(n, _p, k=k, new=new):
                    n.ops[k] = new()

                yield f"{_symbol(op)} -> {_symbol(new())}", swap_cmp
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        yield f"{_symbol(node.op)} removed", lambda n, p: _replace(p, n, n.operand)


def _symbol(op: ast.AST) -> str:
    """How Python writes OP: `+`, `<=`, `and`, `not`..."""
    if isinstance(op, ast.boolop):
        return ast.unparse(ast.BoolOp(op, [ast.Name("a"), ast.Name("b")]))[2:-2]
    if isinstance(op, ast.unaryop):
        return "unary -" if isinstance(op, ast.USub) else "not"
    if isinstance(op, ast.cmpop):
        return ast.unparse(ast.Compare(ast.Name("a"), [op], [ast.Name("b")]))[2:-2]
    return ast.unparse(ast.BinOp(ast.Name("a"), op, ast.Name("b")))[2:-2]


def op_constant(node: ast.AST, parents: dict) -> Iterator[tuple[str, Edit]]:
    if not isinstance(node, ast.Constant) or node.value is None or node.value is Ellipsis:
        return
    value = node.value
    if isinstance(value, bool):
        new = not value
    elif isinstance(value, int):
        new = value + 1
    elif isinstance(value, float):
        new = value * 2 if value else 1.0
    elif isinstance(value, str):
        if isinstance(parents.get(node), ast.JoinedStr) or isinstance(parents.get(parents.get(node)), ast.JoinedStr):
            new = value + "?"
        else:
            new = value + "?" if value else "?"
    else:
        return

    def change(n, _p, new=new):
        n.value = new

    yield f"{value!r} -> {new!r}", change


def op_statement(node: ast.AST, parents: dict) -> Iterator[tuple[str, Edit]]:
    skip = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Pass)
    if not isinstance(node, ast.stmt) or isinstance(node, skip + (ast.Global, ast.Nonlocal)):
        return
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return  # a docstring or a bare constant: nothing to remove
    first = ast.unparse(node).split("\n")[0]
    yield f"`{first[:60]}` removed", lambda n, p: _replace(p, n, [])


def op_keyword(node: ast.AST, parents: dict) -> Iterator[tuple[str, Edit]]:
    if isinstance(node, ast.Call):
        for k, keyword in enumerate(node.keywords):
            if keyword.arg is not None:

                def drop(n, _p, k=k):
                    del n.keywords[k]

                yield f"keyword `{keyword.arg}=` dropped", drop


def op_rank(node: ast.AST, parents: dict) -> Iterator[tuple[str, Edit]]:
    if isinstance(node, (ast.If, ast.IfExp, ast.While)) and _RANK.search(ast.unparse(node.test)):
        if isinstance(node, ast.While):
            return

        def always(n, _p):
            n.test = ast.Constant(True)

        yield f"`{ast.unparse(node.test)}` made always true", always


def op_local(node: ast.AST, parents: dict) -> Iterator[tuple[str, Edit]]:
    """A collective, an engine call, a strategy's or a task's work done by the calling process alone."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for k, decorator in enumerate(node.decorator_list):
            name = decorator.func if isinstance(decorator, ast.Call) else decorator
            if ast.unparse(name) in ("task", "tasks.task"):

                def untask(n, _p, k=k):
                    del n.decorator_list[k]

                yield f"@{ast.unparse(decorator)} removed: {node.name} runs in the notebook's process", untask
    call = _method(node)
    if call is None or not node.args:
        return
    receiver, method = call
    first = ast.unparse(node.args[0])
    if method in _APPLY or (method == "run" and "strategy" in receiver):
        yield f"`{receiver}.{method}({first}, ...)` -> `{first}(...)`", _call_locally
    elif method in _MAP or (method == "map" and "view" in receiver):
        yield f"`{receiver}.{method}({first}, ...)` -> `list(map({first}, ...))`", _map_locally
    elif _COMMUNICATORS.search(receiver) and method in _TO_FIRST | _TO_LIST:
        new = f"[{first}]" if method in _TO_LIST else first
        if method == "reduce" and len(node.args) > 1:  # strategy.reduce(op, value, axis)
            new = ast.unparse(node.args[1])
        yield f"`{receiver}.{method}(...)` -> `{new}`", lambda n, p, new=new: _replace(p, n, _expr(new))
    elif _COMMUNICATORS.search(receiver) and method in _BUFFERS | {"Bcast"} and isinstance(parents[node], ast.Expr):
        recv = _argument(node, 1, "recvbuf")
        if method == "Bcast":
            yield f"`{receiver}.Bcast(...)` removed", lambda n, p: _replace(p, p[n], [])
        elif recv is not None:
            copy_code = f"{ast.unparse(recv)}[...] = {first}"
            yield (
                f"`{receiver}.{method}(...)` -> `{copy_code}`",
                lambda n, p: _replace(p, p[n], ast.parse(copy_code).body),
            )


def _argument(node: ast.Call, position: int, name: str) -> ast.expr | None:
    if len(node.args) > position:
        return node.args[position]
    return next((k.value for k in node.keywords if k.arg == name), None)


def _call_locally(node: ast.Call, parents: dict) -> None:
    function, args, keywords = node.args[0], node.args[1:], [k for k in node.keywords]
    given = {k.arg: k.value for k in keywords}
    if "args" in given or "kwargs" in given:  # strategy.run(fn, args=(...), kwargs={...})
        args = [ast.Starred(given["args"], ast.Load())] if "args" in given else []
        keywords = [ast.keyword(None, given["kwargs"])] if "kwargs" in given else []
    _replace(parents, node, ast.Call(function, args, keywords))


def _map_locally(node: ast.Call, parents: dict) -> None:
    _replace(
        parents,
        node,
        ast.Call(ast.Name("list", ast.Load()), [ast.Call(ast.Name("map", ast.Load()), node.args, [])], []),
    )


def op_gather(node: ast.AST, parents: dict) -> Iterator[tuple[str, Edit]]:
    """An exchange between chosen ranks replaced by every rank gathering everything and picking its part."""
    call = _method(node)
    if call is None or not node.args or not _COMMUNICATORS.search(call[0]):
        return
    comm, method = call
    send = ast.unparse(node.args[0])
    if method == "Sendrecv" and isinstance(parents[node], ast.Expr):
        recv, source = _argument(node, 3, "recvbuf"), _argument(node, 4, "source")
        if recv is not None and source is not None:
            src = ast.unparse(source)
            code = f"if 0 <= {src}:\n    {ast.unparse(recv)}[...] = {comm}.allgather({send})[{src}]\nelse:\n    {comm}.allgather({send})"
            yield (
                f"`{comm}.Sendrecv` -> every rank gathers every buffer",
                lambda n, p: _replace(p, p[n], ast.parse(code).body),
            )
    elif method == "sendrecv":
        source = _argument(node, 3, "source")
        if source is not None:
            new = f"{comm}.allgather({send})[{ast.unparse(source)}]"
            yield f"`{comm}.sendrecv` -> every rank gathers every object", lambda n, p: _replace(p, n, _expr(new))
    elif method == "Allreduce" and isinstance(parents[node], ast.Expr) and _argument(node, 1, "recvbuf") is not None:
        code = f"{ast.unparse(_argument(node, 1, 'recvbuf'))}[...] = sum({comm}.allgather({send}))"
        yield f"`{comm}.Allreduce` -> the sum of an all-gather", lambda n, p: _replace(p, p[n], ast.parse(code).body)


def op_record(node: ast.AST, parents: dict) -> Iterator[tuple[str, Edit]]:
    if not isinstance(node, ast.Dict) or len(node.keys) < 2 or None in node.keys:
        return
    for k in range(len(node.keys) - 1):
        if ast.unparse(node.values[k]) != ast.unparse(node.values[k + 1]):

            def swap(n, _p, k=k):
                n.values[k], n.values[k + 1] = n.values[k + 1], n.values[k]

            names = f"{ast.unparse(node.keys[k])} and {ast.unparse(node.keys[k + 1])}"
            yield f"fields {names} swapped", swap


OPERATOR_FUNCTIONS = {
    "operator": op_operator,
    "constant": op_constant,
    "statement": op_statement,
    "keyword": op_keyword,
    "rank": op_rank,
    "local": op_local,
    "gather": op_gather,
    "record": op_record,
}


# Keywords whose value is what the function assumes without them (function -> keyword -> value; "*": any other
# keyword): `@task`'s returns=1 and a parameter IN (`course.tasks.definition`), `np.array`'s copy=True, mpi4py's
# op=MPI.SUM.
DEFAULTS = {
    "task": {"returns": "1", "*": "IN"},
    "array": {"copy": "True"},
    "Allreduce": {"op": "MPI.SUM"},
    "allreduce": {"op": "MPI.SUM"},
    "Reduce": {"op": "MPI.SUM"},
}


def _default_keyword(node: ast.AST, what: str) -> str:
    """The function and keyword WHAT drops, where its value is the function's default ('' otherwise)."""
    name = re.match(r"keyword `(\w+)=` dropped", what)
    function = ast.unparse(node.func).split(".")[-1] if isinstance(node, ast.Call) else ""
    if not (name and function in DEFAULTS):
        return ""
    value = next(ast.unparse(k.value) for k in node.keywords if k.arg == name.group(1))
    default = DEFAULTS[function].get(name.group(1), DEFAULTS[function].get("*"))
    return f"{function}({name.group(1)}={value})" if value == default else ""


def _trailing_return_none(node: ast.AST, parents: dict) -> bool:
    """Whether NODE is `return` or `return None` as the last statement of a function's body."""
    function = parents.get(node)
    none = isinstance(node, ast.Return) and (node.value is None or ast.unparse(node.value) == "None")
    return none and isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and function.body[-1] is node


def _in_raise_message(node: ast.AST, parents: dict) -> bool:
    """Whether NODE is in the arguments of the exception a `raise` makes (its message), not the exception's type."""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.Call) and isinstance(parents.get(parent), ast.Raise):
            return node is not parent.func
        node = parent
    return False


def _in_verbose(node: ast.AST, parents: dict) -> bool:
    """Whether NODE is part of the value of a `verbose=` keyword (how much a call prints)."""
    while node in parents and not isinstance(node, ast.stmt):
        node = parents[node]
        if isinstance(node, ast.keyword):
            return node.arg == "verbose"
    return False


def _why_equivalent(node: ast.AST, parents: dict, operator: str, what: str = "") -> str:
    """The static reason a change at NODE cannot change what a learner is marked on ('' if none)."""
    if operator == "keyword" and (dropped := _default_keyword(node, what)):
        return f"drops a keyword whose value is the default: {dropped}"
    if operator == "statement" and _trailing_return_none(node, parents):
        return "removes a function's last statement, `return None`: it returns None without it"
    if operator == "constant" and _in_raise_message(node, parents):
        return "changes only an error's message"
    if (operator == "keyword" and what == "keyword `verbose=` dropped") or _in_verbose(node, parents):
        return "changes only what is printed (verbose=)"
    if operator == "constant" and _is_docstring(node, parents):
        return "in a docstring"
    if _in_print(node, parents):
        return "changes only what a print shows"
    call = node.value if isinstance(node, ast.Expr) else None
    if operator == "statement" and isinstance(call, ast.Call) and ast.unparse(call.func) == "print":
        return "removes a print"
    return ""


def region_mutants(exercise: str, source: str, number: int) -> list[Mutant]:
    """Every mutant of solution region NUMBER of an answer cell's SOURCE (static equivalents marked)."""
    region = regions(source)[number]
    code = region_code(source, region)
    tree = ast.parse(code)
    original = ast.unparse(tree)
    nodes, parents = list(ast.walk(tree)), _parents(tree)
    found: list[Mutant] = []
    seen: dict[str, str] = {}
    for index, node in enumerate(nodes):
        for operator, offers in OPERATOR_FUNCTIONS.items():
            for what, edit in offers(node, parents):
                fresh = ast.parse(code)
                fresh_nodes = list(ast.walk(fresh))
                edit(fresh_nodes[index], _parents(fresh))
                ast.fix_missing_locations(fresh)
                mutated = ast.unparse(fresh)
                line = getattr(node, "lineno", 0)
                mutant = Mutant(exercise, operator, f"line {line}: {what}", number, _site(node, parents, nodes))
                mutant.source = with_region(source, region, mutated)
                mutant.diff = short_diff(original, mutated)
                mutant.equivalent = _why_equivalent(node, parents, operator, what)
                if mutated == original:
                    mutant.equivalent = "the same code as the solution, once normalised"
                elif not mutant.equivalent and mutated in seen:
                    mutant.equivalent = f"the same code as another mutant ({seen[mutated]})"
                seen.setdefault(mutated, mutant.what)
                found.append(mutant)
    return found


def short_diff(before: str, after: str) -> str:
    """The lines that differ, `- old` then `+ new`."""
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return "\n".join(line for line in lines if line[:1] in "+-" and line[:3] not in ("---", "+++"))


def cell_mutants(exercise: str, source: str) -> tuple[list[Mutant], list[str]]:
    """Every mutant of every solution region of an answer cell, and the regions that are not Python (skipped)."""
    mutants, skipped = [], []
    for number, region in enumerate(regions(source)):
        try:
            mutants += region_mutants(exercise, source, number)
        except SyntaxError:
            skipped.append(f"{exercise}: solution region {number + 1} is not Python (not mutated)")
    return mutants, skipped


def select(mutants: list[Mutant], limit: int) -> list[Mutant]:
    """At most LIMIT of MUTANTS, spread over the operators (round robin in OPERATORS' order), the same every time."""
    by_operator = {op: sorted((m for m in mutants if m.operator == op), key=lambda m: m.key) for op in OPERATORS}
    chosen: list[Mutant] = []
    while len(chosen) < limit and any(by_operator.values()):
        for op in OPERATORS:
            if by_operator[op] and len(chosen) < limit:
                chosen.append(by_operator[op].pop(0))
    return chosen


def _parsed_regions(source: str):
    """(number, region, tree, nodes in walk order) of each solution region of SOURCE that parses as Python."""
    for number, region in enumerate(regions(source)):
        try:
            tree = ast.parse(region_code(source, region))
        except SyntaxError:
            continue
        yield number, region, tree, list(ast.walk(tree))


def _statement_lists(nodes: list):
    """(holder, attribute, statements) for every non-empty list of statements among NODES."""
    for holder in nodes:
        for name in ("body", "orelse", "finalbody"):
            body = getattr(holder, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield holder, name, body


def probed(source: str, exercise: str, path: str) -> str:
    """SOURCE with a probe before each statement of its solution regions: it appends `exercise:region:site` to the
    file PATH when it runs (in the kernel, on an engine or in a script), so the report knows what the solution's
    own run reaches. Docstrings and `from __future__` imports get none (they must come first)."""
    for number, region, tree, nodes in reversed(list(_parsed_regions(source))):
        for holder, name, body in _statement_lists(nodes):
            setattr(holder, name, _with_probes(body, nodes, f"{exercise}:{number}", path))
        source = with_region(source, region, ast.unparse(ast.fix_missing_locations(tree)))
    return source


def _with_probes(body: list, nodes: list, label: str, path: str) -> list:
    result = []
    for k, statement in enumerate(body):
        first_string = k == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
        future = isinstance(statement, ast.ImportFrom) and statement.module == "__future__"
        if not (first_string or future):
            site = nodes.index(statement)
            line = f"__import__('builtins').print({label + ':' + str(site)!r}, file=__import__('builtins').open({path!r}, 'a'), flush=True)"
            result.append(copy.deepcopy(ast.parse(line).body[0]))
        result.append(statement)
    return result


def unprobed_sites(source: str, exercise: str) -> set[str]:
    """The `exercise:region:site` labels `probed` gives no probe (always counted as reached)."""
    return {
        f"{exercise}:{number}:{nodes.index(body[0])}"
        for number, _, _, nodes in _parsed_regions(source)
        for _, _, body in _statement_lists(nodes)
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    }
