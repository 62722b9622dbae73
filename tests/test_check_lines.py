"""A passing visible check says so: every graded cell ends its visible tests with one printed line, a plain string
(the translation catalog extracts it, i18n/catalog.py), that names what passed and that the hidden tests run later."""

import ast
from pathlib import Path

import nbformat
import pytest

from graders import course
from i18n import catalog

REPO = Path(__file__).resolve().parent.parent
HIDDEN = "### BEGIN HIDDEN TESTS"


def _graded(lesson):
    nb = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    return [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]


def _last_statement(code: str) -> ast.stmt:
    last = ast.parse(code).body[-1]
    while isinstance(last, ast.If) and not last.orelse:  # `if XLA:` checks: the line runs where they ran
        last = last.body[-1]
    return last


@pytest.mark.parametrize("lesson", course.lessons(REPO))
def test_every_visible_check_ends_with_a_line_that_says_it_passed(lesson):
    for cell in _graded(lesson):
        visible = cell.source.split(HIDDEN)[0]
        last = _last_statement(visible)
        call = last.value if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) else None
        assert call and getattr(call.func, "id", None) == "print", f"{cell.id} ends with {ast.unparse(last)!r}"
        said = call.args[0]
        assert isinstance(said, ast.Constant) and isinstance(said.value, str), f"{cell.id}: a plain string"
        text = said.value
        assert text.startswith("✓ ") and "\n" not in text and len(text) < 120, f"{cell.id}: {text!r}"
        assert "hidden tests" in text and "graded" in text, f"{cell.id}: {text!r}"
        assert ast.get_source_segment(visible, said) in [t for _, _, t in catalog.literals(cell.source)], cell.id
