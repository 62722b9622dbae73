"""Demonstrations: explanation cells that only measure or show, which grading leaves out unless asked.

Grading (graders/execute.py) leaves a submitted cell out only if the instructor's source has a cell of its id tagged
"demonstration" with exactly its code (a student's own or edited cell always runs); no later cell that runs, nor a
function an earlier cell defined, reads a name it binds before binding it again (any access to the namespace —
`globals()`, `__main__`, `sys.modules`, `user_ns`, frames, `eval`, `In`, `_`, a magic — reads them all); and it leaves
nothing else behind: no attribute assigned, no item of an object it did not make, no `global`, no magic, no file
written, no process setting a `finally` does not restore, no import no earlier cell makes (but the standard library's),
no method called on an earlier cell's object that a later cell reads. tests/test_demonstrations.py and the class of
tests/classroom.py check what reading cannot see (what a helper does to what it is handed) by grading with and without.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import symtable
import sys
from dataclasses import dataclass, field
from functools import lru_cache

TAG = "demonstration"
SOURCE = "GRADER_DEMONSTRATIONS_SOURCE"  # the instructor's notebook whose demonstrations may be left out (unset: none)
SKIPPED = "grader_demonstrations_skipped"  # the indices PrepareCells leaves out, in nbconvert's resources
# Names, modules and attributes through which a cell reads the whole namespace (any access reads everything), or
# the history a skipped cell would have left; sys.modules is any `.modules` not called (a Module's .modules() is).
NAMESPACE_MODULES = {"__main__", "builtins", "gc", "ctypes", "importlib", "IPython", "ipykernel"}  # inspect: by frames
EVERYTHING = {"globals", "locals", "vars", "dir", "eval", "exec", "compile", "get_ipython", "__import__", "__builtins__", "In",
              "Out", "_ih", "_oh", "_dh", "_", "__", "___", "_i", "_ii", "_iii"} | NAMESPACE_MODULES
NAMESPACE_ATTRIBUTES = {"modules", "_getframe", "_current_frames", "user_ns", "user_global_ns", "__globals__", "__dict__",
                        "f_globals", "f_locals", "f_back", "tb_frame", "gi_frame", "__getattribute__", "attrgetter"}
HISTORY = re.compile(r"^_i?\d+$")
# Calls that write files or change the process, on anything; FILE_CALLS only on FILE_MODULES (a str's replace writes nothing).
WRITES = {"write_text", "write_bytes", "touch", "mkdir", "makedirs", "unlink", "rmdir", "removedirs", "rmtree", "symlink", "umask",
          "symlink_to", "hardlink_to", "chmod", "chown", "truncate", "save", "savez", "savez_compressed", "savetxt", "savefig",
          "to_csv", "to_json", "to_parquet", "to_pickle", "chdir", "system", "popen", "putenv", "unsetenv", "mkfifo", "mknod"}
FILE_MODULES = {"os", "shutil", "pathlib", "Path", "pickle", "json"}
FILE_CALLS = {"copy", "copy2", "copyfile", "copytree", "move", "rename", "renames", "replace", "remove", "link", "dump"}
SETTINGS = {"manual_seed", "seed", "filterwarnings", "simplefilter", "resetwarnings", "use_deterministic_algorithms", "rc", "use",
            "register"}  # and every set_...: a process setting a later cell would see
MUTATORS = {"append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear", "remove", "discard", "add", "sort",
            "reverse"}


@dataclass
class Cell:
    body: list = field(default_factory=list)  # its statements, each with the names it reads (`reads`)
    everything: bool = False  # it may read any name (it reaches the namespace, or a part of it could not be read)
    binds: set[str] = field(default_factory=set)  # every module-level name it binds or deletes, anywhere
    imported: set[str] = field(default_factory=set)  # those an import binds
    assigned: set[str] = field(default_factory=set)  # those anything else binds
    modules: set[str] = field(default_factory=set)  # modules its imports load
    problems: list[str] = field(default_factory=list)  # why it could not be left out, whatever follows
    changes: dict[str, str] = field(default_factory=dict)  # name -> how the cell may change that object
    deferred: set[str] = field(default_factory=set)  # module-level names its functions and lambdas read when called


def tagged(instructor) -> dict[str, str]:
    """The instructor's demonstrations: cell id -> source (explanation code cells only)."""
    return {cell.get("id"): cell.source for cell in instructor.cells
            if cell.cell_type == "code" and TAG in cell.metadata.get("tags", []) and not cell.metadata.get("nbgrader")}


def kept_unchanged(cells, instructor=None) -> list:
    """The submitted cells that are one of the demonstrations of `instructor` (or SOURCE's; none: none), unchanged in an edition."""
    import nbformat

    from i18n.catalog import code_in_editions

    if instructor is None and not os.environ.get(SOURCE):
        return []
    instructor = instructor or nbformat.read(os.environ[SOURCE], as_version=4)
    demonstrations, editions = tagged(instructor), code_in_editions(instructor)
    return [cell for cell in cells if cell.cell_type == "code" and not cell.metadata.get("nbgrader")
            and cell.get("id") in demonstrations and cell.source in editions[cell.get("id")]]


def skippable(cells, candidates: list[int]) -> set[int]:
    """Which candidate cells (indices into `cells`) to leave out, the last first: one that runs is later for the others."""
    skipped: set[int] = set()
    try:
        for index in sorted(candidates, reverse=True):
            if not reasons(cells, index, skipped, set(candidates)):
                skipped.add(index)
    except Exception:  # noqa: BLE001 - a submission the analysis cannot follow runs every cell
        return set()
    return skipped


def reasons(cells, index: int, skipped=frozenset(), candidates=frozenset()) -> list[str]:
    """Why cell `index` must run: what a later cell that runs (not in `skipped`) could miss without it. The earlier
    cells that import modules are those that run in any case (not in `candidates`)."""
    demo = analyse(cells[index].source)
    found = list(demo.problems)
    earlier = {i: analyse(c.source) for i, c in enumerate(cells[:index]) if c.cell_type == "code"}
    loaded = set().union(*(cell.modules for i, cell in earlier.items() if i not in candidates))
    found += [f"it imports {m}, which no earlier cell imports" for m in sorted(demo.modules - loaded)
              if m.split(".")[0] not in sys.stdlib_module_names]
    assigned, deferred = (set().union(*(getattr(c, kind) for c in earlier.values())) for kind in ("assigned", "deferred"))
    changes = {name: how for name, how in demo.changes.items() if name in assigned}  # (assigned: not what an import made)
    later = [analyse(c.source) for i, c in enumerate(cells) if i > index and c.cell_type == "code" and i not in skipped]
    found += [f"a later cell reads {name}, which it {'binds' if name in demo.binds else changes[name]}"
              for name in sorted(read_later(later, demo.binds | set(changes)) | (demo.binds & deferred))]
    return found


def read_later(later: list[Cell], names: set[str]) -> set[str]:
    """Which of `names` a later cell reads before a cell (or that one, earlier) surely binds it again."""
    found, bound = set(), set()
    for cell in later:
        reads, after = _flow(cell.body, bound)
        if cell.everything or reads & EVERYTHING or any(map(HISTORY.match, reads)):
            found |= names - bound  # what the cell itself binds may be read before it does
        found, bound = found | (reads & names), after
    return found


def _flow(statements, bound: set) -> tuple[set[str], set[str]]:
    """The names these statements read before surely binding them (`bound` are already), and those bound after."""
    reads = set()
    for node in statements:
        more, bound = _flow_one(node, set(bound))
        reads |= more
    return reads, bound


def _flow_one(node, bound: set) -> tuple[set[str], set[str]]:
    if isinstance(node, (ast.For, ast.AsyncFor)):  # the body runs with its target bound, maybe never
        body, _ = _flow(node.body, bound | _targets(node.target))
        return (node.iter.reads - bound) | body | _flow(node.orelse, bound)[0], bound
    if isinstance(node, ast.While):
        return (node.test.reads - bound) | _flow(node.body, bound)[0] | _flow(node.orelse, bound)[0], bound
    if isinstance(node, ast.If):
        (body, after_body), (other, after_other) = _flow(node.body, bound), _flow(node.orelse, bound)
        return (node.test.reads - bound) | body | other, after_body & after_other
    if isinstance(node, (ast.With, ast.AsyncWith)):
        heads = set().union(*(item.context_expr.reads for item in node.items)) - bound
        targets = set().union(*(_targets(item.optional_vars) for item in node.items if item.optional_vars))
        body, after = _flow(node.body, bound | targets)
        return heads | body, after
    if isinstance(node, ast.Try):
        body, after_body = _flow(node.body, bound)
        handlers = set().union(*((_flow(h.body, bound | {h.name} if h.name else bound)[0]
                                  | ((h.type.reads - bound) if h.type else set())) for h in node.handlers))
        final, after = _flow(node.finalbody, bound)
        return body | handlers | _flow(node.orelse, after_body)[0] | final, after
    return node.reads - bound, bound | _sure_binds(node)  # a simple statement, a def, a class, a match


@lru_cache(maxsize=1024)
def analyse(source: str) -> Cell:
    """What a cell reads, binds and changes, read from its source (as IPython runs it: magics become calls)."""
    cell = Cell()
    try:
        tree, plain = _parse(source)
        if tree is None:  # nothing of it runs: IPython compiles the whole cell first
            cell.problems.append("it is not Python")
            return cell
        if not plain:
            cell.problems.append("it uses a magic or a shell escape")
        _annotate(tree.body)
        cell.body = tree.body
        _whole(tree, cell)
    except Exception:  # noqa: BLE001 - too deep, too big, or IPython failed on it: it may read anything
        cell.body, cell.everything = [], True
        cell.problems.append("it cannot be read")
    return cell


def _annotate(statements) -> None:
    """Each simple statement, and each header of a compound one, gets the module-level names it reads: `reads`."""
    for node in statements:
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try)):
            heads = [getattr(node, "iter", None), getattr(node, "test", None)] + \
                [item.context_expr for item in getattr(node, "items", [])] + [h.type for h in getattr(node, "handlers", [])]
            for expr in filter(None, heads):
                expr.reads = _reads(symtable.symtable(ast.unparse(expr), "<cell>", "eval"))
            for part in ("body", "orelse", "finalbody"):
                _annotate(getattr(node, part, []))
            for handler in getattr(node, "handlers", []):
                _annotate(handler.body)
        else:
            node.reads = _reads(symtable.symtable(ast.unparse(node), "<cell>", "exec")) | _augmented(node)


def _parse(source: str):
    """The cell's syntax tree (None: not Python, even for IPython, so none of it runs), and whether it is plain
    Python (no magic IPython had to rewrite). A tree too deep to build here may build in the kernel: RecursionError."""
    with contextlib.suppress(SyntaxError, ValueError):
        return ast.parse(source), True
    from IPython.core.inputtransformer2 import TransformerManager

    with contextlib.suppress(SyntaxError, ValueError):
        return ast.parse(TransformerManager().transform_cell(source)), False
    return None, False


def _reads(table) -> set[str]:
    """The module-level names a statement reads: its own, and those its functions, classes and comprehensions read."""
    return {s.get_name() for s in table.get_symbols() if (s.is_referenced() and (table.get_type() == "module" or s.is_global()))
            or s.is_declared_global()}.union(*map(_reads, table.get_children()))


def _augmented(node) -> set[str]:
    """The module-level names that `x += ...` and `del x` read (symtable counts them as bindings only)."""
    found, stack = set(), [node]
    while stack:
        part = stack.pop()
        if isinstance(part, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue  # their names are their own, but for a `global` (symtable tells)
        if isinstance(part, ast.AugAssign) and isinstance(part.target, ast.Name):
            found.add(part.target.id)
        elif isinstance(part, ast.Delete):
            found |= {t.id for t in part.targets if isinstance(t, ast.Name)}
        stack.extend(ast.iter_child_nodes(part))
    return found


def _sure_binds(node) -> set[str]:
    """The names a simple statement binds whenever it ends without error."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name.split(".")[0]) for a in node.names if a.name != "*"}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
    return set().union(*map(_targets, targets))


def _targets(target) -> set[str]:
    """The names an assignment target binds (not those of an item or attribute it assigns)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*map(_targets, target.elts))
    return _targets(target.value) if isinstance(target, ast.Starred) else set()


def _whole(tree, cell: Cell) -> None:
    """What the cell as a whole binds, imports and changes."""
    table = symtable.symtable(ast.unparse(tree), "<cell>", "exec")
    cell.imported = {s.get_name() for s in table.get_symbols() if s.is_imported()}
    cell.assigned = {s.get_name() for s in table.get_symbols() if s.is_assigned()}
    cell.binds = cell.imported | cell.assigned
    local, cell.deferred = _bound_anywhere(table), _deferred(table)
    restored = _restored_settings(tree)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        cell.everything = cell.everything or _reaches_namespace(node, called)
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            cell.problems.append("it declares a global")
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            cell.problems.append(f"it assigns an attribute ({ast.unparse(node)})")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) and _owner(node) not in local:
            cell.problems.append(f"it assigns an item of an object it did not make ({ast.unparse(node)})")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            _imports(node, cell)
        elif isinstance(node, ast.Call):
            _call(node, cell, local, restored)
    cell.everything = cell.everything or any(m.split(".")[0] in NAMESPACE_MODULES for m in cell.modules)


def _reaches_namespace(node, called: set) -> bool:
    """Whether a node reads the namespace by an attribute (sys.modules, frames, user_ns), or a getattr of one (any on sys, os)."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and node.args:
        name = getattr(node.args[1], "value", None) if len(node.args) > 1 else None
        return name in NAMESPACE_ATTRIBUTES if isinstance(name, str) else getattr(node.args[0], "id", "") in ("sys", "os")
    return isinstance(node, ast.Attribute) and node.attr in NAMESPACE_ATTRIBUTES and (node.attr != "modules" or id(node) not in called)


def _deferred(table, inside: bool = False) -> set[str]:  # module-level names the cell's functions read when called
    inside = inside or table.get_type() == "function" and table.get_name() not in ("listcomp", "dictcomp", "setcomp", "genexpr")
    return {s.get_name() for s in table.get_symbols() if inside and s.is_global() and s.is_referenced()}.union(
        *(_deferred(child, inside) for child in table.get_children()))


def _bound_anywhere(table) -> set[str]:
    """Names the cell binds in any of its scopes (a function's parameters too): the objects it makes (not modules)."""
    return {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_parameter()}.union(
        *map(_bound_anywhere, table.get_children()))


def _imports(node, cell: Cell) -> None:
    if isinstance(node, ast.ImportFrom) and (node.level or any(a.name == "*" for a in node.names)):
        cell.problems.append("it imports relatively or with *")
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
        [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]  # an imported name may be a submodule
    cell.modules |= {".".join(name.split(".")[:i]) for name in names for i in range(1, name.count(".") + 2)}


def _call(node, cell: Cell, local: set[str], restored: set[str]) -> None:
    func, owner, spelled = node.func, _owner(node.func), ast.unparse(node.func)
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name == "open" and _writing_mode(node):
        cell.problems.append("it opens a file to write")
    elif name in WRITES or (name in FILE_CALLS and owner in FILE_MODULES):
        cell.problems.append(f"it may write a file ({spelled})")
    elif owner is None or owner in local:  # an object the cell made
        return
    elif name.startswith("set_") or name in SETTINGS:
        if spelled not in restored:
            cell.problems.append(f"it changes a setting of the process ({spelled})")
    elif name in MUTATORS and isinstance(func, ast.Attribute) and not isinstance(func.value, ast.Name):
        cell.problems.append(f"it changes an object of a module ({spelled})")
    else:  # a change to an earlier cell's object, if it is one (reasons() tells)
        cell.changes.setdefault(owner, f"calls {spelled} on" if isinstance(func, ast.Attribute) else "calls")


def _owner(node) -> str | None:
    """The name whose object a call's function is reached from by attributes and items (None: a fresh object)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _writing_mode(node) -> bool:
    mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
    if mode is None:
        return any(k.arg is None for k in node.keywords)  # **options may hold a mode
    return not (isinstance(mode, ast.Constant) and isinstance(mode.value, str) and not set(mode.value) & set("wax+"))


def _restored_settings(tree) -> set[str]:
    """set_... calls that a `finally` calls again with what the matching get_... returned before: restored."""
    saved = {t.id: ast.unparse(n.value.func) for n in ast.walk(tree) if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Call) and not n.value.args for t in n.targets if isinstance(t, ast.Name)}
    calls = [c for n in ast.walk(tree) for s in getattr(n, "finalbody", []) for c in ast.walk(s) if isinstance(c, ast.Call)]
    return {ast.unparse(c.func) for c in calls if len(c.args) == 1 and isinstance(c.args[0], ast.Name)
            and saved.get(c.args[0].id) == ast.unparse(c.func).replace("set_", "get_", 1)}
