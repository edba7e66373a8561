"""Fusion: IR values grouped greedily into kernels (an elementwise chain over one domain, reductions of one
geometry with their prologue and epilogue, a matmul with the elementwise chain after it)."""

from __future__ import annotations

from kernelsmith.compiler.ir import _flat, _Val

# ------------------------------------------------------------------------------------------------- fusion


class _Group:
    """One kernel: its IR members, its template and its iteration domain."""

    def __init__(self, index: int, kind: str, domain: tuple):
        self.index, self.kind, self.domain = index, kind, domain
        self.members: list[_Val] = []
        self.space: dict[_Val, str] = {}     # full | keep | nokeep (reduced, with or without kept dims)
        self.spec: tuple | None = None        # reduction dims as written (None: all)
        self.block: tuple[int, int] = (0, 0)  # reduced dims at trace time, half-open
        self.outputs: list[_Val] = []
        self.name = ""

    def add(self, v: _Val, space: str) -> None:
        self.members.append(v)
        self.space[v] = space

    def to_reduction(self, v: _Val) -> None:
        self.kind, self.spec, self.block = "red", v.params["spec"], v.params["block"]

    def shapes(self) -> tuple[tuple, tuple, tuple]:
        a, b = self.block
        s = self.domain
        return s, s[:a] + (1,) * (b - a) + s[b:], s[:a] + s[b:]


class _Fuser:
    def __init__(self, vals: list[_Val]):
        self.vals = vals
        self.group_of: dict[_Val, _Group] = {}
        self.groups: list[_Group] = []

    def avail(self, v: _Val) -> frozenset[int]:
        """Kernels that must have run before `v` exists outside them."""
        if v in self.group_of:
            return frozenset({self.group_of[v].index})
        if v.kind == "glue":
            return frozenset().union(*[self.avail(a) for a in v.args]) if v.args else frozenset()
        return frozenset()

    def fits(self, g: _Group, v: _Val) -> str | None:
        """The space `v` would have in `g`, or None when it cannot join."""
        if v.kind == "mm":
            return None
        inside = [a for a in _flat(v.args) if self.group_of.get(a) is g]
        if not inside and not (v.kind == "red" or g.kind == "ew"):
            return None  # horizontal joins: reductions of one geometry, or elementwise ops of one domain
        for a in _flat(v.args):
            if self.group_of.get(a) is not g and any(i >= g.index for i in self.avail(a)):
                return None
        spaces = {g.space[a] for a in inside}
        if g.kind in ("ew", "mm"):
            if v.kind == "ew" and v.shape == g.domain:
                return "full"
            if g.kind == "ew" and v.kind == "red" and v.args[0].shape == g.domain:
                return "keep" if v.params["keepdim"] else "nokeep"
            return None
        if v.kind == "red":
            x = v.args[0]
            full = g.space.get(x) == "full" if x in g.space else x.shape == g.domain
            if full and v.params["block"] == g.block:
                return "keep" if v.params["keepdim"] else "nokeep"
            return None
        s, sk, sn = g.shapes()
        if spaces <= {"keep"} and v.shape == sk:
            return "keep"
        if "nokeep" not in spaces and v.shape == s:
            # A reduction of everything is one row: a full-size op after it would put the whole tensor in one
            # program (and rule out the split). It starts the next kernel instead (`x / x.norm()`, `x - x.mean()`).
            return None if g.block == (0, len(g.domain)) and any(m.kind == "red" for m in g.members) else "full"
        if spaces == {"nokeep"} and v.shape == sn:
            return "nokeep"
        return None

    def run(self, live: set[_Val]) -> list[_Group]:
        for v in self.vals:
            if v not in live or v.kind not in ("ew", "red", "mm"):
                continue
            # The newest kernel producing an operand first; then any other kernel of the same iteration space
            # (independent reductions over the same dims, a second elementwise output): `fits` refuses any
            # kernel that would have to wait for one of v's operands, so kernels never depend on later ones.
            owners = [self.group_of[a] for a in _flat(v.args) if a in self.group_of]
            newest = max(owners, key=lambda x: x.index) if owners else None
            g, space = None, None
            for cand in ([newest] if newest else []) + [x for x in reversed(self.groups) if x is not newest]:
                space = self.fits(cand, v)
                if space is not None:
                    g = cand
                    break
            if space is None:
                if v.kind == "mm":
                    g, space = _Group(len(self.groups), "mm", v.shape), "full"
                elif v.kind == "red":
                    g = _Group(len(self.groups), "red", v.args[0].shape)
                    g.to_reduction(v)
                    space = "keep" if v.params["keepdim"] else "nokeep"
                else:
                    g, space = _Group(len(self.groups), "ew", v.shape), "full"
                self.groups.append(g)
            elif v.kind == "red" and g.kind == "ew":
                g.to_reduction(v)
            g.add(v, space)
            self.group_of[v] = g
        return self.groups
