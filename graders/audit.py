"""What a submission's own code reaches for, read from its source outside the kernel.

The judge (graders/judge.py) cannot tell honest data from data that the right function computed by a
route an exercise forbids: the course's own reference implementations, torch internals, or names reached
dynamically so that no rule can see them. So it also reads the code the student wrote — every code cell of
the graded notebook that is not one of the instructor's — and flags, for review by a person, cells that

* call a reference the judges use (`ddp.reference_train`, `amp.scaler_trajectory`, ...) or a function an
  exercise forbids (`chunk` in the split exercises, `DistributedSampler` in the shard exercise);
* reach a private part of a library (`torch._C...`), or names dynamically (`getattr` with a computed name,
  `__import__` of a computed module, `importlib`, `eval`/`exec`, frames, `sys.modules`, `__dict__`);
* change how the kernel or a library behaves (IPython hooks, `get_ipython()`, assignments to a module's
  attributes, `sys.settrace`, writing Python files to import).

A flag never changes a score: a wrong answer fails its judgement whatever route it took; a right one by a
forbidden route scores and is flagged. The words of a flag are the grader's own (an exercise's grade id from
the instructor's notebook, a rule from this module), never text from the submission.
"""

from __future__ import annotations

import ast

# Helper functions the judges use as ground truth: an answer that calls one hands the judge its own answer.
REFERENCES = {
    "helpers.ddp": {"reference_train", "large_batch_reference", "global_batch", "linear_scaled_lr"},
    "helpers.ddp_reference": {"reference_train", "large_batch_reference", "global_batch", "linear_scaled_lr"},
    "helpers.amp": {"scaler_trajectory", "representable", "autocast_dtypes", "accumulation_reference",
                    "saved_activation_bytes"},
    "helpers.accel": {"reference"},
    "helpers.memory": {"measure_step"},
    "helpers.xla": {"count_compiles"},
    "helpers.grading": {"reference", "outcome", "encode", "dumps", "collect", "kernel_changes"},
}
# Functions an exercise asks the student to do without (by the grade id of its solution cell).
# Lesson 3's hidden tests read torch's autocast state as the evidence of the device autocast was entered for: its
# setters would write that evidence by hand (torch.autocast, the exercises' tool, sets it for them).
AUTOCAST_SETTERS = {"set_autocast_enabled", "set_autocast_dtype", "set_autocast_cpu_enabled", "set_autocast_cpu_dtype",
                    "set_autocast_gpu_dtype", "set_autocast_xla_enabled", "set_autocast_xla_dtype"}
FORBIDDEN_IN = {
    "split_sizes": {"chunk", "tensor_split", "array_split", "split_sizes", "split_indices"},
    "shard": {"DistributedSampler"},
    "activation_ratio": AUTOCAST_SETTERS,
    "amp_step": AUTOCAST_SETTERS,
}
DYNAMIC_CALLS = {"eval", "exec", "compile", "globals", "locals", "vars", "breakpoint", "delattr", "setattr"}
NAME_CALLS = {"getattr", "hasattr"}  # fine with a literal public name
IMPORT_CALLS = {"__import__", "import_module"}  # fine with a literal module name
MODULES = {  # importing these is reaching the machinery that runs the code, not the lesson's libraries
    "importlib", "imp", "runpy", "pkgutil", "zipimport", "inspect", "ctypes", "gc", "linecache", "marshal",
    "pickle", "dill", "cloudpickle", "builtins", "IPython", "ipykernel", "traitlets", "types", "code", "codeop",
    "dis", "subprocess", "multiprocessing.reduction", "sysconfig", "site", "atexit", "signal", "faulthandler",
}
SYS_ATTRIBUTES = {"modules", "meta_path", "path_hooks", "path_importer_cache", "settrace", "setprofile",
                  "addaudithook", "excepthook", "displayhook", "_getframe", "stdout", "stderr", "__stdout__",
                  "__stderr__", "path"}
PUBLIC_DUNDERS = {"__init__", "__name__", "__qualname__", "__doc__", "__len__", "__iter__", "__next__",
                  "__getitem__", "__enter__", "__exit__", "__call__", "__repr__", "__str__"}
PUBLIC_UNDERSCORED = {"os._exit"}  # documented functions whose names start with an underscore
FRAME_ATTRIBUTES = {"f_back", "f_locals", "f_globals", "f_code", "tb_frame", "tb_next", "gi_frame", "cr_frame",
                    "ag_frame", "co_consts", "co_code"}
# The magics students use that change nothing of how cells run: name -> which arguments are fine.
MAGICS = {**dict.fromkeys(("matplotlib", "autoreload", "xmode", "time", "timeit", "pip", "precision", "pprint",
                           "who", "whos", "env", "pwd", "ls", "capture", "debug", "pdb", "history"),
                          lambda line: True),
          "config": lambda line: line.strip().startswith("InlineBackend."),
          "load_ext": lambda line: line.strip() == "autoreload"}
SETTABLE = ("torch.backends.", "matplotlib.rcParams", "os.environ", "plt.rcParams", "warnings.filters")


def audit(cells: list[tuple[str, str, set]], course_modules=frozenset()) -> list[str]:
    """Flags for the student's code cells: [(where, source, forbidden)], `where` naming the cell in the
    grader's words and `forbidden` the functions that the exercises it can serve ask to do without.
    `course_modules`: top-level modules the instructor's notebook imports (known even where not installed)."""
    aliases = dict(ALIASES)
    found = []
    for where, source, forbidden in cells:
        tree = _parse(source)
        if tree is None:  # a cell that does not compile runs nothing
            continue
        found += [f"{where}: {rule}" for rule in _rules(tree, aliases, forbidden, frozenset(course_modules))]
    return list(dict.fromkeys(found))


# The names the lessons' import cells bind (instructor code, the same in every lesson): module aliases.
ALIASES = {"dp": "helpers.dataparallel", "ddp": "helpers.ddp", "amp": "helpers.amp", "accel": "helpers.accel",
           "memory": "helpers.memory", "xla": "helpers.xla", "grading": "helpers.grading", "torch": "torch",
           "sys": "sys", "os": "os", "DistributedSampler": "torch.utils.data.DistributedSampler",
           "launch": "helpers.launch", "checkpoints": "helpers.checkpoints", "models": "helpers.models",
           "data": "helpers.data", "F": "torch.nn.functional", "nn": "torch.nn", "dist": "torch.distributed",
           "mp": "torch.multiprocessing", "plt": "matplotlib.pyplot", "json": "json", "tempfile": "tempfile"}


def course_modules(solution) -> frozenset:
    """The top-level modules the instructor's notebook imports (torch_xla, say, on a grader without it)."""
    found = set()
    for cell in solution.cells:
        tree = _parse(cell.source) if cell.cell_type == "code" else None
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return frozenset(found)


def _parse(source: str):
    """The cell as Python: IPython's own transformer turns magics and shell escapes into calls first."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - without IPython the cell is read as written
        pass
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _rules(tree, aliases: dict, forbidden: set, course: frozenset):
    magic_receivers = {id(node.func.value) for node in ast.walk(tree) if _is_usual_magic(node)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from _imports(node, aliases, forbidden, course)
        elif isinstance(node, ast.Assign):
            _follow_alias(node, aliases)
            for target in node.targets:
                yield from _assignment(target, aliases)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            yield from _assignment(node.target, aliases)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                yield from _assignment(target, aliases)
        elif isinstance(node, ast.Call) and id(node) not in magic_receivers:
            yield from _call(node, aliases)
        elif isinstance(node, ast.Attribute):
            yield from _attribute(node, aliases, forbidden)
        elif isinstance(node, ast.Name):
            yield from _name(node, aliases, forbidden)


def _imports(node, aliases: dict, forbidden: set, course: frozenset):
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield from _module_rule(alias.name, course)
            aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        return
    if node.level:
        yield "imports from a relative module"
        return
    module = node.module or ""
    yield from _module_rule(module, course)
    for alias in node.names:
        full = f"{module}.{alias.name}"
        if alias.name == "*":
            yield "imports every name of a module (*)"
            continue
        yield from _module_rule(full, course)
        yield from _reference_rule(full)
        if alias.name in forbidden:
            yield "calls a function this exercise asks you to do without"
        aliases[alias.asname or alias.name] = full


def _module_rule(module: str, course: frozenset = frozenset()):
    top = module.split(".")[0]
    if module in MODULES or top in MODULES:
        yield "imports the machinery that runs code (a module the lessons' answers never need)"
    elif top and top not in course and not _installed(top):
        yield "imports a module the course does not have (one the notebook wrote itself?)"


def _installed(top: str) -> bool:
    """Whether the grader's own environment has this top-level module (found, never imported)."""
    import importlib.util
    import sys

    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _reference_rule(full: str):
    module, _, name = full.rpartition(".")
    if name in REFERENCES.get(module, ()):
        yield "calls one of the course's reference implementations, which the judge uses as ground truth"


def _follow_alias(node, aliases: dict) -> None:
    """`m = ddp` or `f = ddp.reference_train`: later uses of the new name resolve like the old one."""
    full = _resolve(node.value, aliases)
    for target in node.targets:
        if isinstance(target, ast.Name):
            if full:
                aliases[target.id] = full
            else:
                aliases.pop(target.id, None)


def _resolve(node, aliases: dict) -> str | None:
    """The dotted name an expression stands for, when its root is a name bound to an import."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(parts)])
    return None


def _assignment(target, aliases: dict):
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _assignment(element, aliases)
        return
    if isinstance(target, ast.Attribute):
        full = _resolve(target, aliases)
        if full and not full.startswith(SETTABLE):
            yield "changes an attribute of an imported module"
    elif isinstance(target, ast.Subscript):
        full = _resolve(target.value, aliases)
        if full and not full.startswith(SETTABLE):
            yield "changes an item of an imported module's data"


def _literal(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _call(node, aliases: dict):
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if isinstance(func, ast.Name) and name in DYNAMIC_CALLS:
        yield "reaches names or code dynamically (eval, exec, setattr, globals, ...)"
    if name in NAME_CALLS and isinstance(func, ast.Name):
        attribute = _literal(node.args[1]) if len(node.args) > 1 else None
        if attribute is None or (attribute.startswith("_") and attribute not in PUBLIC_DUNDERS):
            yield "reaches an attribute by a computed or private name"
    if name in IMPORT_CALLS:
        module = _literal(node.args[0]) if node.args else None
        if module is None:
            yield "imports a module whose name it computes"
        else:
            yield from _module_rule(module)
    if name == "get_ipython":
        yield "changes or drives the kernel (get_ipython, hooks, magics other than the usual ones)"
    if name in ("system", "getoutput", "popen") or _resolve(func, aliases) in ("os.system", "os.popen"):
        if not _literal_startswith(node, ("pip ", "nvidia-smi")):
            yield "starts a program from the notebook"
    if name == "open" and _writes_code(node):
        yield "writes a Python file (code that would run unseen by the grader)"


def _is_usual_magic(node) -> bool:
    """get_ipython().run_line_magic("matplotlib", "inline") and the like, as IPython writes a magic line; and
    get_ipython().system("pip ...") (whose program _call judges)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    receiver = node.func.value
    if not (isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "get_ipython"):
        return False
    if node.func.attr in ("system", "getoutput"):
        return True
    magic, line = (_literal(a) for a in (node.args + [None, None])[:2]) if len(node.args) >= 2 else (None, None)
    return node.func.attr in ("run_line_magic", "run_cell_magic") and MAGICS.get(magic, lambda _: False)(line or "")


def _literal_startswith(node, prefixes) -> bool:
    text = _literal(node.args[0]) if node.args else None
    return text is not None and text.strip().startswith(prefixes)


def _writes_code(node) -> bool:
    mode = _literal(node.args[1]) if len(node.args) > 1 else next(
        (_literal(k.value) for k in node.keywords if k.arg == "mode"), None)
    path = _literal(node.args[0]) if node.args else None
    return bool(mode and set(mode) & set("wax")) and path is not None and path.endswith((".py", ".pth", ".so", ".pyc"))


def _attribute(node, aliases: dict, forbidden: set):
    attr = node.attr
    if attr in forbidden:
        yield "calls a function this exercise asks you to do without"
    if attr in FRAME_ATTRIBUTES:
        yield "inspects the interpreter's frames or code objects"
    if attr.startswith("__") and attr.endswith("__") and attr not in PUBLIC_DUNDERS:
        yield "reaches an object's internals through a special attribute"
    full = _resolve(node, aliases)
    if full is None:
        return
    parts = full.split(".")
    if full not in PUBLIC_UNDERSCORED and any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
                                              for p in parts[1:]):
        yield "reaches a private part of a library"
    if parts[0] == "sys" and len(parts) > 1 and parts[1] in SYS_ATTRIBUTES - {"path", "stdout", "stderr"}:
        yield "reaches the interpreter's machinery (sys.modules, frames, hooks)"
    if parts[0] == "threading" and parts[-1] in ("settrace", "setprofile"):
        yield "reaches the interpreter's machinery (sys.modules, frames, hooks)"
    yield from _reference_rule(full)


def _name(node, aliases: dict, forbidden: set):
    if node.id in forbidden or aliases.get(node.id, "").rpartition(".")[2] in forbidden:
        yield "calls a function this exercise asks you to do without"
    if node.id in ("__builtins__", "__loader__", "__spec__"):
        yield "reaches an object's internals through a special attribute"
    full = aliases.get(node.id)
    if full and isinstance(node.ctx, ast.Load):
        yield from _reference_rule(full)
