"""nbgrader's Execute, made to survive kernel crashes cell by cell.

It writes the index of each cell before running it to GRADER_PROGRESS_FILE. When the kernel dies
(or hangs past its cell's timeout and does not answer the interrupt, or uses up the job's processes),
the pipeline grades the submission again with that cell in GRADER_SKIP_CELLS: a skipped cell is
not run and carries an error instead, so it (and a test that needs it) scores 0 while every other
cell runs as usual in a fresh kernel.

nbgrader scores a test cell 0 when anything reached stderr during it: a correct answer that merely
warned (numpy's overflow warning, a FutureWarning of a deprecated spelling) lost its points. Here what a
test cell wrote on stderr is kept, marked, on stdout: the grade depends on the tests alone.

Before the kernel starts, PrepareCells removes every hidden test's judge part (graders/judge.py: the
kernel never sees the expected answers) and puts a canary cell after each graded cell and at the end:
it prints one random token with the kernel's own report of changed hooks (helpers.grading.kernel_changes),
and raises an error with another. After the run, CheckCanaries takes them out
again and writes to GRADER_CANARY_FILE which of them did not come back as an honest kernel returns them:
a kernel whose hooks, exception handlers or execution a submission changed swallows, rewrites or forges
them, and the pipeline flags the submission.
"""

import json
import os
import secrets

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor

from graders import judge, limits
from helpers import grading

SKIPPED = "KernelDied"
MAX_OUTPUT_BYTES = int(os.environ.get("GRADER_MAX_OUTPUT_BYTES", str(2**20)))  # per cell; errors always kept
STDERR_NOTE = "[written on stderr; warnings do not change the grade]\n"


def skipped_cells() -> set[int]:
    return {int(i) for i in os.environ.get("GRADER_SKIP_CELLS", "").split(",") if i.strip()}


class ProcessLimitReached(RuntimeError):
    """The cell used up its job's processes (graders/limits.py): the job was stopped, the cell is skipped."""


class CrashSafeExecute(Execute):
    def output(self, outs, msg, display_id, cell_index):
        """Keep at most MAX_OUTPUT_BYTES of a cell's output (a student can print gigabytes); an error is
        always kept, or dropping it would turn a failing test into a passing one."""
        used = getattr(self, "_output_bytes", {})
        self._output_bytes = used
        collected = msg["content"].get("data", {}).get(grading.MIME)
        if collected is not None:  # the hidden tests' data: a cap of its own, not counted with the printing
            if len(collected) > grading.MAX_BYTES:
                return None
        elif msg["msg_type"] != "error":
            size = _content_bytes(msg["content"])
            if used.get(cell_index, 0) + size > MAX_OUTPUT_BYTES:
                if used.get(cell_index, 0) <= MAX_OUTPUT_BYTES:
                    outs.append(NotebookNode(output_type="stream", name="stdout",
                                             text=f"[more than {MAX_OUTPUT_BYTES} bytes of output: the rest was dropped]\n"))
                    used[cell_index] = MAX_OUTPUT_BYTES + 1
                return None
            used[cell_index] = used.get(cell_index, 0) + size
        return super().output(outs, msg, display_id, cell_index)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and index in skipped_cells():
            why = "this cell killed or hung the grading kernel (or used up its processes), so it was not run."
            cell.outputs = [NotebookNode(output_type="error", ename=SKIPPED, evalue="", traceback=[f"{SKIPPED}: {why}"])]
            return cell, resources
        progress = os.environ.get("GRADER_PROGRESS_FILE")
        if progress and cell.cell_type == "code":
            with open(progress, "w") as f:
                f.write(str(index))
        watch = limits.ProcessLimitWatch()
        try:
            with watch:
                cell, resources = super().preprocess_cell(cell, resources, index)
        except Exception as error:
            if watch.fired:
                raise ProcessLimitReached(limits.PROCESS_LIMIT) from error
            raise
        if watch.fired:
            raise ProcessLimitReached(limits.PROCESS_LIMIT)
        if cell.metadata.get("nbgrader", {}).get("grade"):
            stderr_to_stdout(cell)
        return cell, resources


def stderr_to_stdout(cell) -> None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            output["name"] = "stdout"
            output["text"] = STDERR_NOTE + output.get("text", "")


def _content_bytes(content) -> int:
    parts = [content.get("text", "")] + [str(v) for v in content.get("data", {}).values()]
    return sum(len(p) for p in parts)


CANARY = "grader_canary"
OWN_FUNCTIONS = ("collect", "dumps", "encode", "kernel_changes")  # checked in the canary's own code, too


class PrepareCells(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        cells = []
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.source = judge.for_kernel(cell.source)
            cells.append(cell)
            if cell.metadata.get("nbgrader", {}).get("grade") and cell.cell_type == "code":
                cells.append(_canary())
        cells.append(_canary())
        nb.cells = cells
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
                changes = ast.literal_eval(line[len(expected["printed"]) + 1:])
            except (ValueError, SyntaxError):
                return ["the kernel's report of its hooks was unreadable"]
            return [str(c)[:300] for c in changes][:20] if isinstance(changes, list) else []
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
