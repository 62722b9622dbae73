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

from graders import audit_reach, audit_source
from graders.audit_reach import (ENVIRONMENT, LOADS_CODE, MODULES, PROGRAM_NAMES, PROGRAMS, STARTING, WRITERS,
                                 child_code, real_path, starts_a_program, writes_code)
from graders.audit_values import Values, parents_of

# Helper functions the judges use as ground truth (helpers/refusal.py): an answer that calls one hands the judge its own answer.
REFERENCES = {
    "helpers.ddp": {"reference_train", "large_batch_reference", "global_batch", "linear_scaled_lr"},
    "helpers.amp": {"scaler_trajectory", "representable", "autocast_dtypes", "accumulation_reference",
                    "saved_activation_bytes", "micro_batch_reference"}, "helpers.memory": {"measure_step"},
    "helpers.accel": {"reference", "gather_lengths_reference"}, "helpers.xla": {"count_compiles"},
    "helpers.sharding": {"zero_bytes", "local_shape", "shard_rows", "shard_state", "reshard", "converted",
                         "reference_adam", "step_traffic", "flat_shard"},
    "helpers.grading": {"reference", "outcome", "encode", "dumps", "collect", "kernel_changes"},
}
REFERENCES.update({f"{module}_reference": REFERENCES[module] for module in ("helpers.ddp", "helpers.sharding")})
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
IMPORT_CALLS = {"__import__", "importlib.import_module"}  # fine with a literal module name
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
FORBIDDEN = "calls a function this exercise asks you to do without"
COMPUTED = "reaches an attribute by a computed or private name"
PROGRAM = "starts a program from the notebook"
MACHINERY = "reaches the interpreter's machinery (sys.modules, frames, hooks)"


# The names the lessons' import cells bind (instructor code, the same in every lesson): module aliases.
ALIASES = {"dp": "helpers.dataparallel", "ddp": "helpers.ddp", "amp": "helpers.amp", "accel": "helpers.accel",
           "memory": "helpers.memory", "xla": "helpers.xla", "grading": "helpers.grading", "torch": "torch",
           "sys": "sys", "os": "os", "DistributedSampler": "torch.utils.data.DistributedSampler", "json": "json",
           "launch": "helpers.launch", "checkpoints": "helpers.checkpoints", "models": "helpers.models",
           "data": "helpers.data", "F": "torch.nn.functional", "dist": "torch.distributed", "tempfile": "tempfile",
           "mp": "torch.multiprocessing", "plt": "matplotlib.pyplot", "sharding": "helpers.sharding", "nn": "torch.nn"}
MODULE_VALUES = {*ALIASES.values(), *REFERENCES, "helpers"} - {ALIASES["DistributedSampler"]}


def audit(cells: list[tuple[str, str, set]], course_modules=frozenset()) -> list[str]:
    """Flags for the student's code cells: [(where, source, forbidden)], `where` naming the cell in the
    grader's words and `forbidden` the functions that the exercises it can serve ask to do without.
    `course_modules`: top-level modules the instructor's notebook imports (known even where not installed)."""
    import importlib

    for module in ("torch", "numpy", *sorted(m for m in MODULE_VALUES if m.startswith("helpers."))):
        importlib.import_module(module)  # the lessons' own, so that real_path follows them in any process

    read = [(where, audit_source.trees(source), forbidden) for where, source, forbidden in cells]
    values = Values(ALIASES, MODULE_VALUES)
    values.learn([tree for _, trees, _ in read for tree in trees])
    found = []
    for where, trees, forbidden in read:
        for tree in trees:
            found += [f"{where}: {rule}" for rule in _rules(tree, values, forbidden, frozenset(course_modules))]
    return list(dict.fromkeys(found))


def course_modules(solution) -> frozenset:
    """The top-level modules the instructor's notebook imports (torch_xla, say, on a grader without it)."""
    found = set()
    for cell in solution.cells:
        tree = audit_source.parse(audit_source.transform(cell.source)) if cell.cell_type == "code" else None
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return frozenset(found)


def _rules(tree, values: Values, forbidden: set, course: frozenset):
    magic_receivers = {id(node.func.value) for node in ast.walk(tree) if _is_usual_magic(node)}
    parents = parents_of(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from _imports(node, forbidden, course)
        elif isinstance(node, (ast.Assign, ast.Delete)):
            for target in node.targets:
                yield from _assignment(target, values)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            yield from _assignment(node.target, values)
        elif isinstance(node, ast.Call) and id(node) not in magic_receivers:
            yield from _call(node, values, forbidden, course)
        elif isinstance(node, ast.Attribute):
            yield from _attribute(values.resolve(node.value), node.attr, forbidden)
        elif isinstance(node, ast.Name):
            yield from _name(node, values, forbidden)
    if any(True for _ in values.escapes(tree, parents)):
        yield "hands a module or a function that reaches names to code the audit cannot follow"


def _imports(node, forbidden: set, course: frozenset):
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield from _module_rule(alias.name, course)
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
            yield FORBIDDEN


def _module_rule(module: str, course: frozenset = frozenset()):
    top = module.split(".")[0]
    if module in MODULES or top in MODULES or top.startswith("_"):
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


def _assignment(target, values: Values):
    if isinstance(target, (ast.Tuple, ast.List, ast.Starred)):
        for element in target.elts if not isinstance(target, ast.Starred) else [target.value]:
            yield from _assignment(element, values)
        return
    if isinstance(target, ast.Attribute):
        if any(not full.startswith(SETTABLE) for full in values.resolve(target)):
            yield "changes an attribute of an imported module"
    elif isinstance(target, ast.Subscript):
        resolved = values.resolve(target.value)
        if any(not full.startswith(SETTABLE) for full in resolved):
            yield "changes an item of an imported module's data"
        key = _literal(target.slice)
        if resolved & {"os.environ"} and (key is None or key.upper().startswith(STARTING)):
            yield ENVIRONMENT


def _literal(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _call(node, values: Values, forbidden: set, course: frozenset):
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    called = {value.removeprefix("builtins.") for value in values.resolve(func)}
    first = _literal(node.args[0]) if node.args else None
    if called & DYNAMIC_CALLS:
        yield "reaches names or code dynamically (eval, exec, setattr, globals, ...)"
        if first is not None and called & {"eval", "exec", "compile"}:
            yield from _code_rules(audit_source.trees(first), values, forbidden, course)
    if called & NAME_CALLS:
        yield from _by_name(node, values, forbidden, reads="getattr" in called)
    if called & {"operator.attrgetter", "operator.methodcaller"}:
        names = node.args if "operator.attrgetter" in called else node.args[:1]
        for part in [_literal(a) for a in names] or [None]:
            if part is None or any(a.startswith("_") and a not in PUBLIC_DUNDERS for a in part.split(".")):
                yield COMPUTED
            for attribute in (part or "").split("."):
                yield from _attribute(set(), attribute, forbidden)
    if called & IMPORT_CALLS:
        yield from _module_rule(first, course) if first is not None else ["imports a module whose name it computes"]
    if name == "get_ipython" or "get_ipython" in called:
        yield "changes or drives the kernel (get_ipython, hooks, magics other than the usual ones)"
    if starts_a_program(node, name, called):
        yield PROGRAM
        for text in child_code(node):
            yield from _code_rules(audit_source.trees(text), values, forbidden, course)
    if "open" in called and writes_code(node):
        yield "writes a Python file (code that would run unseen by the grader)"
    elif name in WRITERS and audit_reach.names_code_file(node):
        yield "writes a Python file (code that would run unseen by the grader)"
    if audit_reach.unpickles(node, called):
        yield LOADS_CODE
    if called & audit_reach.ENVIRONMENT_CALLS and audit_reach.environment_keys(node):
        yield ENVIRONMENT


def _by_name(node, values: Values, forbidden: set, reads: bool):
    """getattr(x, "name") and hasattr(x, "name"): the attribute it spells, as if written x.name."""
    attribute = _literal(node.args[1]) if len(node.args) > 1 else None
    if attribute is None or (attribute.startswith("_") and attribute not in PUBLIC_DUNDERS):
        yield COMPUTED
    elif reads:
        yield from _attribute(values.resolve(node.args[0]), attribute, forbidden)


def _code_rules(trees, values: Values, forbidden: set, course: frozenset):
    """The rules for code held in a string (exec's, a child interpreter's), its own bindings learnt first."""
    values.learn(trees)
    for tree in trees:
        yield from _rules(tree, values, forbidden, course)


def _is_usual_magic(node) -> bool:
    """get_ipython().run_line_magic("matplotlib", "inline") and the like, as IPython writes a magic line; and
    get_ipython().system("pip ...") (whose program _call judges)."""
    magic = audit_source.magic_call(node)
    if magic is None:
        return False
    what, line, _ = magic
    return what == "!" or MAGICS.get(what, lambda _: False)(line)


def _attribute(receivers: set, attr: str, forbidden: set):
    """The rules for `x.attr`, where x can be any of `receivers` (dotted values; none known: the name's rules)."""
    if attr in forbidden:
        yield FORBIDDEN
    if attr in FRAME_ATTRIBUTES:
        yield "inspects the interpreter's frames or code objects"
    if attr.startswith("__") and attr.endswith("__") and attr not in PUBLIC_DUNDERS:
        yield "reaches an object's internals through a special attribute"
    if attr.startswith(PROGRAM_NAMES):
        yield PROGRAM
    for full in {f"{receiver}.{attr}" for receiver in receivers}:
        parts = full.split(".")
        if full not in PUBLIC_UNDERSCORED and any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
                                                  for p in parts[1:]):
            yield "reaches a private part of a library"
        if parts[0] == "sys" and len(parts) > 1 and parts[1] in SYS_ATTRIBUTES - {"path", "stdout", "stderr"}:
            yield MACHINERY
        if parts[0] == "threading" and parts[-1] in ("settrace", "setprofile"):
            yield MACHINERY
        if full in PROGRAMS:
            yield PROGRAM
        yield from _reference_rule(full)
        yield from _reached(real_path(full), full)


def _reached(real: str, spelled: str):
    """The rules for what a dotted value really is, where another module's attribute leads elsewhere."""
    yield from audit_reach.rules(real, spelled)
    parts = real.split(".")
    if real == spelled:
        return
    if parts[0] == "sys" and len(parts) > 1 and parts[1] in SYS_ATTRIBUTES - {"path", "stdout", "stderr"}:
        yield MACHINERY
    if real in PROGRAMS:
        yield PROGRAM
    yield from _reference_rule(real)


def _name(node, values: Values, forbidden: set):
    resolved = values.resolve(node) if isinstance(node.ctx, ast.Load) else set()
    if node.id in forbidden or any(v.rpartition(".")[2] in forbidden for v in resolved):
        yield FORBIDDEN
    if node.id in ("__builtins__", "__loader__", "__spec__"):
        yield "reaches an object's internals through a special attribute"
    if node.id == audit_source.UNREADABLE.body[0].value.id:
        yield "runs code nested too deep in strings to read"
    if isinstance(node.ctx, ast.Load):
        for full in resolved:
            yield from _reference_rule(full)
