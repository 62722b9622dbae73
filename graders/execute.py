"""nbgrader's Execute, made to survive kernel crashes cell by cell.

It writes the index of each cell before running it to GRADER_PROGRESS_FILE. When the kernel dies
(or hangs past its cell's timeout and does not answer the interrupt),
the pipeline grades the submission again with that cell in GRADER_SKIP_CELLS: a skipped cell is
not run and carries an error instead, so it (and a test that needs it) scores 0 while every other
cell runs as usual in a fresh kernel.

nbgrader scores a test cell 0 when anything reached stderr during it: a correct answer that merely
warned (numpy's overflow warning, a FutureWarning of a deprecated spelling) lost its points. Here what a
test cell wrote on stderr is kept, marked, on stdout: the grade depends on the tests alone.
"""

import os

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute

SKIPPED = "KernelDied"
STDERR_NOTE = "[written on stderr; warnings do not change the grade]\n"


def skipped_cells() -> set[int]:
    return {int(i) for i in os.environ.get("GRADER_SKIP_CELLS", "").split(",") if i.strip()}


class CrashSafeExecute(Execute):
    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and index in skipped_cells():
            cell.outputs = [NotebookNode(output_type="error", ename=SKIPPED, evalue="",
                                         traceback=[f"{SKIPPED}: this cell killed or hung the grading kernel, so it was not run."])]
            return cell, resources
        progress = os.environ.get("GRADER_PROGRESS_FILE")
        if progress and cell.cell_type == "code":
            with open(progress, "w") as f:
                f.write(str(index))
        cell, resources = super().preprocess_cell(cell, resources, index)
        if cell.metadata.get("nbgrader", {}).get("grade"):
            stderr_to_stdout(cell)
        return cell, resources


def stderr_to_stdout(cell) -> None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            output["name"] = "stdout"
            output["text"] = STDERR_NOTE + output.get("text", "")
