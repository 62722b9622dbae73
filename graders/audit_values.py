"""What a name or expression in a student's code can stand for: values, not spellings (for graders/audit.py).

A value is a dotted path from a module (`helpers.ddp.reference_train`, `builtins.getattr`). A name can stand for
every value any binding in the notebook gives it, wherever that binding is (an import, `=`, `:=`, unpacking,
a later cell or a branch that never runs: the union, so no order of cells hides one); a builtin's name stands
for the builtin too. `getattr(x, "name")`, `operator.attrgetter("name")(x)` and `__import__("name")` resolve like
the attribute or import they spell. A module, or a builtin that reaches names or code (SENSITIVE), that goes
anywhere its uses can no longer be followed — an argument, a container, a default, a return, an object's
attribute — escapes: the audit flags it, because whatever reads it later is out of sight.
"""

from __future__ import annotations

import ast
import builtins
import sys
import types

BUILTINS = set(dir(builtins))
SENSITIVE = {f"builtins.{name}" for name in ("getattr", "setattr", "delattr", "eval", "exec", "compile", "vars",
                                               "globals", "locals", "__import__", "open", "breakpoint")}
SENSITIVE |= {"operator.attrgetter", "operator.methodcaller", "importlib.import_module"}
# Calls that may be handed a module without losing it: they only look at it.
LOOKERS = {f"builtins.{name}" for name in ("print", "repr", "str", "type", "id", "isinstance", "issubclass",
                                            "callable", "dir", "help")}
NAME_READERS = {"builtins.getattr", "builtins.hasattr"}  # followed: their first argument with a literal name
BINDINGS = (ast.Assign, ast.NamedExpr, ast.AnnAssign, ast.Import, ast.ImportFrom)
MAX_VALUES = 64  # per name: a binding such as `a = a.b` in a loop would otherwise grow without end
MAX_PARTS = 12


class Values:
    def __init__(self, aliases: dict[str, str], modules=()):
        self.names = {(None, name): {value} for name, value in aliases.items()}  # (scope, name): the module's: None
        self.modules = set(modules)

    def learn(self, trees) -> None:
        """Every binding of every tree, followed until nothing new is learnt (aliases of aliases)."""
        for tree in trees:
            mark_scopes(tree)
        bindings = [node for tree in trees for node in ast.walk(tree) if isinstance(node, BINDINGS)]
        for _ in range(MAX_PARTS):
            before = {name: len(values) for name, values in self.names.items()}
            for node in bindings:
                self._bind(node)
            if before == {name: len(values) for name, values in self.names.items()}:
                return

    def resolve(self, node) -> set[str]:
        """The dotted values an expression can stand for (empty: none the audit knows)."""
        if isinstance(node, ast.Name):
            local = getattr(node, "scope", None)
            return self.names.get((local, node.id), set()) | (
                {f"builtins.{node.id}"} if node.id in BUILTINS and local is None else set())
        if isinstance(node, ast.Attribute):
            return _extend(self.resolve(node.value), node.attr)
        if isinstance(node, ast.NamedExpr):
            return self.resolve(node.value)
        if isinstance(node, ast.IfExp):
            return self.resolve(node.body) | self.resolve(node.orelse)
        if isinstance(node, ast.BoolOp):
            return set().union(*map(self.resolve, node.values))
        if isinstance(node, ast.Call):
            return self._returned(node)
        return set()

    def is_module(self, value: str) -> bool:
        return value in self.modules or isinstance(sys.modules.get(value), types.ModuleType)

    def escapes(self, tree, parents: dict):
        """The nodes of `tree` whose module or sensitive builtin goes where its uses cannot be followed."""
        for node in ast.walk(tree):
            if isinstance(node, (ast.Name, ast.Attribute, ast.Call)) and isinstance(getattr(node, "ctx", ast.Load()), ast.Load):
                values = self.resolve(node)
                if any(self.is_module(v) or v in SENSITIVE for v in values) and not self._followed(node, parents):
                    yield node

    def _followed(self, node, parents: dict) -> bool:
        parent = parents.get(node)
        while isinstance(parent, (ast.IfExp, ast.BoolOp)) and node is not getattr(parent, "test", None):
            node, parent = parent, parents.get(parent)
        if isinstance(parent, ast.Attribute) or isinstance(parent, (ast.Expr, ast.Compare)):
            return True
        if isinstance(parent, ast.keyword):
            node, parent = parent, parents.get(parent)
        if isinstance(parent, ast.Call):
            called = self.resolve(parent.func)
            return (node is parent.func or bool(called & LOOKERS)
                    or bool(called & NAME_READERS and parent.args and node is parent.args[0]))
        if isinstance(parent, (ast.Assign, ast.NamedExpr)) or (isinstance(parent, ast.AnnAssign) and parent.value is node):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            return all(isinstance(t, ast.Name) for t in targets)
        if isinstance(parent, (ast.Tuple, ast.List)) and isinstance(parents.get(parent), ast.Assign):
            return all(_unpacks(t, parent) for t in parents[parent].targets)
        return False

    def _returned(self, node: ast.Call) -> set[str]:
        """What a call returns, where it reaches a name by its spelling: getattr, attrgetter, __import__."""
        called = self.resolve(node.func)
        name = _literal(node.args[1]) if len(node.args) > 1 else None
        if "builtins.getattr" in called and name is not None:
            return _extend(self.resolve(node.args[0]), name)
        module = _literal(node.args[0]) if node.args else None
        if module is not None and called & {"builtins.__import__", "importlib.import_module"}:
            return {module, module.split(".")[0]}
        if isinstance(node.func, ast.Call) and node.args and self.resolve(node.func.func) & {"operator.attrgetter"}:
            paths = [_literal(a) for a in node.func.args]
            return {v for p in paths if p for v in _extend(self.resolve(node.args[0]), p)}
        return set()

    def _bind(self, node) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind_target(target, node.value)
        elif isinstance(node, (ast.NamedExpr, ast.AnnAssign)) and node.value is not None:
            self._bind_target(node.target, node.value)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                self.modules.update(".".join(alias.name.split(".")[:i]) for i in range(1, alias.name.count(".") + 2))
                self._add(node, alias.asname or alias.name.split(".")[0], alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            self.modules.add(node.module)
            for alias in node.names:
                if alias.name != "*":
                    self._add(node, alias.asname or alias.name, f"{node.module}.{alias.name}")

    def _bind_target(self, target, value) -> None:
        if isinstance(target, ast.Name):
            for resolved in self.resolve(value):
                self._add(target, target.id, resolved)
        elif isinstance(target, (ast.Tuple, ast.List)) and _unpacks(target, value):
            for element, part in zip(target.elts, value.elts):
                self._bind_target(element, part)

    def _add(self, node, name: str, value: str) -> None:
        values = self.names.setdefault((getattr(node, "scope", None), name), set())
        if len(values) < MAX_VALUES and value.count(".") < MAX_PARTS:
            values.add(value)


def mark_scopes(tree, scopes=()) -> None:
    """Each name, and each import, gets `scope`: the function, lambda, class or comprehension whose own name it is
    (its id), or None for the module's (the notebook's namespace)."""
    for node in ast.iter_child_nodes(tree):
        inner = scopes
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
                             ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner = (*scopes, (id(node), _own_names(node)))
        if isinstance(node, ast.Name):
            node.scope = next((key for key, names in reversed(scopes) if node.id in names), None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            node.scope = scopes[-1][0] if scopes else None
        mark_scopes(node, inner)
        for outer in _evaluated_outside(node) if inner is not scopes else ():
            mark_scopes(ast.Expr(outer), scopes)


def _evaluated_outside(scope) -> list:
    """The parts of a scope's node that run in the scope around it: defaults, decorators, bases, the first iterable."""
    if isinstance(scope, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return [scope.generators[0].iter]
    parts = [*getattr(scope, "decorator_list", []), *getattr(scope, "bases", []),
             *(k.value for k in getattr(scope, "keywords", []))]
    if not isinstance(scope, ast.ClassDef):
        parts += [*scope.args.defaults, *filter(None, scope.args.kw_defaults)]
    return parts


def _own_names(scope) -> set[str]:
    """The names a scope binds itself: parameters, targets, imports, definitions (less those declared global)."""
    names, declared, stack = set(), set(), list(ast.iter_child_nodes(scope))
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        arguments = scope.args
        names |= {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                                  arguments.vararg, arguments.kwarg) if a}
        stack = list(scope.body) if isinstance(scope.body, list) else [scope.body]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            stack.extend(node.decorator_list)
        elif not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) or scope is node:
            stack.extend(ast.iter_child_nodes(node))
    return names - declared


def parents_of(tree) -> dict:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _unpacks(target, value) -> bool:
    """`a, b = x, y`: each name gets its own value (no starred part shifts them)."""
    return (isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))
            and len(target.elts) == len(value.elts)
            and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts)))


def _extend(values: set[str], attribute: str) -> set[str]:
    return {f"{value}.{attribute}" for value in values if value.count(".") < MAX_PARTS}


def _literal(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
