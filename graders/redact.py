"""Feedback without hidden tests: their code, and anything their failures would print, is removed."""

from nbgrader.preprocessors import ClearHiddenTests

NOTICE = "Hidden tests ran here. Their code and tracebacks are not shown."


class RedactHiddenTests(ClearHiddenTests):
    def preprocess_cell(self, cell, resources, cell_index):
        had_hidden = self.begin_test_delimeter in cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if had_hidden:
            cell.source = cell.source.rstrip() + f"\n# {NOTICE}"
            cell.outputs = [_redacted(out) for out in cell.get("outputs", [])]
        return cell, resources


def _redacted(output):
    if output.get("output_type") == "error":
        output["traceback"] = [f"{output.get('ename', 'Error')}: a test in this cell failed. {NOTICE}"]
        output["evalue"] = ""
    return output
