"""The judge: scores hidden tests in a process that never runs student code.

    python -m graders.judge SOLUTION.ipynb GRADED.ipynb VERDICTS.json
    python -m graders.judge --check SOLUTION.ipynb     (run it as the grader would, then judge it)
    (the pipeline runs it as a fork of graders/forkserver.py's judge server)

A hidden-test block of the instructor's source is split by two marker lines (helpers/grading.py):

    ### BEGIN HIDDEN TESTS
    <setup: hidden inputs>          runs in the student's kernel and here
    # [collect]
    <calls the student's code>      runs only in the student's kernel; ends with _got = grading.collect(...)
    # [judge]
    <asserts on _got>               runs only here (and in the kernel of `make test`, on the solutions)
    ### END HIDDEN TESTS

No kernel ever sees the judge part, so none can learn the expected answers either. The kernel of the student's
notebook runs none of the hidden block: graders/hidden_runs.py runs each graded cell's setup and collect parts
apart, in a fresh kernel of their own, with the submission's secret seed (helpers.grading.hidden_random), and puts
that run's collections and its record (RECORD_MIME: the seed, how the run failed, how many results the
notebook's own kernel published, which it dropped) in the graded cell's outputs. Here, the judge part runs on the
data decoded from that collection, in a namespace made from the instructor's cells tagged "prelude" (the
imports), the setup part (drawing the same cases from the same seed) and `_got`. Verdicts per grade cell: passed,
a message, and flags when a kernel was tampered with (its own report of changed hooks, in the grader's words;
results the notebook's own kernel published for the grader; a collection that never arrived although the run
reported no error; several collections for one cell), and flags for review the code a student wrote that
reaches for references, forbidden functions or the kernel's machinery (graders/audit.py). `check` (a lesson's
author's run, no grading) collects in the notebook's own kernel, with the fixed seed: `judge(..., apart=False)`.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import sys
import traceback

import nbformat

from graders import audit
from helpers import grading

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
COLLECT, JUDGE = "# [collect]", "# [judge]"
PRELUDE_TAG = "prelude"
RECORD_MIME = "text/x-course-hidden-run"  # a hidden run's record (graders/hidden_runs.py)
KERNEL_COLLECTED = "the notebook's own kernel published results for the grader (ignored: the hidden tests run apart)"
# A hidden run's failure when there was no run: the cell's visible tests failed in the notebook's own kernel, so the
# cell scores nothing whatever its hidden tests would say (graders/hidden_runs.py leaves it out of the run).
VISIBLE_FAILED = "its visible tests failed in the notebook's own run"
# An error the course raises, said as what it means (helpers/refusal.py): the student's answer called a reference.
REFUSED = {"ReferenceRefused": "ReferenceRefused: it calls one of the course's reference implementations, which the "
                               "hidden tests refuse to an answer"}
# The notebook's import cell is the student's to edit: the collect part must not depend on it for `grading`.
KERNEL_IMPORT = "from helpers import grading\n"


SCOPE = "_hidden_tests"


def hidden_part(parts: dict, seed: int) -> str:
    """A hidden run's setup and collect parts: the cases drawn from `seed`, then the seed back to the fixed one."""
    return (KERNEL_IMPORT + f"grading.use_hidden_seed({int(seed)})\n" + parts["setup"] + "\n"
            + "grading.use_hidden_seed(grading.FIXED_SEED)\n" + parts["collect"])


def in_own_scope(source: str) -> str:
    """`source` as the body of a function called once: what the setup and collect parts bind (the hidden inputs, the
    cases' random generator) are that function's locals, out of reach of the answer's functions, whose globals are the
    kernel's. The seed goes back to the fixed one once the cases are drawn, so that nothing the answer can read holds
    it (the cell's text is kept out of the kernel's history: graders/hidden_runs.py)."""
    module = ast.parse(f"def {SCOPE}():\n    pass\n{SCOPE}()\ndel {SCOPE}\n")
    module.body[0].body = ast.parse(source).body or module.body[0].body
    return ast.unparse(module) + "\n"


def split(source: str) -> dict | None:
    """The parts of a cell with a judged hidden block: visible, setup, collect, judge; None without one."""
    if BEGIN not in source or END not in source:
        return None
    visible, rest = source.split(BEGIN, 1)
    hidden, after = rest.split(END, 1)
    lines = hidden.split("\n")
    marks = [i for i, line in enumerate(lines) if line.strip() in (COLLECT, JUDGE)]
    if [lines[i].strip() for i in marks] != [COLLECT, JUDGE]:
        return None
    c, j = marks
    return {"visible": visible, "setup": "\n".join(lines[:c]), "collect": "\n".join(lines[c + 1:j]),
            "judge": "\n".join(lines[j + 1:]), "after": after}


def for_kernel(source: str) -> str:
    """The cell as the grading kernel runs it: without the judge part."""
    parts = split(source)
    if parts is None:
        return source
    return (parts["visible"] + BEGIN + "\n" + KERNEL_IMPORT + parts["setup"] + "\n" + COLLECT + "\n"
            + parts["collect"].rstrip() + "\n" + END + parts["after"])


def student_cells(solution, graded) -> list[tuple[str, str, set]]:
    """The code cells of `graded` that the student wrote (solution cells, and cells that are none of the
    instructor's), each with where it is in the grader's words and the functions it may not call: its own
    exercise's rule for a solution cell; for a cell the student added, the rules of every exercise whose test
    comes after it (a helper defined there can serve any of them)."""
    from i18n.catalog import code_in_editions

    instructor = {source.strip() for sources in code_in_editions(solution).values() for source in sources}
    for cell in solution.cells:  # the cells in English and in every edition of the course (i18n/)
        if cell.cell_type == "code":
            instructor.add(for_kernel(cell.source).strip())
    exercises = [c.metadata["nbgrader"]["grade_id"] for c in solution.cells
                 if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
    # Locked and test cells: nbgrader runs the instructor's source of these, whatever the submission holds.
    overwritten = {c.metadata["nbgrader"]["grade_id"] for c in solution.cells if c.cell_type == "code"
                   and not c.metadata.get("nbgrader", {}).get("solution")
                   and (c.metadata.get("nbgrader", {}).get("grade") or c.metadata.get("nbgrader", {}).get("locked"))}
    code = [c for c in graded.cells if c.cell_type == "code"]
    cells = []
    for index, cell in enumerate(code):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in overwritten:
            continue
        if cell.metadata.get("nbgrader", {}).get("solution") and grade_id in exercises:
            cells.append((f"the answer to {grade_id}", cell.source, audit.FORBIDDEN_IN.get(grade_id, set())))
        elif cell.source.strip() not in instructor:
            later = {c.metadata.get("nbgrader", {}).get("grade_id") for c in code[index + 1:]}
            rules = set().union(*(audit.FORBIDDEN_IN.get(e, set()) for e in exercises if {e, f"{e}_tests"} & later))
            cells.append((f"code cell {index + 1} (added or changed by the student)", cell.source, rules))
    return cells


def judged_cells(solution) -> dict[str, dict]:
    """grade_id -> parts, for each grade cell of the instructor's notebook with a judged hidden block."""
    cells = {}
    for cell in solution.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and (parts := split(cell.source)):
            cells[meta["grade_id"]] = parts
    return cells


def prelude(solution) -> dict:
    namespace = {"__name__": "__judge__"}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for cell in solution.cells:
            if cell.cell_type == "code" and PRELUDE_TAG in cell.metadata.get("tags", []):
                exec(compile(cell.source, "<prelude>", "exec"), namespace)
    return namespace


def collections(cell) -> tuple[list[dict], list[str]]:
    found, problems = [], []
    for output in cell.get("outputs", []):
        text = output.get("data", {}).get(grading.MIME) if output.get("output_type") in ("display_data", "execute_result") else None
        if text is None:
            continue
        try:
            found.append(grading.loads("".join(text) if isinstance(text, list) else text))
        except Exception as error:  # noqa: BLE001 - anything unreadable is the submission's problem
            problems.append(f"an unreadable collection ({type(error).__name__})")
    return found, problems


def shows_error(cell) -> bool:
    """Whether the cell shows an error: it failed in the notebook's own kernel."""
    return any(o.get("output_type") == "error" for o in cell.get("outputs", []))


def run_record(cell, apart: bool) -> tuple[dict, list[str]]:
    """The record graders/hidden_runs.py left in a graded cell ({"seed", "failure", "kernel_collections"}), and what
    is wrong with it. Not `apart`: the collections are the notebook's own kernel's, with the fixed seed."""
    if not apart:
        return {"seed": grading.FIXED_SEED, "failure": "an error" if shows_error(cell) else None, "kernel_collections": 0}, []
    texts = [o["data"][RECORD_MIME] for o in cell.get("outputs", []) if RECORD_MIME in o.get("data", {})]
    try:
        (found,) = [json.loads(text) for text in texts]
        if type(found["seed"]) is not int or found["seed"] < 0 or type(found["kernel_collections"]) is not int:
            raise ValueError("not a record")
        return {"seed": found["seed"], "failure": found.get("failure"), "kernel_collections": found["kernel_collections"]}, []
    except (ValueError, TypeError, KeyError):
        return {"seed": grading.FIXED_SEED, "failure": "no run", "kernel_collections": 0}, ["the hidden tests' run left no record"]


def judge(solution, graded, apart: bool = True) -> dict:
    """{"cells": {grade_id: {"passed", "message", "flags"}}, "flags": [...]} for one graded notebook (`apart`: its
    hidden tests ran apart, graders/hidden_runs.py)."""
    base = prelude(solution)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in graded.cells if c.cell_type == "code"}
    verdicts, flags = {}, []
    for grade_id, parts in judged_cells(solution).items():
        cell = by_id.get(grade_id)
        verdicts[grade_id] = verdict = {"passed": False, "message": "", "flags": []}
        if cell is None:
            verdict["message"] = "the cell is missing from the graded notebook"
            continue
        found, problems = collections(cell)
        run, run_problems = run_record(cell, apart)
        verdict["flags"] += problems + run_problems + ([KERNEL_COLLECTED] if run["kernel_collections"] else [])
        if run_problems:  # whatever the cell holds, no hidden run produced it
            verdict["message"] = "the hidden tests did not run"
            continue
        if apart and run["failure"] == VISIBLE_FAILED:  # left out of the run: it failed already, or says it did not
            verdict["message"] = "the hidden tests did not run"
            if found or not shows_error(cell):
                verdict["flags"].append(f"{grade_id}: the hidden tests did not run, although the cell reported no error")
            continue
        for c in found:
            verdict["flags"] += [change for change in grading.in_grader_words(c["kernel"]) if change not in verdict["flags"]]
        mine = [c for c in found if c["name"] == grade_id]
        errored = run["failure"] is not None
        if errored and apart:
            verdict["message"] = _failed(run["failure"])
            if mine:  # the instructor's collect publishes last: data from a run that failed was published by other code
                verdict["flags"].append(f"{grade_id}: results arrived although the hidden run failed "
                                        f"({str(run['failure'])[:100]}): published by code other than the collect part")
            continue
        if len(mine) != 1 or len(found) != 1:
            verdict["message"] = "the hidden tests' results did not arrive" if not mine else "more than one collection"
            if mine or not errored:  # an honest failure shows its error; silence or extra data is the kernel's doing
                verdict["flags"].append(f"{grade_id}: {verdict['message']}, although the cell reported no error"
                                        if not mine else f"{grade_id}: {verdict['message']}")
            continue
        namespace = dict(base)
        grading.use_hidden_seed(run["seed"])
        try:
            with contextlib.redirect_stdout(io.StringIO()), speaking(graded):
                exec(compile(parts["setup"], f"<{grade_id} setup>", "exec"), namespace)
                namespace["_got"] = mine[0]["data"]
                exec(compile(parts["judge"], f"<{grade_id} judge>", "exec"), namespace)
        except grading.ReferenceFailed:
            raise  # the grader's own failure (a reference it could not compute): no verdict, not a failed test
        except AssertionError as error:
            verdict["message"] = str(error)[:500] or "an assertion failed"
        except Exception as error:  # noqa: BLE001 - malformed data fails the test, it does not stop the judge
            verdict["message"] = f"{type(error).__name__}: {error}"[:500]
        else:
            verdict["passed"] = True
        if isinstance(namespace.get("_flag"), str):  # the judge part could not judge as it does elsewhere
            verdict["flags"].append(f"{grade_id}: {namespace['_flag']}")
    for v in verdicts.values():
        flags += v["flags"]
    flags += audit.audit(student_cells(solution, graded), audit.course_modules(solution))
    return {"cells": verdicts, "flags": sorted(set(flags))}


def _failed(failure: str) -> str:
    """The verdict on an exercise whose hidden run failed (graders/hidden_runs.py's record says how)."""
    if failure in REFUSED.values():
        return ("your answer calls one of the reference implementations of the course, which the hidden tests refuse "
                "to an answer: write that code yourself")
    return (f"the hidden tests failed on your answer ({str(failure)[:100]}); they run the lesson's own cells and your "
            "answer cells, not cells you added")


@contextlib.contextmanager
def speaking(graded):
    """The helpers the judge part calls speak the graded notebook's edition (helpers/language.py), so that a message
    of theirs in a verdict is in the submission's language (graders/redact.py shows it on the feedback page)."""
    from helpers import language

    edition = graded.get("metadata", {}).get("course_edition")
    before = os.environ.get(language.ENV)
    if isinstance(edition, str) and edition in language.languages():
        language.use(edition)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(language.ENV, None)
        else:
            os.environ[language.ENV] = before


def read_notebook(path: str):
    """A notebook read without following a symbolic link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, encoding="utf-8") as f:
        return nbformat.read(f, as_version=4)


def check(solution_path: str, timeout: int = 600) -> dict:
    """Run the instructor's notebook as the grading kernel would (judge parts stripped), then judge it:
    what `make test` and a lesson's author use to see that every judged cell passes."""
    from nbclient import NotebookClient

    solution = nbformat.read(solution_path, as_version=4)
    run = nbformat.from_dict(json.loads(json.dumps(solution)))
    for cell in run.cells:
        if cell.cell_type == "code":
            cell.source = for_kernel(cell.source)
    NotebookClient(run, timeout=timeout, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": os.path.dirname(os.path.abspath(solution_path))}}).execute()
    return judge(solution, run, apart=False)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check"]:
        result = check(argv[1])
        print(json.dumps(result, indent=1))
        return 0 if all(v["passed"] for v in result["cells"].values()) and not result["flags"] else 1
    solution_path, graded_path, out = argv
    try:
        result = judge(nbformat.read(solution_path, as_version=4), read_notebook(graded_path))
    except Exception:  # noqa: BLE001 - reported to the pipeline, which gives the submission a status
        result = {"error": traceback.format_exc()[-2000:]}
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
