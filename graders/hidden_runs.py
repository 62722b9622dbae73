"""Hidden tests run apart: the hidden checks in a fresh jailed kernel of their own, built from source.

The kernel that runs a student's notebook never runs a hidden test: HoldHiddenTests takes the hidden blocks out of
the graded cells before graders/execute.py's PrepareCells sees them, so that kernel runs the visible tests only.
After it, HiddenRuns starts a fresh kernel (one per submission, or per graded cell: kernel_per_exercise) as nbgrader's
Execute starts one (sandboxed: a fork of the warm kernel server in a new jail), and runs there, in order, no cell's text
in the kernel's history:

* the instructor's prelude and released code cells, from the instructor's notebook (never the submission's copy),
  but those nothing after them reads (graders/demonstrations.py);
* the student's answer cells (no cell the student added, no other exercise's tests), then the definitions of the
  graded cell's visible tests (its functions, classes and imports, none of its checks);
* its setup and collect parts, as one function's body (judge.in_own_scope), the setup drawing its cases from the
  submission's secret seed (helpers.grading.hidden_random), drawn with `secrets` for every grading;
* before the first answer cell, the judge's references refused to the student's code from then on, in the kernel and
  every process it starts (helpers/refusal.py: the instructor's cells, known by their text, keep their calls), and
  after each answer cell a check that the kernel still names cells by their text.

A graded cell whose visible tests failed in the student's kernel scores nothing, so its hidden tests are left out
(an unsolved lesson starts no hidden kernel), and its record says so (judge.VISIBLE_FAILED).

Of that run only the collections its last cell published are kept (MAX_RUN_BYTES in all), with a record of the run
(judge.RECORD_MIME: the seed, how it failed, how many results the notebook's own kernel published, all dropped), in the
graded cell's outputs: nothing the student's code printed there, so no hidden input, reaches the graded notebook or
the feedback. An answer that killed, hung or overran a kernel is left out of the later runs (it would only do so again).
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import builtins

import nbformat
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Bool, Unicode

from graders import audit, cell_groups, cell_limit, demonstrations, execute, judge, limits
from helpers import grading

PART = "grader_hidden_run"  # a run's cell: which part of the program it is, and whose
MAX_COLLECTIONS = 3  # one is right; a few more are kept so that the judge sees, and flags, the extra ones
# A submission's hidden collections in all (the lessons' under 2 MB); past it one is kept as a stub the judge fails
MAX_RUN_BYTES = execute.MAX_NOTEBOOK_BYTES // 2
EXCEPTIONS = {name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)}


class HoldHiddenTests(NbGraderPreprocessor):
    """The graded cells without their hidden blocks: the kernel of the student's notebook runs the visible tests only."""

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            parts = judge.split(cell.source) if cell.cell_type == "code" else None
            if parts is not None:
                cell.source = parts["visible"] + parts["after"]
        return nb, resources


class HiddenRuns(cell_limit.CellTimeLimit, Execute):
    """Each judged graded cell's hidden checks, run apart (the module's docstring)."""

    solution = Unicode("", help="The instructor's notebook (default: the lesson's in the course's source folder)").tag(config=True)
    kernel_per_exercise = Bool(False, help="True: a fresh kernel for each exercise (lesson 1: +39% of its grading CPU); "
                                           "False: one for all of a submission's, in the lesson's order").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        resources = resources if resources is not None else {}
        solution = self._solution = judge.read_notebook(self.solution or _solution_path(self.config, resources))
        published, seed = take_collections(nb), secrets.randbelow(2**62)
        self._left_out, self._kept_bytes = skipped_answers(nb) | set(resources.get(execute.OVER_LIMIT, ())), 0
        by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells if c.cell_type == "code"}
        sources = {g: s for g, s in judged_sources(solution).items() if by_id.get(g) is not None
                   and by_id[g].metadata.get("nbgrader", {}).get("grade")}  # (a missing one: the judge says so)
        # A cell whose visible tests failed in the student's kernel scores nothing whatever its hidden tests say (the
        # judge passes a cell nbgrader gave points): its hidden tests are left out of the run (an unsolved lesson
        # starts no hidden kernel at all), and its record says why.
        failed = {g for g in sources if judge.shows_error(by_id[g])}
        run = [g for g in sources if g not in failed]
        groups = [[g] for g in run] if self.kernel_per_exercise else [run]
        ran = {g: (collections, failure) for group in filter(None, groups)
               for g, (collections, failure) in self.run_apart(solution, nb, group, seed, resources).items()}
        ran |= {g: ([], judge.VISIBLE_FAILED) for g in failed}
        for grade_id, (collections, failure) in ran.items():
            graded, source = by_id[grade_id], sources[grade_id]
            if judge.BEGIN not in graded.source:  # what ran apart, after the cell's own visible tests (its edition)
                graded.source += judge.for_kernel(source)[len(judge.split(source)["visible"]):]
            graded.outputs = list(graded.get("outputs", [])) + collections + [record(seed, failure, published)]
        return nb, resources

    def run_apart(self, solution, submission, grade_ids: list, seed: int, resources) -> dict:
        """grade_id -> (its collections, how its run failed or None), for exercises run in one fresh kernel. An answer
        that kills the run (in its cell, or its function in a collect cell) is left out, and the run starts again."""
        while True:
            run = nbformat.v4.new_notebook(metadata=NotebookNode({"kernelspec": solution.metadata.get("kernelspec", {})}))
            run.cells = refusing(needed(program(solution, submission, grade_ids, seed, self._left_out)))
            failure, culprit = self._execute(run, resources)
            if culprit is not None and culprit not in self._left_out:
                self._left_out.add(culprit)
                continue
            refused = {c.metadata[PART]["grade_id"] for c in run.cells if c.metadata[PART]["kind"] == "answer"
                       and any(o.get("ename") in judge.REFUSED for o in c.get("outputs", []))}  # the answer cell's own call
            return {part["grade_id"]: _collected(cell, failure if i >= (self._running or 0) else None, i in self._over,
                                                 _answer_of(part["grade_id"], self._solution) in refused)
                    for i, cell in enumerate(run.cells) if (part := cell.metadata[PART])["kind"] == "collect"}

    def _execute(self, run, resources) -> tuple[str | None, str | None]:
        """Run `run` in a fresh kernel: (how it failed, the exercise whose answer killed it), or (None, None)."""
        self._running, self._over = None, set()
        watch = limits.ProcessLimitWatch(blame=lambda: self.cell_groups.culprit_by_processes())
        try:
            with watch:
                super().preprocess(run, {"metadata": {"path": resources.get("metadata", {}).get("path", "")}})
        except cell_limit.CellTooSlow:
            execute.record_failure(cell_limit.CellTooSlow.__name__)
            raise  # the machine's slowness: no verdict (graders/worker.py)
        except Exception as error:  # noqa: BLE001 - the student's code killed or hung the run's kernel
            if self._running is None:  # no kernel to run a cell in: the grader's failure, not the submission's
                execute.record_failure(type(error).__name__)
                raise
            left = isinstance(error, cell_groups.LeftBehind)
            why = "processes it left running used up the job's" if left else "it used up its processes"
            return (why if watch.fired or left else "the kernel died or hung"), \
                self._culprit(run, error.cell if left else watch.culprit if watch.fired else None)
        return ("it used up its processes", self._culprit(run, watch.culprit)) if watch.fired else (None, None)

    def _culprit(self, run, index: int | None) -> str | None:
        """The exercise whose answer (cell or function) killed the run's kernel: cell `index`'s, else the running one's."""
        index = self._running if index is None else index
        part = {} if index is None else run.cells[index].metadata.get(PART, {})
        if part.get("kind") == "collect":
            return _answer_of(part["grade_id"], self._solution)
        return part.get("grade_id") if part.get("kind") == "answer" else None

    def preprocess_cell(self, cell, resources, index):
        self._running = index
        progress = os.environ.get("GRADER_PROGRESS_FILE")
        if progress and os.path.exists(progress):
            os.utime(progress)  # the pipeline's watchdog sees a grading that goes on
        self.start_cell_clock(index, student=cell.metadata.get(PART, {}).get("kind") in ("answer", "tests", "collect"))
        self._check_assign_resources(resources)  # nbconvert's preprocess_cell, but out of the kernel's history
        cell, resources = self.execute_cell(cell, index, store_history=False), self.resources
        part = cell.metadata.get(PART, {})
        if self.cell_over_limit and part.get("kind") == "answer":
            self._left_out.add(part["grade_id"])  # it hung this run: the later runs go without it
        self._over |= {index} if self.cell_over_limit else set()
        return cell, resources

    def output(self, outs, msg, display_id, cell_index):
        """Keep only an error's class and a collect cell's collections: no printed word of the run."""
        content = msg["content"]
        if msg["msg_type"] == "error":
            msg["content"] = {"ename": str(content.get("ename", ""))[:100], "evalue": "", "traceback": []}
            return super().output(outs, msg, display_id, cell_index)
        text = content.get("data", {}).get(grading.MIME)
        collect = self.nb.cells[cell_index].metadata.get(PART, {}).get("kind") == "collect"
        if not collect or sum(grading.MIME in o.get("data", {}) for o in outs) >= MAX_COLLECTIONS or (
                type(text) is not str or len(text) > grading.MAX_BYTES):
            return None
        self._kept_bytes += len(text)
        if self._kept_bytes > MAX_RUN_BYTES:
            text = json.dumps({"name": "(over the hidden runs' cap)", "data": None, "kernel": []})
        msg["content"] = {"data": {grading.MIME: text, "text/plain": "[results collected for the grader]"}, "metadata": {}}
        return super().output(outs, msg, None, cell_index)

    def _update_display_id(self, display_id, msg):
        """A display updated in place changes nothing of a run that keeps only collections."""

    def handle_comm_msg(self, outs, msg, cell_index):
        """No widget's message is kept."""

    def on_cell_executed(self, **kwargs):
        """nbgrader's Execute copies the reply's error (message and traceback) into the cell: not here."""


def program(solution, submission, grade_ids, seed: int, left_out=frozenset()) -> list:
    """The cells of a hidden run of the exercises `grade_ids` (their test cells' ids), in the instructor's order (the
    module's docstring); each cell's PART says what it is. `left_out`: the exercises whose answer cells do not go in."""
    grade_ids = [grade_ids] if isinstance(grade_ids, str) else list(grade_ids)
    answers, cells, found = answer_cells(submission), [], set()
    for cell in solution.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or found == set(grade_ids):
            continue
        if meta.get("grade_id") in grade_ids and meta.get("grade"):
            grade_id, parts = meta["grade_id"], judge.split(cell.source)
            collect = judge.hidden_part(parts, seed)
            cells += [_cell(tests_part(parts["visible"], collect), "tests", grade_id),
                      _cell(judge.in_own_scope(collect), "collect", grade_id)]
            found.add(grade_id)
        elif meta.get("solution"):
            if meta.get("grade_id") not in left_out:
                cells += [_cell(source, "answer", meta.get("grade_id")) for source in answers.get(meta.get("grade_id"), [])]
        elif not meta.get("grade"):
            cells.append(_cell(cell.source, "prelude" if judge.PRELUDE_TAG in cell.metadata.get("tags", []) else "released"))
    if found != set(grade_ids):
        raise ValueError(f"the instructor's notebook has no graded cells {sorted(set(grade_ids) - found)}")
    return cells


def needed(cells: list) -> list:
    """`cells` without the released ones that nothing after them reads (graders/demonstrations.py's analysis)."""
    candidates = [i for i, c in enumerate(cells) if c.metadata[PART]["kind"] == "released"]
    left_out = demonstrations.skippable(cells, candidates)
    return [c for i, c in enumerate(cells) if i not in left_out]


def refusing(cells: list) -> list:
    """`cells` with the judge's references refused to the answers (helpers/refusal.py): before the first answer cell,
    the instructor's cells' texts and the references they name; after each answer cell, a check of how cells are named."""
    kinds = [c.metadata[PART]["kind"] for c in cells]
    if "answer" not in kinds:
        return cells
    after = "from helpers import refusal\nrefusal.answer_ran()\n"
    instructor = [c.source for c, kind in zip(cells, kinds) if kind != "answer"] + [after]
    references = {name for module, names in audit.REFERENCES.items() if module != "helpers.grading" for name in names}
    names = sorted({name for source in instructor for name in _names(source)} & references)
    first = kinds.index("answer")
    out = cells[:first] + [_cell(f"from helpers import refusal\nrefusal.refuse({instructor!r},\n               {names!r})\n",
                                 "refusal")]
    for cell, kind in zip(cells[first:], kinds[first:]):
        out += [cell, _cell(after, "refusal")] if kind == "answer" else [cell]
    return out


def _names(source: str) -> set:
    """The names `source` reaches as a module's attributes or imports from one (never a bare name: an answer's function
    may have a reference's name, and a student's alias of a reference must not count as the instructor's call)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return ({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
            | {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names})


DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)


def tests_part(visible: str, collect: str) -> str:
    """What the run needs of a test cell's visible part: its functions, classes and imports, without its checks;
    all of it where the hidden part reads a name its checks bind (a launch of the visible tests reused as a case)."""
    tree = ast.parse(visible)
    checks = [node for node in tree.body if not isinstance(node, DEFINITIONS)]
    bound = {n.id for node in checks for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    read = {n.id for n in ast.walk(ast.parse(collect)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if bound & read:
        return visible
    return ast.unparse(ast.Module(body=[node for node in tree.body if isinstance(node, DEFINITIONS)], type_ignores=[]))


def answer_cells(submission) -> dict[str, list[str]]:
    """grade_id -> the sources of the submission's answer cells of that id, in its order."""
    found: dict[str, list[str]] = {}
    for cell in submission.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution") and not meta.get("grade") and meta.get("grade_id"):
            found.setdefault(meta["grade_id"], []).append(cell.source)
    return found


def judged_sources(solution) -> dict[str, str]:
    """grade_id -> the instructor's source of each graded cell with a judged hidden block."""
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells if c.cell_type == "code"
            and c.metadata.get("nbgrader", {}).get("grade") and judge.split(c.source)}


def take_collections(nb) -> int:
    """Remove every collection and run record the notebook's own kernel published; how many there were."""
    taken = 0
    for cell in nb.cells:
        outputs = cell.get("outputs", [])
        kept = [o for o in outputs if not {grading.MIME, judge.RECORD_MIME} & set(o.get("data", {}))]
        taken += len(outputs) - len(kept)
        if cell.cell_type == "code":
            cell.outputs = kept
    return taken


def skipped_answers(nb) -> set[str]:
    """The exercises whose answer cell the student's run skipped: it killed or hung that kernel (graders/execute.py)."""
    return {c.metadata["nbgrader"].get("grade_id") for c in nb.cells if c.cell_type == "code"
            and c.metadata.get("nbgrader", {}).get("solution")
            and any(o.get("ename") == execute.SKIPPED for o in c.get("outputs", []))}


def record(seed: int, failure: str | None, published: int) -> NotebookNode:
    """The run's record, for the judge: the seed of its hidden inputs, how it failed, the kernel's own collections."""
    text = json.dumps({"seed": seed, "failure": failure, "kernel_collections": published})
    return nbformat.from_dict({"output_type": "display_data", "metadata": {},
                               "data": {judge.RECORD_MIME: text, "text/plain": "[the hidden tests ran apart]"}})


def _cell(source: str, kind: str, grade_id: str | None = None) -> NotebookNode:
    return nbformat.v4.new_code_cell(source, metadata={PART: {"kind": kind, "grade_id": grade_id}})


def _collected(cell, failure: str | None, over_limit: bool, answer_refused: bool = False) -> tuple[list, str | None]:
    """A collect cell's collections, and how it failed: the run's failure, its time limit, its answer cell's refused
    reference, or its error's class."""
    collections = [o for o in cell.get("outputs", []) if grading.MIME in o.get("data", {})]
    errors = [o.get("ename") for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if failure is None and over_limit:
        failure = "it ran past its time limit"
    elif failure is None and answer_refused:
        failure = judge.REFUSED["ReferenceRefused"]
    elif failure is None and errors:
        failure = errors[-1] if errors[-1] in EXCEPTIONS else judge.REFUSED.get(errors[-1], "an exception of its own")
    return collections, failure


def _answer_of(grade_id: str, solution) -> str | None:
    """The answer cell's grade_id of the exercise whose tests are `grade_id` (the solution cell just before it)."""
    answer = None
    for cell in solution.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution") and not meta.get("grade"):
            answer = meta.get("grade_id")
        elif meta.get("grade_id") == grade_id:
            return answer
    return None


def _solution_path(config, resources) -> str:
    from nbgrader.coursedir import CourseDirectory

    course, names = CourseDirectory(config=config), resources["nbgrader"]
    return os.path.join(course.root, course.source_directory, names["assignment"], names["notebook"] + ".ipynb")
