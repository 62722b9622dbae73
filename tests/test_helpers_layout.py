"""helpers/ imports one way (no circle between its modules), and `from helpers import ddp` still reaches every name
the lessons and the audit use, now that DDP's code lives in one module per concept (ddp_workers, ddp_reference,
ddp_measure, ddp_judging)."""

import ast
import importlib
import re
from pathlib import Path

import nbformat

from graders import audit

REPO = Path(__file__).resolve().parent.parent
HELPERS = REPO / "helpers"


def _helpers_imported(path: Path) -> set[str]:
    """The modules of helpers/ this file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module] if node.module else [alias.name for alias in node.names])
        elif isinstance(node, ast.ImportFrom) and node.module == "helpers":
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers."):
            found.add(node.module.split(".")[1])
    return {name.split(".")[0] for name in found} - {path.stem}


def test_helpers_import_one_way():
    graph = {path.stem: _helpers_imported(path) for path in HELPERS.glob("*.py")}
    done = set()

    def visit(name, path):
        assert name not in path, f"helpers import in a circle: {' -> '.join(path + [name])}"
        if name in done or name not in graph:
            return
        for imported in sorted(graph[name]):
            visit(imported, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_the_ddp_modules_sit_under_the_one_the_lessons_import():
    ddp_modules = {p.stem for p in HELPERS.glob("ddp_*.py")}
    assert ddp_modules == {"ddp_workers", "ddp_reference", "ddp_measure", "ddp_judging"}
    for name in ddp_modules:
        assert "ddp" not in _helpers_imported(HELPERS / f"{name}.py"), f"helpers/{name}.py imports helpers.ddp"
    assert _helpers_imported(HELPERS / "ddp_reference.py").isdisjoint(ddp_modules), "the references stand alone"


def test_every_ddp_name_the_lessons_use_is_there():
    from helpers import ddp

    used = set()
    for path in sorted((REPO / "solutions").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                used.update(re.findall(r"\bddp\.([A-Za-z_]\w*)", cell.source))
    assert {"TrainConfig", "train_worker"} <= used
    assert not {name for name in used if not hasattr(ddp, name)}


def test_every_reference_the_audit_names_exists():
    for module, names in audit.REFERENCES.items():
        found = importlib.import_module(module)
        assert all(callable(getattr(found, name, None)) for name in names), module


def test_the_audits_references_are_the_functions_refused_where_hidden_tests_run():
    """helpers/refusal.py refuses the functions marked @refusal.reference; the audit flags calls of those it names."""
    marked = set()
    for path in sorted((REPO / "helpers").glob("*.py")):
        module = importlib.import_module(f"helpers.{path.stem}")
        marked |= {(module.__name__, name) for name, value in vars(module).items()
                   if getattr(value, "judges_reference", False) and value.__module__ == module.__name__}
    named = {(getattr(importlib.import_module(module), name).__module__, name)
             for module, names in audit.REFERENCES.items() if module != "helpers.grading" for name in names}
    assert marked == named and len(marked) == 23
