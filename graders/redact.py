"""Feedback that carries nothing of the hidden tests and runs nothing a student wrote.

* A cell with hidden tests keeps its visible code, but none of its outputs: anything it printed (a
  student's hook can print every cell's source), its error's class and message, are replaced by one
  line saying whether the cell's tests passed.
* Outputs that a browser would run or render as markup (HTML, JavaScript, SVG, Markdown, LaTeX) are
  replaced by their plain-text form, and raw HTML in Markdown cells is shown as text.
"""

import json
import os
import re

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor

NOTICE = "Hidden tests ran here. Their code and output are not shown."
SAFE_DATA = ("text/plain", "image/png", "image/jpeg")
CODE_SPANS = re.compile(r"(`+[^`]*`+)")  # shown as written by Markdown already
TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


class RedactHiddenTests(ClearHiddenTests):
    def preprocess_cell(self, cell, resources, cell_index):
        had_hidden = self.begin_test_delimeter in cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if had_hidden:
            judged = _verdicts().get(cell.metadata.get("nbgrader", {}).get("grade_id"), {"passed": True})
            failed = not judged["passed"] or any(out.get("output_type") == "error" for out in cell.get("outputs", []))
            verdict = "A test in this cell failed." if failed else "The tests in this cell passed."
            cell.source = cell.source.rstrip() + f"\n# {NOTICE}"
            cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=f"{verdict} {NOTICE}\n")]
        return cell, resources


VERDICTS: dict | None = None  # set by the pipeline's recorder while it writes one submission's feedback


def _verdicts() -> dict:
    """The judge's verdicts per grade cell (graders/judge.py): the recorder's, or from the file
    GRADER_VERDICTS_FILE names (nbgrader generate_feedback run by hand)."""
    if VERDICTS is not None:
        return VERDICTS
    path = os.environ.get("GRADER_VERDICTS_FILE")
    if not path:
        return {}
    with open(path) as f:
        return json.load(f).get("cells", {})


class SanitizeOutputs(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "markdown":
            parts = CODE_SPANS.split(cell.source)
            cell.source = "".join(part if i % 2 else TAG_START.sub("&lt;", part) for i, part in enumerate(parts))
        for output in cell.get("outputs", []):
            if "data" in output:
                output["data"] = {kind: value for kind, value in output["data"].items() if kind in SAFE_DATA}
        return cell, resources
