"""graders/ reads as a list of concepts (website/pages/development.md, "A submission's way through graders/"):
each file imports only the files listed above it (module-level and function-level imports alike), so there is no
circle and no import upward; no file is long or without its purpose; the grading code never imports the website
or the tests, and the lessons' helpers never import the grader."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GRADERS = REPO / "graders"
MAX_LINES = 330


def _documented_order() -> list[str]:
    page = (REPO / "website" / "pages" / "development.md").read_text()
    block = page.split("### A submission's way through graders/")[1].split("```")[1]
    return [m.group(1) for m in re.finditer(r"^(\w+)\.py\s", block, re.M)] + ["nbgrader_config", "jupyter_server_config"]


def _imports(path: Path) -> set[str]:
    """Every module this file imports, anywhere in it (strings handed to importlib aside)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module in ("graders", "website", "helpers"):
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_every_file_of_graders_is_in_the_documented_order():
    files = sorted(p.stem for p in GRADERS.glob("*.py") if p.stem != "__init__")
    assert sorted(_documented_order()) == files


def test_each_file_imports_only_files_above_it():
    order = _documented_order()
    for position, name in enumerate(order):
        ours = {m.split(".")[1] for m in _imports(GRADERS / f"{name}.py") if m.startswith("graders.")}
        upward = {m for m in ours if m in order and order.index(m) >= position}
        assert not upward, f"graders/{name}.py imports {sorted(upward)}, listed at or below it"


def test_no_file_is_long_or_without_its_purpose():
    for path in list(GRADERS.glob("*.py")) + list((REPO / "website").glob("*.py")):
        if path.stem == "__init__":
            continue
        assert len(path.read_text().splitlines()) <= MAX_LINES, f"{path.relative_to(REPO)} is over {MAX_LINES} lines"
        assert ast.get_docstring(ast.parse(path.read_text())), f"{path.relative_to(REPO)} says nothing of its purpose"


def test_the_layers_point_one_way():
    for path in GRADERS.glob("*.py"):
        assert not {m for m in _imports(path) if m.split(".")[0] in ("website", "tests")}, path.name
    for path in (REPO / "helpers").rglob("*.py"):
        assert not {m for m in _imports(path) if m.split(".")[0] in ("graders", "website")}, path.name
