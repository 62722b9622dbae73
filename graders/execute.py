"""nbgrader's Execute, made to survive kernel crashes cell by cell.

It writes the index of each cell before running it to GRADER_PROGRESS_FILE. When the kernel dies (or hangs past its
cell's timeout and does not answer the interrupt, or uses up the job's processes), the pipeline grades the
submission again with that cell in GRADER_SKIP_CELLS: a skipped cell is not run and carries an error instead, so it
(and a test that needs it) scores 0 while every other cell runs as usual in a fresh kernel.

nbgrader scores a test cell 0 when anything reached stderr during it: a correct answer that merely warned (numpy's
overflow warning, a FutureWarning of a deprecated spelling) lost its points. Here what a test cell wrote on stderr
is kept, marked, on stdout: the grade depends on the tests alone.

An instructor's demonstration that the submission kept unchanged is not run and keeps no outputs, unless the task
runs everything (graders/demonstrations.py decides, from the instructor's source only).

Before the kernel starts, PrepareCells removes every hidden test's judge part (graders/judge.py: the kernel never
sees the expected answers) and moves the rest of the hidden block (setup and collect) into a cell of its own right
after its graded cell, which the kernel runs without storing it in its history (no `In`, `_ih` or `%history` of a
later cell shows it; JoinHiddenParts puts it back into its graded cell before anything is saved). It also puts a
canary cell after each graded cell and at the end: it prints one random token with the kernel's own report of
changed hooks (helpers.grading.kernel_changes), and raises an error with another. After the run, CheckCanaries takes
them out again and writes to GRADER_CANARY_FILE which of them did not come back as an honest kernel returns them: a
kernel whose hooks, exception handlers or execution a submission changed swallows, rewrites or forges them, and the
pipeline flags the submission.
"""

import json
import os
import secrets

from nbclient.exceptions import CellTimeoutError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Integer

from graders import cell_groups, cell_limit, demonstrations, judge, limits
from helpers import grading

SKIPPED = "KernelDied"
OVER_LIMIT = "grader_answers_over_limit"  # resources' key: answer cells past their limit, left out of the hidden run
MAX_OUTPUT_BYTES = int(os.environ.get("GRADER_MAX_OUTPUT_BYTES", str(2**20)))  # what a cell prints
# Everything a cell outputs, the hidden tests' collected results included, and everything a notebook outputs:
# a submission cannot make the graded notebook, the feedback or the coordinator's memory grow past these.
MAX_CELL_BYTES = int(os.environ.get("GRADER_MAX_CELL_BYTES", str(grading.MAX_BYTES + MAX_OUTPUT_BYTES)))
MAX_NOTEBOOK_BYTES = int(os.environ.get("GRADER_MAX_NOTEBOOK_BYTES", str(32 * 2**20)))
MAX_ERROR_CHARS = 20_000  # an error is always kept, but not a gigabyte of its message
ERROR_STUB_CHARS = 1_000  # an error past the caps: its name and the start of its message, one per cell
LINE_BYTES = 16  # what nbformat adds to each line of a text it writes as a list of lines (quotes, comma, indent)
STDERR_NOTE = "[written on stderr; warnings do not change the grade]\n"


def skipped_cells() -> set[int]:
    return {int(i) for i in os.environ.get("GRADER_SKIP_CELLS", "").split(",") if i.strip()}


class CrashSafeExecute(cell_limit.CellTimeLimit, Execute):
    # A cell's outputs may trail its reply this long (nbclient's 4 s turned a loaded machine's lag into a skipped cell)
    iopub_timeout = Integer(60).tag(config=True)

    def output(self, outs, msg, display_id, cell_index):
        """Keep what fits the caps: MAX_OUTPUT_BYTES of printing per cell, MAX_CELL_BYTES of all of a cell's
        outputs (collections and errors included), MAX_NOTEBOOK_BYTES for the notebook, each counted as the bytes
        nbformat writes. An error is always kept (past the caps, as one short error per cell), or dropping it would
        turn a failing test into a passing one."""
        content, cell, error = msg["content"], self._owner(cell_index), msg["msg_type"] == "error"
        if error:
            _shorten_error(content)
        elif grading.MIME in content.get("data", {}):  # the hidden tests' data travels alone, with its one line of text
            data = content["data"]
            content["data"] = {grading.MIME: data[grading.MIME], "text/plain": str(data.get("text/plain", ""))[:200]}
            content["metadata"] = {}
        size = _content_bytes(content)
        printed = 0 if error or grading.MIME in content.get("data", {}) else size
        if (self._cell_total.get(cell, 0) + size <= MAX_CELL_BYTES and self._notebook_total + size <= MAX_NOTEBOOK_BYTES
                and self._printed.get(cell, 0) + printed <= MAX_OUTPUT_BYTES):
            self._printed[cell] = self._printed.get(cell, 0) + printed
            self._cell_total[cell] = self._cell_total.get(cell, 0) + size
            self._notebook_total += size
            return super().output(outs, msg, display_id, cell_index)
        if error:
            return self._error_past_the_caps(outs, msg, display_id, cell_index)
        if cell not in self._dropped:
            self._dropped.add(cell)
            outs.append(NotebookNode(output_type="stream", name="stdout",
                                     text="[the cell's output passed the grader's size limits: the rest was dropped]\n"))
        return None

    def _error_past_the_caps(self, outs, msg, display_id, cell_index):
        """Its name and the start of its message, as the cell's one error past the caps (the last one)."""
        content = msg["content"]
        content["evalue"] = content["evalue"][:ERROR_STUB_CHARS]
        content["traceback"] = [f"{content['ename']}: {content['evalue']}"]
        stub = self._stubs.get(cell_index)
        if stub is not None and not self.clear_before_next_output:
            stub.update(ename=content["ename"], evalue=content["evalue"], traceback=content["traceback"])
            return stub
        self._stubs[cell_index] = super().output(outs, msg, display_id, cell_index)
        return self._stubs[cell_index]

    def clear_output(self, outs, msg, cell_index):
        self._stubs.pop(cell_index, None)  # (a cleared stub must not take the next error in place of a new one)
        super().clear_output(outs, msg, cell_index)

    def _update_display_id(self, display_id, msg):
        """A display updated in place is output too: it must fit the notebook's cap."""
        size = _content_bytes(msg["content"])
        if self._notebook_total + size > MAX_NOTEBOOK_BYTES:
            return
        self._notebook_total += size
        super()._update_display_id(display_id, msg)

    def handle_comm_msg(self, outs, msg, cell_index):
        """Widgets' messages are not kept: a graded notebook needs no widget state, and a comm could carry any
        amount of data past the caps (or register an output hook that takes over a cell's outputs)."""

    def reset_execution_trackers(self):
        super().reset_execution_trackers()
        self._printed, self._cell_total, self._dropped, self._notebook_total, self._stubs = {}, {}, set(), 0, {}
        self._hits = None  # the job's process-limit hits when the last cell's watch ended (graders/limits.py)

    def preprocess(self, nb, resources=None, km=None):
        try:
            return super().preprocess(nb, resources, km)
        except Exception as error:  # the kernel would not start, or nbclient gave up: the first cause stays
            if not os.path.exists(os.environ.get("GRADER_OUTCOME_FILE", "") or "/nonexistent"):
                record_failure(type(error).__name__)
            raise

    def _owner(self, index: int) -> int:
        """The notebook cell an output belongs to: a hidden part's outputs are its graded cell's."""
        cells = getattr(self, "nb", None) and self.nb.cells
        return index - 1 if cells and index < len(cells) and HIDDEN_PART in cells[index].metadata else index

    def preprocess_cell(self, cell, resources, index):
        if index in (resources or {}).get(demonstrations.SKIPPED, ()):  # not run: no outputs, no error
            cell.outputs, cell.execution_count = [], None
            return cell, resources
        if cell.cell_type == "code" and index in skipped_cells():
            why = "this cell killed or hung the grading kernel (or used up its processes), so it was not run."
            cell.outputs = [NotebookNode(output_type="error", ename=SKIPPED, evalue="", traceback=[f"{SKIPPED}: {why}"])]
            return cell, resources
        inserted = any(key in cell.metadata for key in INSERTED)
        if HIDDEN_PART in cell.metadata and judge.shows_error(self.nb.cells[index - 1]):
            cell.outputs = []  # the visible tests failed: the rest of the cell does not run, as in one cell
            return cell, resources
        if cell.cell_type == "code":
            cell_groups.write_progress(index)
        watch = limits.ProcessLimitWatch(blame=self.cell_groups.culprit_by_processes, since=self._hits)
        meta = cell.metadata.get("nbgrader", {})
        student = bool(meta.get("solution") or meta.get("grade")) or HIDDEN_PART in cell.metadata  # runs their code
        self.start_cell_clock(index, student)
        try:
            with watch:
                if inserted:  # the grader's own cells stay out of the kernel's history
                    self._check_assign_resources(resources)
                    cell, resources = self.execute_cell(cell, index, store_history=False), self.resources
                else:
                    cell, resources = super().preprocess_cell(cell, resources, index)
        except Exception as error:
            if isinstance(error, CellTimeoutError) and not (watch.fired or self.cell_over_limit):
                # its reply came, but not all its outputs within iopub_timeout: the machine's speed, not the cell
                error = cell_limit.CellTooSlow(f"the cell's outputs did not all arrive within {self.iopub_timeout} s")
            slow = isinstance(error, cell_limit.CellTooSlow) and not watch.fired
            stop = error if slow else cell_groups.stopped(index, watch, error)
            record_failure(type(stop).__name__)
            if stop is error:
                raise error
            raise stop from error
        finally:
            self._hits = watch.hits
        if watch.fired:
            stop = cell_groups.stopped(index, watch, None)
            record_failure(type(stop).__name__)
            raise stop
        if self.cell_over_limit and meta.get("solution") and not meta.get("grade"):
            resources.setdefault(OVER_LIMIT, set()).add(meta.get("grade_id"))
        if meta.get("grade") or HIDDEN_PART in cell.metadata:
            stderr_to_stdout(cell)
        return cell, resources


def record_failure(kind: str) -> None:
    """What stopped the run, in the grader's own words (an exception class of nbclient or of this module), for
    the pipeline: never parsed from text a kernel could have written."""
    path = os.environ.get("GRADER_OUTCOME_FILE")
    if path:
        with open(path, "w") as f:
            f.write(kind)


def _shorten_error(content) -> None:
    content["evalue"] = str(content.get("evalue", ""))[:MAX_ERROR_CHARS]
    content["traceback"] = [str(line)[:MAX_ERROR_CHARS] for line in (content.get("traceback") or [])[-50:]]
    content["ename"] = str(content.get("ename", ""))[:200]


def stderr_to_stdout(cell) -> None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            output["name"] = "stdout"
            output["text"] = STDERR_NOTE + output.get("text", "")


def _content_bytes(content) -> int:
    """At least the bytes nbformat writes for an output with this content: JSON-escaped (a control character takes
    six), each line of a text and each line of a traceback a string of its own in an indented list."""
    parts = [content.get("text", ""), *content.get("data", {}).values(), content.get("metadata", {}),
             content.get("ename", ""), content.get("evalue", ""), *(content.get("traceback") or [])]
    return sum(len(json.dumps(part, default=str)) + LINE_BYTES * (1 + part.count("\n") if isinstance(part, str) else 1)
               for part in parts)


CANARY = "grader_canary"
HIDDEN_PART = "grader_hidden_part"
INSERTED = (CANARY, HIDDEN_PART)  # the marks of the grader's own cells: a submission's cells never keep them
OWN_FUNCTIONS = ("collect", "dumps", "encode", "kernel_changes")  # checked in the canary's own code, too


class PrepareCells(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        kept = {id(cell) for cell in demonstrations.kept_unchanged(nb.cells)}
        cells = []
        for cell in nb.cells:
            for key in INSERTED:  # a student's cell dressed as the grader's would run, then vanish
                cell.metadata.pop(key, None)
            cells.append(cell)
            graded = cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade")
            if cell.cell_type == "code":
                parts, kernel_source = judge.split(cell.source), judge.for_kernel(cell.source)
                cell.source = kernel_source
                if graded and parts:
                    cell.source = parts["visible"]
                    cells.append(_hidden_part(kernel_source[len(parts["visible"]):]))
            if graded:
                cells.append(_canary())
        cells.append(_canary())
        nb.cells = cells
        resources[demonstrations.SKIPPED] = demonstrations.skippable(cells, [i for i, c in enumerate(cells) if id(c) in kept])
        return nb, resources


def _hidden_part(source: str) -> NotebookNode:
    """The setup and collect of a graded cell's hidden tests (the judge part already gone), as a cell of its own."""
    cell = NotebookNode(cell_type="code", source=source, metadata=NotebookNode({HIDDEN_PART: True}), outputs=[],
                        execution_count=None)
    cell["id"] = "hidden-" + secrets.token_hex(8)
    return cell


class JoinHiddenParts(NbGraderPreprocessor):
    """Each hidden part back into its graded cell: the source the kernel ran, and its outputs after the visible
    tests' (what the judge and nbgrader score)."""

    def preprocess(self, nb, resources):
        kept = []
        for cell in nb.cells:
            if HIDDEN_PART in cell.metadata and kept:
                graded = kept[-1]
                graded.source += cell.source
                graded.outputs = list(graded.get("outputs", [])) + list(cell.get("outputs", []))
                continue
            kept.append(cell)
        nb.cells = kept
        return nb, resources


def _canary():
    printed, raised = secrets.token_hex(8), secrets.token_hex(8)
    source = (f"from helpers import grading as _canary\n"
              f"print('{printed}', [f'a notebook replaced helpers.grading.{{name}}' for name in {OWN_FUNCTIONS!r}\n"
              f"       if not getattr(getattr(_canary, name, None), '__code__', None)\n"
              f"       or not getattr(_canary, name).__code__.co_filename.endswith('grading.py')] + _canary.kernel_changes())\n"
              f"raise AssertionError('{raised}')")
    cell = NotebookNode(cell_type="code", source=source,
                        metadata=NotebookNode({CANARY: {"printed": printed, "raised": raised}}),
                        outputs=[], execution_count=None)
    cell["id"] = "canary-" + printed
    return cell


class CheckCanaries(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        problems, kept = [], []
        for index, cell in enumerate(nb.cells):
            expected = cell.metadata.get(CANARY)
            if expected is None:
                kept.append(cell)
                continue
            if index in skipped_cells():
                continue  # it never ran: the kernel died before
            outputs = cell.get("outputs", [])
            for problem in [canary_problem(outputs, expected)] + reported_changes(outputs, expected):
                if problem and problem not in problems:
                    problems.append(problem)
        nb.cells = kept
        path = os.environ.get("GRADER_CANARY_FILE")
        if path:
            with open(path, "w") as f:
                json.dump(problems, f)
        return nb, resources


def reported_changes(outputs, expected) -> list[str]:
    """What the kernel said, in a canary cell, about hooks a notebook changed (helpers.grading.kernel_changes)."""
    import ast

    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout")
    for line in printed.splitlines():
        if line.startswith(expected["printed"] + " ["):
            try:
                changes = ast.literal_eval(line[len(expected["printed"]) + 1:][:100_000])
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return ["the kernel's report of its hooks was unreadable"]
            return grading.in_grader_words(changes)
    return []


def canary_problem(outputs, expected) -> str | None:
    """Why a canary's outputs are not what an unchanged kernel gives back, or None."""
    printed = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stdout")
    errors = [o for o in outputs if o.get("output_type") == "error"]
    if not errors:
        return "the kernel swallowed an error the grader raised on purpose"
    if (errors[-1].get("ename"), errors[-1].get("evalue")) != ("AssertionError", expected["raised"]):
        return "the kernel rewrote an error the grader raised on purpose"
    if expected["printed"] + " [" not in printed:
        return "the kernel hid what a grader's cell printed"
    if any(o.get("output_type") == "execute_result" for o in outputs):
        return "the kernel forged a result for a grader's cell"
    return None
