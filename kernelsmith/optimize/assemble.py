"""`optimized.py` rendered from data: the user's model file, each part's winning program (its top-level names
prefixed so that several programs and the model live in one module), and a `ModelNew(Model)` whose forward is
the model's traced graph (`extract/graph.json`) with each part's nodes replaced by a call.

Nothing here runs the model or a program: the graph is data the extract worker reported (validated names,
literals rendered by `extract.spec.literal`), and the programs are text, renamed through their syntax tree.

Every part gets a block in `forward`: `outs = self._ks_call(k, self._ks_orig_k, (feeds...), (consts...))`. The
part's winner runs when part k is in `_KS_SWAPPED` (the file's one switch), bound to the model's own parameters
(no copies: the winner's parameters are the model's tensors, rebound before each call); otherwise `_ks_orig_k`
runs the model's original ops. So a part is switched off by editing one literal, and the measuring child times
both paths of the same file.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass, field
from typing import Any

from kernelsmith import pyast
from kernelsmith.extract import spec as S

NS = {"torch": "torch", "F": "_ks_F", "operator": "_ks_operator", "math": "_ks_math"}
PATH_PART = re.compile(r"^[A-Za-z0-9_]{1,80}$")


class AssembleError(ValueError):
    """A graph or program that cannot be rendered into `optimized.py`; the message says which part and why."""


@dataclass
class Part:
    """One extracted task in the model's graph (`site` from extract.json) and, when evolved, its winner."""

    index: int
    name: str
    site: dict[str, Any]
    code: str | None = None  # the winner's source, None when there is no correct winner
    swap: bool = False  # switched on in `_KS_SWAPPED`
    shapes: list[Any] = field(default_factory=list)  # the task's inputs as [shape, dtype] (a module call's guard)
    deps: list[str] = field(default_factory=list)  # the block's arguments: feeds, then constants


# ------------------------------------------------------------------------------------------ programs
def _stored(body: list[ast.stmt]) -> set[str]:
    """Names a block of statements binds in its own scope (not inside nested functions, classes, lambdas or
    comprehensions; their def/class names do count)."""
    out: set[str] = set()

    def walk(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            for d in node.decorator_list:
                walk(d)
            return
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name != "*":
                    out.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        for child in ast.iter_child_nodes(node):
            walk(child)

    for stmt in body:
        walk(stmt)
    return out


def _declared(body: list[ast.stmt], kind: type) -> set[str]:
    found: set[str] = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, kind):
                found |= set(node.names)  # type: ignore[attr-defined]
    return found


class _Renamer(ast.NodeTransformer):
    """Renames module-level names wherever they resolve to the module scope (function parameters, locals and
    keyword argument names are left alone)."""

    def __init__(self, names: dict[str, str]):
        self.names = names
        self.scopes: list[tuple[str, set[str]]] = []

    def _global(self, name: str) -> bool:
        for depth, (kind, local) in enumerate(reversed(self.scopes)):
            if kind == "class" and depth > 0:
                continue  # a class body's names are not visible inside its methods
            if name in local:
                return False
        return True

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names and self._global(node.id):
            node.id = self.names[node.id]
        return node

    def visit_Global(self, node: ast.Global) -> ast.AST:
        node.names = [self.names.get(n, n) for n in node.names]
        return node

    def _function(self, node: Any, args: ast.arguments, body: list[ast.stmt]) -> ast.AST:
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        for default in [*args.defaults, *[d for d in args.kw_defaults if d is not None]]:
            self.visit(default)
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None and a.annotation is not None:
                self.visit(a.annotation)
        if getattr(node, "returns", None) is not None:
            self.visit(node.returns)
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
        local = (params | _stored(body) | _declared(body, ast.Nonlocal)) - _declared(body, ast.Global)
        self.scopes.append(("function", local))
        for stmt in body:
            self.visit(stmt)
        self.scopes.pop()
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        if not self.scopes and node.name in self.names:
            node.name = self.names[node.name]
        return self._function(node, node.args, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        self.visit(node.args)
        self.scopes.append(("function", {a.arg for a in [*node.args.args, *node.args.kwonlyargs]}))
        self.visit(node.body)
        self.scopes.pop()
        return node

    def _comprehension(self, node: Any, elts: list[ast.AST]) -> ast.AST:
        self.visit(node.generators[0].iter)  # evaluated in the enclosing scope
        targets = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        self.scopes.append(("function", targets))
        for i, g in enumerate(node.generators):
            if i:
                self.visit(g.iter)
            for cond in g.ifs:
                self.visit(cond)
        for e in elts:
            self.visit(e)
        self.scopes.pop()
        return node

    def visit_ListComp(self, node: ast.ListComp) -> ast.AST:
        return self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp  # type: ignore[assignment]

    def visit_DictComp(self, node: ast.DictComp) -> ast.AST:
        return self._comprehension(node, [node.key, node.value])

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        if not self.scopes and node.name in self.names:
            node.name = self.names[node.name]
        for x in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(x)
        self.scopes.append(("class", _stored(node.body)))
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()
        return node


def _import_key(node: ast.Import | ast.ImportFrom, alias: ast.alias) -> str:
    if isinstance(node, ast.Import):
        return f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
    return f"from {'.' * node.level}{node.module or ''} import {alias.name}"


def module_bindings(tree: ast.Module) -> dict[str, str]:
    """Module-level names of a file: an import's key (two identical imports bind the same thing), else a key
    no other binding shares."""
    out: dict[str, str] = {}
    for name in _stored(tree.body):
        out[name] = f"own:{id(tree)}:{name}"
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                name = a.asname or a.name.split(".")[0]
                if out.get(name, "").startswith("own:") and sum(1 for n in ast.walk(tree) if isinstance(
                        n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)) == 0:
                    out[name] = _import_key(node, a)
    return out


def rename_program(code: str, prefix: str, taken: dict[str, str]) -> tuple[str, dict[str, str], list[str]]:
    """(renamed code, its new bindings for `taken`, its `from __future__` names): every module-level name the
    program binds gets `prefix`, except imports binding a name to what it already means in `taken`."""
    try:
        tree = pyast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise AssembleError(f"the program does not parse: {exc}") from None
    assert isinstance(tree, ast.Module)
    futures: list[str] = []
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            futures += [a.name for a in node.names]
            continue
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
                and node.test.left.id == "__name__"):
            continue  # `if __name__ == "__main__":` is the program's script part, not the kernels
        if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(node)):
            raise AssembleError("the program uses `from ... import *`, whose names cannot be renamed")
        body.append(node)
    tree.body = body
    bindings = module_bindings(tree)
    names: dict[str, str] = {}
    mine: dict[str, str] = {}
    for name, key in bindings.items():
        if not key.startswith("own:") and taken.get(name, key) == key:
            mine[name] = key  # the same import as the model's or another program's: shared
        else:
            names[name] = prefix + name
            mine[prefix + name] = key
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                bound = a.asname or a.name.split(".")[0]
                if bound in names:
                    if a.asname is None and "." in a.name:
                        raise AssembleError(f"`import {a.name}` binds {bound!r}, which the model binds otherwise")
                    a.asname = names[bound]
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                bound = a.asname or a.name
                if bound in names:
                    a.asname = names[bound]
    tree = _Renamer(names).visit(tree)
    ast.fix_missing_locations(tree)
    try:
        return ast.unparse(tree), mine, futures
    except (ValueError, RecursionError) as exc:
        raise AssembleError(f"the program cannot be rewritten: {exc}") from None


# ------------------------------------------------------------------------------------------ the forward
def _path(root: str, path: str) -> str:
    """`self.layers` + `getattr(..., '0')`: a module or tensor of the model by its dotted path."""
    expr = root
    for part in path.split("."):
        if not PATH_PART.match(part):
            raise AssembleError(f"bad attribute path {path!r}")
        expr = f"{expr}.{part}" if part.isidentifier() and not keyword.iskeyword(part) else f"getattr({expr}, {part!r})"
    return expr


def _call(step: dict[str, Any], names: set[str], where: str) -> str:
    op, target = step.get("op"), step.get("target")
    args, kwargs = step.get("args", []), step.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise AssembleError(f"{where}: args must be a list and kwargs an object")
    try:
        a = [S.literal(x, names, set(), where) for x in args]
        kw = [f"{S._ident(k, where)}={S.literal(x, names, set(), where)}" for k, x in kwargs.items()]
        if op == "module":
            return f"{_path('self', str(target))}({', '.join(a + kw)})"
        if op == "attr":
            return _path("self", str(target))
        if op == "tensor":
            return S._init_tensor(step.get("tensor") or {}, where)
        if op == "method":
            name = S._ident(target, where)
            if name.startswith("_") or not a:
                raise AssembleError(f"{where}: method {name!r} is not rendered")
            return f"{a[0]}.{name}({', '.join(a[1:] + kw)})"
    except S.SpecError as exc:
        raise AssembleError(str(exc)) from None
    if op != "function" or not isinstance(target, str) or "." not in target:
        raise AssembleError(f"{where}: unknown step {op!r} {target!r}")
    ns, _, name = target.rpartition(".")
    if not S.IDENT.match(name) or name.startswith("_"):
        raise AssembleError(f"{where}: function {target!r} is not rendered")
    if ns == "builtins":
        attr = args[1] if len(args) == 2 else None
        if name != "getattr" or kw or not isinstance(attr, str) or not attr.isidentifier() or attr.startswith("_"):
            raise AssembleError(f"{where}: only getattr(value, 'public_name') is rendered")
        return f"{a[0]}.{attr}"
    if ns not in NS:
        raise AssembleError(f"{where}: function {target!r} is not rendered (torch, F, operator and math only)")
    if ns == "operator" and not kw:
        if name in S.INFIX and len(a) == 2:
            return f"({a[0]} {S.INFIX[name]} {a[1]})"
        if name in S.PREFIX and len(a) == 1:
            return f"({S.PREFIX[name]}{a[0]})"
        if name == "getitem" and len(a) == 2:
            try:
                return f"{a[0]}[{S._index(args[1], names, set(), where)}]"
            except S.SpecError as exc:
                raise AssembleError(str(exc)) from None
    return f"{NS[ns]}.{name}({', '.join(a + kw)})"


def _refs(v: Any) -> set[str]:
    """The variables an encoded value refers to."""
    if isinstance(v, list):
        return set().union(*(_refs(x) for x in v)) if v else set()
    if isinstance(v, dict):
        if set(v) == {"ref"} and isinstance(v["ref"], str):
            return {v["ref"]}
        return set().union(*(_refs(x) for x in v.values())) if v else set()
    return set()


def _step_refs(step: dict[str, Any]) -> set[str]:
    return _refs(step.get("args", [])) | _refs(step.get("kwargs", {})) | _refs(step.get("default"))


def plan(graph: dict[str, Any], parts: list[Part]) -> tuple[list[Any], dict[int, str]]:
    """The forward's order: the graph's steps, each part's nodes taken out and its block put right after the
    last value it needs. Returns (items: steps or parts, {part index: why it has no block}); a part whose block
    cannot be placed (a value it returns is used before a value it needs exists) is left as original ops."""
    steps = graph.get("steps")
    if not isinstance(steps, list) or not steps or not all(isinstance(s, dict) for s in steps):
        raise AssembleError("graph.json: no steps")
    out_names = [s.get("out") for s in steps]
    if not all(isinstance(o, str) and S.IDENT.match(o) for o in out_names) or len(set(out_names)) != len(out_names):
        raise AssembleError("graph.json: bad or repeated step names")
    index = {o: i for i, o in enumerate(out_names)}
    by_name = dict(zip(out_names, steps))
    skipped: dict[int, str] = {}
    live = [p for p in parts]
    while True:
        owned = {n: p for p in live for n in p.site["nodes"]}
        items: list[tuple[float, Any]] = []
        bad = None
        for p in live:
            missing = [n for n in p.site["nodes"] + p.site["members"] + p.site["feeds"] if n not in index]
            if missing:
                bad = (p, f"the graph has no node {missing[0]}")
                break
            inside = set(p.site["members"])
            needed: set[str] = set()
            for n in p.site["members"]:
                needed |= _step_refs(by_name[n]) - inside
            # the rest (sizes, the model's own tensors by attribute) is passed to the original ops; the winner
            # has them baked in or bound
            consts = sorted((x for x in needed if x not in p.site["feeds"]), key=index.__getitem__)
            p.deps = list(p.site["feeds"]) + consts
            items.append((max((index[d] for d in p.deps), default=-1) + 0.5, p))
        if bad is None:
            items += [(i, s) for i, s in enumerate(steps) if s["out"] not in owned]
            items.sort(key=lambda t: t[0])
            defined: set[str] = set()
            for _, item in items:
                if isinstance(item, Part):
                    uses, makes = set(item.deps), set(item.site["returns"])
                else:
                    uses, makes = _step_refs(item), {item["out"]}
                if not uses <= defined:
                    culprit = item if isinstance(item, Part) else owned.get(sorted(uses - defined)[0])
                    if culprit is None:
                        raise AssembleError(f"graph.json: {item.get('out')} uses a value never defined")
                    bad = (culprit, "its nodes are not contiguous in the graph: a value it returns is needed "
                                    "before a value it takes")
                    break
                defined |= makes
        if bad is None:
            return [it for _, it in items], skipped
        skipped[bad[0].index] = bad[1]
        live = [p for p in live if p is not bad[0]]


def _line(step: dict[str, Any], names: set[str], where: str) -> str:
    return f"{step['out']} = {_call(step, names, where)}"


def render_model(graph: dict[str, Any], parts: list[Part]) -> tuple[str, dict[int, str]]:
    """`class ModelNew(Model)` (helpers included) for the graph with a block per placeable part; returns the text
    and {part index: why it stays as the original ops}."""
    items, skipped = plan(graph, parts)
    placed = [it for it in items if isinstance(it, Part)]
    params: list[str] = []
    body: list[str] = []
    names: set[str] = set()
    for item in items:
        if isinstance(item, Part):
            rets = item.site["returns"]
            target = ", ".join(rets) + ","
            deps = ", ".join(item.deps[: len(item.site["feeds"])])
            consts = ", ".join(item.deps[len(item.site["feeds"]):])
            body.append(f"{target} = self._ks_call({item.index}, self._ks_orig_{item.index}, "
                        f"({deps}{',' if deps else ''}), ({consts}{',' if consts else ''}))")
            names |= set(rets)
            continue
        op, out = item.get("op"), item["out"]
        where = f"graph step {out}"
        if op == "placeholder":
            pname = S._ident(item.get("target"), where) if isinstance(item.get("target"), str) else None
            if pname is None:
                raise AssembleError(f"{where}: bad parameter")
            default = f"={S.literal(item['default'], set(), set(), where)}" if "default" in item else ""
            params.append(pname + default)
            if pname != out:
                body.append(f"{out} = {pname}")
            names.add(out)
        elif op == "output":
            args = item.get("args") or [None]
            try:
                body.append(f"return {S.literal(args[0], names, set(), where)}")
            except S.SpecError as exc:
                raise AssembleError(str(exc)) from None
        else:
            body.append(_line(item, names, where))
            names.add(out)
    by_name = {s["out"]: s for s in graph["steps"]}
    methods = []
    for p in placed:
        inner = set(p.deps)
        lines = []
        for n in p.site["members"]:
            lines.append(_line(by_name[n], inner, f"part {p.name}, step {n}"))
            inner.add(n)
        rets = p.site["returns"]
        lines.append(f"return ({', '.join(rets)},)")
        sig = ", ".join(["self", *p.deps])
        methods.append(f"    def _ks_orig_{p.index}({sig}):\n        \"\"\"Part {p.index} ({p.name}) as the model "
                       f"computes it.\"\"\"\n" + "\n".join(f"        {ln}" for ln in lines) + "\n")
    forward = f"    def forward(self, {', '.join(params)}):\n" + "\n".join(f"        {ln}" for ln in body) + "\n"
    text = MODEL_CLASS + "\n" + forward + "\n" + "\n".join(methods)
    return text, skipped


HELPERS = '''

# ---------------------------------------------------------------- kernelsmith optimize: the assembled model
import math as _ks_math  # noqa: E402
import operator as _ks_operator  # noqa: E402
import warnings as _ks_warnings  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as _ks_F  # noqa: E402


class _KsPart:
    """A part's winning program bound to the model's own tensors: built on the meta device (no weights
    allocated, no random numbers drawn), each of its parameters and buffers is the model's tensor at the path
    the extraction recorded, rebound before every call (so `.to()`, `.half()` and loaded weights are followed)."""

    def __init__(self, root, factory, modules, tensors):
        with torch.device("meta"):
            impl = factory()
        self.root, self.impl, self.binds = root, impl, []
        state = [*impl.named_parameters(remove_duplicate=False), *impl.named_buffers(remove_duplicate=False)]
        for key, value in state:
            head = key.split(".")[0]
            if head in modules and key != head:
                src = modules[head] + key[len(head):]
            elif key in tensors:
                src = tensors[key]
            else:
                raise ValueError(f"the program's {key} has no counterpart in the model")
            owner_path, _, leaf = key.rpartition(".")
            src_path, _, src_leaf = src.rpartition(".")
            owner = impl.get_submodule(owner_path) if owner_path else impl
            src_owner = root.get_submodule(src_path) if src_path else root
            have = getattr(src_owner, src_leaf)
            if not isinstance(have, torch.Tensor) or tuple(have.shape) != tuple(value.shape):
                raise ValueError(f"the program's {key} is not shaped like the model's {src}")
            store = owner._parameters if leaf in owner._parameters else owner._buffers
            self.binds.append((store, leaf, src_owner, src_leaf))
        self.bind()

    def bind(self):
        for store, leaf, src_owner, src_leaf in self.binds:
            store[leaf] = getattr(src_owner, src_leaf)
        if self.impl.training != self.root.training:
            self.impl.train(self.root.training)

    def __call__(self, *inputs):
        self.bind()
        out = self.impl(*inputs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)
'''

MODEL_CLASS = '''

class ModelNew(Model):
    """The model with its evolved parts swapped in (`_KS_SWAPPED`); every other op is the model's own."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ks_attach()

    def _ks_attach(self, swapped=None):
        """Build the swapped parts for this instance (also for a model whose class was switched to ModelNew:
        the exported package's `apply`). A part that cannot be built warns and stays as the original ops."""
        return ModelNew._ks_attach_parts(self, swapped)

    def _ks_attach_parts(self, swapped=None):
        parts = []
        for k, (factory, modules, tensors) in enumerate(_KS_PARTS):
            part = None
            if factory is not None and k in (_KS_SWAPPED if swapped is None else swapped):
                try:
                    part = _KsPart(self, factory, modules, tensors)
                except Exception as exc:  # noqa: BLE001 - the part falls back to the original ops, said aloud
                    _ks_warnings.warn(f"kernelsmith: part {k} stays as the original ops: {exc}", stacklevel=2)
            parts.append(part)
        self.__dict__["_ks_parts"] = parts  # not submodules: the state dict stays the model's own
        return self

    def _ks_call(self, k, original, inputs, consts):
        part = self._ks_parts[k]
        return original(*inputs, *consts) if part is None else part(*inputs)
'''


def render_hooked(parts: list[Part], off: set[int]) -> tuple[str, dict[int, str]]:
    """`ModelNew` for a model fx could not trace: each part is one call of a torch.nn module, so the module's
    `forward` is wrapped (on the instance) — when a call has the recorded arguments (the same non-tensor values,
    tensors of the recorded shapes and dtypes) it goes through the part's block, any other call is the module's
    own. The state dict is untouched."""
    entries, skipped = [], {}
    for p in parts:
        site = p.site
        if p.index in off:
            entries.append("    None,")
            continue
        if site.get("kind") != "module":
            skipped[p.index] = "not one module call"
            entries.append("    None,")
            continue
        n = len(p.shapes)
        names = {f"x{i}" for i in range(n)}
        try:
            args = [S.literal(a, names, set(), f"part {p.name}") for a in site["args"]]
            kwargs = [f"{S._ident(k, 'site')!r}: {S.literal(v, names, set(), f'part {p.name}')}"
                      for k, v in site["kwargs"].items()]
            shapes = [(tuple(S._shape(sh, "site")), S._dtype(dt, "site").removeprefix("torch."))
                      for sh, dt in p.shapes]
        except S.SpecError as exc:
            skipped[p.index] = f"its call cannot be written: {exc}"
            entries.append("    None,")
            continue
        params = ", ".join(f"x{i}" for i in range(n))
        call = f"lambda {params}: (({', '.join(args)}{',' if len(args) == 1 else ''}), {{{', '.join(kwargs)}}})"
        entries.append(f"    ({site['path']!r}, {call}, {[tuple(o) for o in site['outputs']]!r}, "
                       f"{shapes!r}),  # part {p.index}: {p.name}")
    table = ("_KS_HOOKED = [  # per part: the module, its recorded call, its outputs' places, its tensors' shapes\n"
             + "\n".join(entries) + "\n]\n")
    return table + MODEL_CLASS + HOOKED_CLASS, skipped


HOOKED_CLASS = '''
    def _ks_hook(self):
        """Wrap each part's module call (an instance attribute `forward`: the module's class is untouched)."""
        for k, entry in enumerate(_KS_HOOKED):
            if entry is not None:
                path, call, outputs, shapes = entry
                module = self.get_submodule(path)
                module.forward = _ks_wrap(self, k, module.forward, call, outputs, shapes)

    def _ks_attach(self, swapped=None):
        out = ModelNew._ks_attach_parts(self, swapped)
        self._ks_hook()
        return out


def _ks_leaves(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _ks_leaves(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _ks_leaves(v)]
    return []


def _ks_same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_ks_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_ks_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _ks_rebuild(outputs, flat):
    if outputs == [()]:
        return flat[0]
    tree = {}
    for place, value in zip(outputs, flat):
        node = tree
        for i in place[:-1]:
            node = node.setdefault(i, {})
        node[place[-1]] = value

    def build(node):
        return tuple(build(node[i]) if isinstance(node[i], dict) else node[i] for i in sorted(node))
    return build(tree)


def _ks_wrap(root, k, original, call, outputs, shapes):
    """The module's forward, through part k's block when called as recorded."""
    def forward(*args, **kwargs):
        leaves = _ks_leaves((args, kwargs))
        if len(leaves) == len(shapes) and all(tuple(t.shape) == s and str(t.dtype) == "torch." + d
                                              for t, (s, d) in zip(leaves, shapes)):
            want_args, want_kwargs = call(*leaves)
            if _ks_same(tuple(args), want_args) and _ks_same(kwargs, want_kwargs):
                flat = root._ks_call(k, lambda *_: tuple(_ks_leaves(original(*args, **kwargs))), leaves, ())
                return _ks_rebuild(outputs, flat)
        return original(*args, **kwargs)
    return forward
'''


def render_file(model_source: str, graph: dict[str, Any] | None, parts: list[Part]) -> tuple[str, dict[int, str]]:
    """The whole `optimized.py` and {part index: why it keeps the original ops}."""
    try:
        model_tree = pyast.parse(model_source)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise AssembleError(f"the model file does not parse: {exc}") from None
    assert isinstance(model_tree, ast.Module)
    taken = module_bindings(model_tree)
    taken.update({n: f"ks:{n}" for n in ("ModelNew", "_KsPart", "_KS_PARTS", "_KS_SWAPPED", "_ks_math",
                                          "_ks_operator", "_ks_warnings", "_ks_F")})
    taken.setdefault("torch", "import torch")
    model_futures = [a.name for n in model_tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"
                     for a in n.names]
    programs: list[str] = []
    entries: list[str] = []
    skipped: dict[int, str] = {}
    for p in parts:
        if p.code is None:
            entries.append("(None, {}, {})")
            continue
        try:
            code, bound, futures = rename_program(p.code, f"_ks{p.index}_", taken)
        except AssembleError as exc:
            skipped[p.index] = str(exc)
            entries.append("(None, {}, {})")
            continue
        if [f for f in futures if f not in model_futures]:
            skipped[p.index] = f"the program needs `from __future__ import {', '.join(futures)}`"
            entries.append("(None, {}, {})")
            continue
        taken.update(bound)
        factory = f"_ks{p.index}_ModelNew"
        if factory not in bound:
            skipped[p.index] = "the program defines no ModelNew"
            entries.append("(None, {}, {})")
            continue
        programs.append(f"\n\n# ---------------------------------------------------------------- part {p.index}: "
                        f"{p.name}\n{code}\n")
        entries.append(f"({factory}, {p.site['modules']!r}, {p.site['tensors']!r})")
    live = [p for p in parts if p.index not in skipped]
    model_text, not_placed = render_model(graph, live) if graph is not None else render_hooked(parts, set(skipped))
    skipped.update(not_placed)
    swapped = sorted(p.index for p in parts if p.swap and p.code is not None and p.index not in skipped)
    table = "_KS_PARTS = [\n" + "".join(f"    {e},  # part {i}\n" for i, e in enumerate(entries)) + "]\n"
    switch = "_KS_SWAPPED = {" + ", ".join(map(str, swapped)) + "}  # the parts whose winner runs\n"
    text = (model_source.rstrip("\n") + "\n" + HELPERS + "".join(programs) + "\n\n" + table + switch
            + model_text)
    try:
        pyast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise AssembleError(f"optimized.py does not parse: {exc}") from None
    return text, skipped


def set_swapped(text: str, swapped: list[int]) -> str:
    """The same file with another set of parts switched on (`_KS_SWAPPED`)."""
    new, n = re.subn(r"^_KS_SWAPPED = \{[0-9, ]*\}", "_KS_SWAPPED = {" + ", ".join(map(str, sorted(swapped))) + "}",
                     text, count=1, flags=re.M)
    if n != 1:
        raise AssembleError("optimized.py has no _KS_SWAPPED line")
    return new
