"""nbgrader's Execute, made to survive kernel crashes cell by cell.

It writes the index of each cell before running it to GRADER_PROGRESS_FILE. When the kernel dies
(or hangs past its cell's timeout and does not answer the interrupt),
the pipeline grades the submission again with that cell in GRADER_SKIP_CELLS: a skipped cell is
not run and carries an error instead, so it (and a test that needs it) scores 0 while every other
cell runs as usual in a fresh kernel.
"""

import os

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute

SKIPPED = "KernelDied"


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
        return super().preprocess_cell(cell, resources, index)
