"""What a value in a student's code really reaches, and the calls that run code no reader of the source sees (for
graders/audit.py): a module reached through another module's attributes is what it is (`np.ctypeslib.ctypes` is
`ctypes`, `os.sys.modules` is `sys.modules`), followed in the grader's own process with nothing imported for it;
native libraries and pickles loaded; environment variables that change how a new program or interpreter starts
(the course's own `COURSE_REFUSAL` among them); `sys.path` changed; code files written by any writer.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types

MODULES = {  # importing these is reaching the machinery that runs the code, not the lesson's libraries
    "importlib", "imp", "runpy", "pkgutil", "zipimport", "inspect", "ctypes", "gc", "linecache", "marshal",
    "pickle", "dill", "cloudpickle", "builtins", "IPython", "ipykernel", "traitlets", "types", "code", "codeop",
    "dis", "subprocess", "multiprocessing.reduction", "sysconfig", "site", "atexit", "signal", "faulthandler",
    "pty", "pydoc", "pdb", "bdb", "trace", "cProfile", "profile", "unittest", "cffi", "pexpect", "sh", "plumbum",
    "copyreg", "shelve", "joblib", "numpy.ctypeslib", "torch.utils.cpp_extension", "torch.package", "torch._ops",
}
# Functions that run code the audit cannot read: native libraries loaded, pickles (whose objects run code on load).
CODE_LOADERS = {"torch.ops.load_library", "torch.classes.load_library", "pandas.read_pickle", "numpy.lib.format.read_array"}
UNPICKLING = {"torch.load": ("weights_only", True), "numpy.load": ("allow_pickle", False)}  # keyword, its safe value
LOADS_CODE = "loads code the audit cannot read (a native library, a pickle)"
# Variables that change what a new program or interpreter runs before its first line, and the course's own
STARTING = ("LD_", "PYTHON", "COURSE_", "DYLD_")
ENVIRONMENT = "changes how programs start (LD_*, PYTHON* or the course's own environment variables, or a computed one)"
CODE_SUFFIXES = (".py", ".pth", ".so", ".pyc", ".pyd", ".pyw")
WRITERS = {"write_text", "write_bytes", "save", "savez", "tofile", "copy", "copy2", "copyfile", "move", "rename",
           "replace", "link", "symlink", "symlink_to", "hardlink_to", "dump", "writefile"}
# Every way of starting a program (an interpreter among them): by value, and by the names only such functions have.
PROGRAMS = {"os.system", "os.popen", "os.fork_exec", "pty.spawn", "pty.fork", "os.forkpty", "os.startfile"}
PROGRAM_NAMES = ("posix_spawn", "execv", "execl", "spawnv", "spawnl", "set_executable", "Popen", "check_output",
                 "check_call", "getstatusoutput", "create_subprocess_", "startfile", "fork_exec")
ENVIRONMENT_CALLS = {"os.putenv", "os.unsetenv", "os.environ.update", "os.environ.setdefault", "os.environ.pop",
                     "os.environ.clear", "os.environ.popitem"}
MACHINERY_REACHED = "reaches the machinery that runs code (ctypes, pickle, ...): a module the lessons' answers never need"
PATH_CHANGED = "reaches the interpreter's machinery (sys.modules, frames, hooks)"  # audit.MACHINERY's words


def real_path(full: str) -> str:
    """The dotted value `full` as what it reaches: each module on the way by its own name (`os.sys.modules` is
    `sys.modules`, `torch.serialization.pickle.loads` is `pickle.loads`), followed through the modules the grader's
    process has imported, with nothing imported for it and no attribute's code run; the rest as spelled."""
    parts = full.split(".")
    start = next((i for i in range(len(parts), 0, -1) if isinstance(sys.modules.get(".".join(parts[:i])), types.ModuleType)),
                 None)
    if start is None:
        return full
    found = sys.modules[".".join(parts[:start])]
    path = [found.__name__]
    for i, part in enumerate(parts[start:], start):
        try:
            found = inspect.getattr_static(found, part)
        except (AttributeError, TypeError):
            return ".".join(path + parts[i:])
        real = getattr(found, "__name__", None) if isinstance(found, types.ModuleType) else None
        path = real.split(".") if isinstance(real, str) and real else path + [part]
    return ".".join(path)


def machinery(full: str) -> bool:
    """Whether a dotted value is in, or reached through, a module of MODULES (a builtin is its own rules' matter)."""
    parts = full.split(".")
    if parts[0] == "builtins":
        return False
    return parts[0].startswith("_") or any(".".join(parts[:i]) in MODULES for i in range(1, len(parts) + 1))


def rules(real: str, spelled: str):
    """The rules for a dotted value by what it really is (`real`) and as written (`spelled`)."""
    parts = real.split(".")
    if machinery(real) or machinery(spelled):
        yield MACHINERY_REACHED
    if real in CODE_LOADERS or spelled in CODE_LOADERS:
        yield LOADS_CODE
    if parts[:2] == ["sys", "path"] and len(parts) == 3 and parts[2] in ("append", "insert", "extend", "__setitem__"):
        yield PATH_CHANGED


def unpickles(node, called: set) -> bool:
    """A call of torch.load or numpy.load that may unpickle: its safe keyword not given its safe value literally."""
    for loader, (keyword, safe) in UNPICKLING.items():
        if loader in called | {real_path(v) for v in called}:
            given = next((k.value for k in node.keywords if k.arg == keyword), None)
            if any(k.arg is None for k in node.keywords) or (
                    given is not None and not (isinstance(given, ast.Constant) and given.value is safe)):
                return True
    return False


def names_code_file(node) -> bool:
    """A literal path of a code file among a call's arguments, or the object it is called on (`Path("x.pth")`)."""
    places = list(node.args) + [k.value for k in node.keywords]
    if isinstance(node.func, ast.Attribute):
        places.append(node.func.value)
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.strip().endswith(CODE_SUFFIXES)
               for place in places for n in ast.walk(place))


def environment_keys(node) -> bool:
    """Whether a call that changes the environment may change a variable of STARTING (a computed key may)."""
    keys = [k.arg for k in node.keywords if k.arg is not None]
    if any(k.arg is None for k in node.keywords):
        return True
    for arg in node.args[:1]:
        if isinstance(arg, ast.Dict):
            keys += [_literal(k) if k is not None else None for k in arg.keys]
        else:
            keys.append(_literal(arg))
    if not node.args and not keys:
        return True  # clear(), popitem(): every variable, the course's among them
    return any(key is None or key.upper().startswith(STARTING) for key in keys)


def _literal(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def starts_a_program(node, name, called: set) -> bool:
    """A call that starts a program; the shell escapes IPython writes for `!pip` and `!nvidia-smi` aside."""
    if name in ("system", "getoutput") and not called:
        return not _literal_startswith(node, ("pip ", "nvidia-smi"))
    return bool(called & PROGRAMS) or any(v.rpartition(".")[2].startswith(PROGRAM_NAMES) for v in called | {name or ""})


def child_code(node) -> list[str]:
    """The text a program start hands an interpreter to run: what follows `-c`, in a list or a command line."""
    import shlex

    texts = [text for part in ast.walk(node) if (text := _literal(part)) is not None]
    found = [after for before, after in zip(texts, texts[1:]) if before.strip() == "-c"]  # [python, "-c", code]
    for text in texts:  # "python -c 'code'"
        try:
            words = shlex.split(text)
        except ValueError:
            continue
        found += [after for before, after in zip(words, words[1:]) if before == "-c"]
    return found


def _literal_startswith(node, prefixes) -> bool:
    text = _literal(node.args[0]) if node.args else None
    return text is not None and text.strip().startswith(prefixes)


def writes_code(node) -> bool:
    mode = _literal(node.args[1]) if len(node.args) > 1 else next(
        (_literal(k.value) for k in node.keywords if k.arg == "mode"), None)
    path = _literal(node.args[0]) if node.args else None
    return bool(mode and set(mode) & set("wax")) and path is not None and path.endswith((".py", ".pth", ".so", ".pyc"))
