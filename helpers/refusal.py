"""The judge's references, refused to a student's code where a hidden test runs.

The grader's judge (graders/judge.py) compares a student's results with what torch computes in the judge's own
process, from the functions marked `@reference` here (the single-process trainings, ZeRO's bytes, the shard shapes...).
An answer that calls one where its hidden test runs (graders/hidden_runs.py) would hand the judge its own answer. That
run calls `refuse()` before the first answer cell, and from then on a reference raises ReferenceRefused when

* any frame on the stack is code of the notebook's that is not the instructor's (an answer cell's, a function it
  defined, code it ran from a string), or a module outside the course's helpers and the installed libraries, or
* it is called from another thread than the main one (a thread's stack does not show who started it), or
* it is called straight from the instructor's cells but is none of those the instructor's cells name: the student's
  own name for it (`my_shapes = sharding.local_shape`, a `functools.partial` of it) reaches it from there.

What identifies the instructor's cells is their code's file names, as ipykernel names a cell's code (from its text),
computed before any answer ran; a kernel that is told to name cells otherwise (IPYKERNEL_CELL_NAME) refuses every
reference from then on (`answer_ran`, after each answer cell). The processes the course's launchers start from a
refusing process (helpers.launch's ranks, helpers.fresh's jobs) refuse as it does (`carried`). Anywhere else (the
lessons, the visible checks, the judge) a reference is a plain function; but in a student's own kernel, a reference
reached from a cell that is not one of the lesson's own cells as released (an answer, or a cell the student changed
or added) says once, on stderr, that the hidden tests would refuse it there (`NOTICE`): the visible check it passes
is not the last word.
"""

from __future__ import annotations

import functools
import json
import linecache
import os
import re
import sys
import sysconfig
import threading
from pathlib import Path

from .language import message, say

CELL_NAME = "IPYKERNEL_CELL_NAME"  # ipykernel names every cell's code by this variable when it is set
REFUSE_ALL = "all"
# The state, for the interpreters a refusing process starts by any route (a spawned process, a subprocess, a program
# that runs Python): they refuse as it does from their first import of the helpers. graders/audit.py flags an answer
# that changes a COURSE_ variable.
ENV = "COURSE_REFUSAL"


def _from_environment():
    text = os.environ.get(ENV)
    if text is None:
        return None
    try:
        files, names = json.loads(text)
        return frozenset(map(str, files)), frozenset(map(str, names))
    except (ValueError, TypeError):
        return REFUSE_ALL  # "all", or anything else: refuse everything


def _environment(state) -> str:
    return REFUSE_ALL if state == REFUSE_ALL else json.dumps([sorted(state[0]), sorted(state[1])])


_state = _from_environment()  # once refusing: (the instructor's cells' file names, the references they name), or REFUSE_ALL


class ReferenceRefused(RuntimeError):
    """A reference the judge uses, reached by a student's code where a hidden test runs."""


def reference(fn):
    """Mark `fn` as one of the judge's references (the module's docstring)."""
    name = f"{fn.__module__}.{fn.__name__}"

    @functools.wraps(fn)
    def judged(*args, **kwargs):
        if _state is not None and _refused(fn.__name__, sys._getframe(1)):
            raise ReferenceRefused(say("{name} is the grader's reference: the hidden tests refuse it to an answer "
                                       "(write the exercise's code yourself)", name=name))
        if _state is None and _in_a_kernel():
            _notice(name, sys._getframe(1))
        return fn(*args, **kwargs)

    judged.judges_reference = True
    return judged


def refuse(instructor_sources, instructor_names) -> None:
    """From now on, refuse the references (the module's docstring). `instructor_sources`: the text of every cell of the
    instructor's this kernel runs; `instructor_names`: the names of references those cells call."""
    global _state
    from ipykernel.compiler import get_file_name
    from IPython.core.interactiveshell import InteractiveShell

    _BASES.add(InteractiveShell.run_code.__code__)

    if CELL_NAME in os.environ:
        _state = REFUSE_ALL
    else:
        _state = (frozenset(get_file_name(source) for source in instructor_sources), frozenset(instructor_names))
    os.environ[ENV] = _environment(_state)


def answer_ran() -> None:
    """After an answer cell: a kernel told to name the cells' code otherwise could name it as the instructor's; and
    an answer that took the state out of the environment finds it there again."""
    global _state
    if _state is not None and CELL_NAME in os.environ:
        _state = REFUSE_ALL
    if _state is not None:
        os.environ[ENV] = _environment(_state)


def forget_inherited() -> None:
    """A fork server's, at its start: its children refuse as the process that asks for each of them does (`carried`),
    not as the one that happened to start the server."""
    global _state
    _state = None
    os.environ.pop(ENV, None)


def refusing() -> bool:
    return _state is not None


def carried(fn):
    """`fn` as a launcher ships it to a new process: refusing there as here."""
    return functools.partial(_refusing_as, _state, fn) if _state is not None else fn


def _refusing_as(state, fn, *args, **kwargs):
    __tracebackhide__ = True
    global _state
    _state = state
    before = os.environ.get(ENV)
    if state is not None:
        os.environ[ENV] = _environment(state)
    try:
        return fn(*args, **kwargs)
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


_BASES = {_refusing_as.__code__}  # and IPython's, where a cell runs (`refuse`)


def _refused(name: str, caller) -> bool:
    if _state == REFUSE_ALL or threading.current_thread() is not threading.main_thread():
        return True
    instructor_files, instructor_names = _state
    if not _module_code(caller) and (caller.f_code.co_filename not in instructor_files or name not in instructor_names):
        return True
    frame = caller
    while frame is not None and frame.f_code not in _BASES:  # below a base: the kernel's or the launcher's machinery
        if not _module_code(frame) and frame.f_code.co_filename not in instructor_files:
            return True
        frame = frame.f_back
    return False


def _module_code(frame) -> bool:
    """Code of a module of the course's helpers, the standard library or an installed library, not a notebook's
    cell's (nor the submission folder's, nor text run as code: its file name is the caller's choice)."""
    file = frame.f_code.co_filename
    return file.startswith("<frozen ") or os.path.realpath(file).startswith(_trusted_roots())


@functools.lru_cache(maxsize=1)
def _trusted_roots() -> tuple:
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    roots.add(os.path.dirname(os.path.abspath(__file__)))
    return tuple(os.path.realpath(root) + os.sep for root in roots)


# ---- a student's own kernel: a notice, not a refusal -------------------------------------------------------------

NOTICE = message("note: {name} is one of the grader's references. It runs here, but the hidden tests refuse it to an "
                 "answer (this cell is not one of the lesson's own cells as released): an exercise whose answer calls "
                 "it scores nothing. Write that code yourself.")
PACKAGE = Path(__file__).resolve().parent  # its notebooks/: the student notebooks the installed package ships
GRADED = "COURSE_GRADED_KERNEL"  # "1" in the grader's kernels (graders/slots.py), whose feedback says it instead
CELL_FILE = re.compile(r"(ipykernel_\d+[/\\]\d+\.py|<ipython-input-\d+-[0-9a-f]+>)$")  # ipykernel's, IPython's names
_noticed: set = set()  # (reference, cell text) said once


def _in_a_kernel() -> bool:
    """A student's (or an instructor's) kernel, not the grader's."""
    ipython = sys.modules.get("IPython")
    return ipython is not None and ipython.get_ipython() is not None and os.environ.get(GRADED) != "1"


def _notice(name: str, caller) -> None:
    """Say NOTICE once per reference and cell when a notebook cell on the stack is none of the released cells."""
    frame = caller
    while frame is not None:
        file = frame.f_code.co_filename
        text = "".join(linecache.getlines(file)).strip() if CELL_FILE.search(file) else ""
        if text and text not in _released_cells():  # (a cell whose code is not at hand says nothing)
            if (name, text) not in _noticed:
                _noticed.add((name, text))
                print(say(NOTICE, name=name), file=sys.stderr)
            return
        frame = frame.f_back


@functools.lru_cache(maxsize=1)
def _released_cells() -> set:
    """The code of every code cell of the student notebooks (both editions) but the answer cells, the lesson's own,
    as written and as IPython runs it (its magics turned into calls), stripped: what a cell's code shows. In a course
    checkout, the instructor's solutions' cells too (their checks hold the hidden tests)."""
    from IPython.core.inputtransformer2 import TransformerManager

    checkout = PACKAGE.parent  # a course checkout, where the package is not installed
    folders = [folder for folder in (PACKAGE / "notebooks", checkout / "notebooks") if folder.is_dir()][:1]
    folders += [folder for folder in [checkout / "solutions"] if folder.is_dir()]
    paths = [p for folder in folders for p in folder.glob("**/*.ipynb") if ".ipynb_checkpoints" not in p.parts]
    cells, transform = set(), TransformerManager().transform_cell
    for path in paths:
        for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
            if cell.get("cell_type") == "code" and not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                source = cell.get("source", "")
                source = "".join(source) if isinstance(source, list) else source
                cells |= {source.strip(), transform(source).strip()}
    return cells
