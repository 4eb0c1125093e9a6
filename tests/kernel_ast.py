"""The structure of generated kernel source, read from its syntax tree.

Tests of the generators check what matters about a kernel (which loops it has and what they
walk, what it prefetches, which arrays it reads and writes) on the module's ``ast``, not on
its text: a change of spacing, parentheses, statement order or temporary names leaves these
checks alone, a structural regression (a loop over heads put back, a prefetch lost) fails
them. The names they rely on are the kernels' interface, not their formatting: the pattern's
buffers ``indptr``, ``indices``, ``colptr``, ``perm``, ``crow`` and the operand arrays of
:class:`gblas_gnn.codegen.kernel_args.Layout`, and the helpers every module imports or
defines (``prefetch_row``, ``prefetch_heads``, ``_dot``, ``_dot_at``, ``_axpy``).

Terms:

* an *edge loop* walks a row's (or a column's) stored entries: its ``range`` bounds come
  from ``indptr`` or ``colptr`` (directly, or through a name assigned from them);
* an *item loop* is a loop those bounds depend on (the loop over rows or columns), and the
  loops around it;
* a *lane loop* walks a row's lanes and picks each lane's head by selects on its index (a
  conditional expression that compares the loop variable);
* a *head loop* is any other loop that encloses an edge loop, or sits inside one: the row is
  walked once per head, or an edge's heads are visited one at a time. (A loop over a head's
  channels inside an edge loop would count too: the plans checked this way have none.)
"""

from __future__ import annotations

import ast
from functools import cached_property

#: the pattern buffers whose entries bound an edge loop
EDGE_BOUNDS = ("indptr", "colptr")
#: the kernel-primitive calls that prefetch a row
PREFETCHES = ("prefetch_row", "prefetch_heads")


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _subscripted(node: ast.AST) -> set[str]:
    """Names of the arrays subscripted anywhere in ``node``."""
    return {n.value.id for n in ast.walk(node)
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)}


def _is_name(node: ast.AST, name: str | None) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _target(loop: ast.For) -> str | None:
    return loop.target.id if isinstance(loop.target, ast.Name) else None


def _is_range(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "range")


def _constant(node: ast.AST):
    """The integer a literal or ``np.<int type>(literal)`` stands for, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and _is_name(node.func.value, "np") and len(node.args) == 1):
        return _constant(node.args[0])
    return None


class Function:
    """One generated function's syntax tree, with its loops classified (module docstring)."""

    def __init__(self, node: ast.FunctionDef):
        self.node = node
        self.params = [a.arg for a in node.args.args]
        self.parent = {child: parent for parent in ast.walk(node)
                       for child in ast.iter_child_nodes(parent)}

    # ------------------------------------------------------------------ plumbing
    def walk(self, node: ast.AST | None = None):
        return ast.walk(self.node if node is None else node)

    def ancestors(self, node: ast.AST):
        while node in self.parent:
            node = self.parent[node]
            yield node

    def loops_around(self, node: ast.AST) -> list[ast.For]:
        return [a for a in self.ancestors(node) if isinstance(a, ast.For)]

    @cached_property
    def assigned(self) -> dict[str, list[ast.AST]]:
        """Each plain name's assigned values."""
        out: dict[str, list[ast.AST]] = {}
        for n in self.walk():
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        out.setdefault(t.id, []).append(n.value)
        return out

    def _depends(self, node: ast.AST) -> set[str]:
        """The names ``node`` reads, and those the names it reads were assigned from."""
        names = _names(node)
        for name in list(names):
            for value in self.assigned.get(name, ()):
                names |= _names(value)
        return names

    def value_of(self, name: str):
        """The integer ``name`` is assigned (once, as a literal), else None."""
        values = self.assigned.get(name, ())
        return _constant(values[0]) if len(values) == 1 else None

    # ------------------------------------------------------------------ loops
    @cached_property
    def edge_loops(self) -> list[ast.For]:
        out = []
        for loop in self.walk():
            if isinstance(loop, ast.For) and _is_range(loop.iter):
                reads = set().union(*(_subscripted(a) for a in loop.iter.args))
                for name in _names(loop.iter):
                    for value in self.assigned.get(name, ()):
                        reads |= _subscripted(value)
                if reads & set(EDGE_BOUNDS):
                    out.append(loop)
        return out

    def item_loops(self, edge_loop: ast.For) -> list[ast.For]:
        """The loops ``edge_loop``'s bounds depend on, and the loops around them."""
        deps = self._depends(edge_loop.iter)
        around = self.loops_around(edge_loop)
        for k, loop in enumerate(around):
            if _target(loop) in deps:
                return around[k:]
        return []

    def is_lane_loop(self, loop: ast.For) -> bool:
        return any(isinstance(n, ast.IfExp) and isinstance(n.test, ast.Compare)
                   and _is_name(n.test.left, _target(loop)) for n in self.walk(loop))

    @cached_property
    def lane_loops(self) -> list[ast.For]:
        return [n for n in self.walk() if isinstance(n, ast.For) and self.is_lane_loop(n)]

    @cached_property
    def head_loops(self) -> list[ast.For]:
        """Loops that walk a row once per head, or an edge's heads one at a time."""
        out = []
        for edge in self.edge_loops:
            items = self.item_loops(edge)
            out += [loop for loop in self.loops_around(edge)
                    if loop not in items and loop not in self.edge_loops]
            out += [loop for loop in self.walk(edge) if isinstance(loop, ast.For)
                    and loop is not edge and loop not in self.edge_loops
                    and not self.is_lane_loop(loop)]
        return list({id(loop): loop for loop in out}.values())

    # ------------------------------------------------------------------ lanes
    def lane_bounds(self) -> set:
        """The values the lane loops' selects compare the lane index against (each head's
        first lane): integers where they are literals, else the expressions' dumps."""
        out = set()
        for loop in self.lane_loops:
            for n in self.walk(loop):
                if isinstance(n, ast.IfExp) and isinstance(n.test, ast.Compare) \
                        and _is_name(n.test.left, _target(loop)):
                    for c in n.test.comparators:
                        value = self.value_of(c.id) if isinstance(c, ast.Name) else \
                            _constant(c)
                        out.add(ast.dump(c) if value is None else value)
        return out

    def lane_trip_counts(self) -> list:
        """Each lane loop's trip count: an integer where it is a literal, else None."""
        return [_constant(loop.iter.args[0]) if len(loop.iter.args) == 1 else None
                for loop in self.lane_loops]

    def flat_entry_loops(self) -> list[ast.For]:
        """Edge loops over a row's entries of every head at once (bounds scaled by the head
        count), whose variable indexes a flat array alone."""
        out = []
        for loop in self.edge_loops:
            scaled = all(isinstance(a, ast.BinOp) and isinstance(a.op, ast.Mult)
                         for a in loop.iter.args)
            flat = any(isinstance(n, ast.Subscript) and _is_name(n.slice, _target(loop))
                       for n in self.walk(loop))
            if scaled and flat:
                out.append(loop)
        return out

    # ------------------------------------------------------------------ updates
    def running_maxima(self) -> dict[str, list[ast.stmt]]:
        """The names started at ``-inf``, and their assignments inside edge loops."""
        names = {t.id for n in self.walk() if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)
                 and any(isinstance(u, ast.UnaryOp) and isinstance(u.op, ast.USub)
                         and isinstance(u.operand, ast.Attribute) and u.operand.attr == "inf"
                         for u in ast.walk(n.value))}
        out: dict[str, list[ast.stmt]] = {name: [] for name in names}
        for edge in self.edge_loops:
            for n in self.walk(edge):
                if isinstance(n, (ast.Assign, ast.AugAssign)):
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                        if isinstance(t, ast.Name) and t.id in names:
                            out[t.id].append(n)
        return out

    def under_branch(self, node: ast.AST) -> bool:
        """Whether an ``if`` inside ``node``'s edge loop guards it."""
        for a in self.ancestors(node):
            if isinstance(a, ast.If):
                return True
            if a in self.edge_loops:
                return False
        return False

    # ------------------------------------------------------------------ calls, arrays
    def calls(self, name: str) -> list[ast.Call]:
        return [n for n in self.walk() if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id == name]

    def ahead(self, index: ast.AST, buffer: str) -> bool:
        """Whether ``index`` is an entry of ``buffer`` at a later position (``buffer[q + k]``,
        perhaps clamped), directly or through a name assigned it."""
        values = self.assigned.get(index.id, []) if isinstance(index, ast.Name) else [index]
        return bool(values) and all(
            isinstance(v, ast.Subscript) and _is_name(v.value, buffer)
            and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add)
                    for n in ast.walk(v.slice)) for v in values)

    def prefetched(self) -> list[ast.Subscript]:
        """The rows the function prefetches (each call's argument, ``array[index]``)."""
        return [c.args[0] for name in PREFETCHES for c in self.calls(name)
                if c.args and isinstance(c.args[0], ast.Subscript)]

    def reads(self, array: str) -> list[ast.Subscript]:
        return [n for n in self.walk() if isinstance(n, ast.Subscript)
                and _is_name(n.value, array) and isinstance(n.ctx, ast.Load)]

    def writes(self, array: str) -> list[ast.Subscript]:
        return [n for n in self.walk() if isinstance(n, ast.Subscript)
                and _is_name(n.value, array) and isinstance(n.ctx, ast.Store)]

    def accumulated_from(self, array: str) -> list[ast.AugAssign]:
        """``x += <expression reading array>`` statements."""
        return [n for n in self.walk() if isinstance(n, ast.AugAssign)
                and array in _subscripted(n.value)]


class Module:
    """A generated module's functions by name."""

    def __init__(self, text: str):
        self.tree = ast.parse(text)
        self.functions = {n.name: Function(n) for n in self.tree.body
                          if isinstance(n, ast.FunctionDef)}

    def __getitem__(self, name: str) -> Function:
        return self.functions[name]

    def arguments(self) -> set[str]:
        """Every argument name of every function of the module."""
        return {p for f in self.functions.values() for p in f.params}
