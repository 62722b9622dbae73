"""Every module the course's code imports is a declared dependency, read from the code itself (ast): each import of
graders/, helpers/, i18n/ and website/ is the standard library, the course's own code, or a distribution that
requirements.txt names; the helpers package declares in pyproject.toml what it imports on Colab and Kaggle; and
what the judge and the helpers import is installed in `make test-versions`'s environments, which leave part of
requirements.txt out (the Makefile's VERSIONS_SKIP). babel, imported by i18n/catalog.py, used to come only with
jupyterlab and sphinx, so every judge in those environments ended in ModuleNotFoundError."""

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
COURSE_PACKAGES = ("graders", "helpers", "i18n", "website")
# The runtime's own, which the helpers package never names (Colab's and Kaggle's torch must stay): requirements.txt
# pins them for .venv/, and `make test-versions` installs them at each tested version.
RUNTIME_OWN = {"torch", "torch-xla"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(lines) -> set[str]:
    names = set()
    for line in lines:
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            names.add(normalized(Requirement(line).name))
    return names


def declared_in_requirements() -> set[str]:
    return requirement_names((REPO / "requirements.txt").read_text().splitlines())


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(module, level) of each import statement in the file, wherever it stands (inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found.append((base, node.level))
            found += [(f"{base}.{alias.name}" if base else alias.name, node.level) for alias in node.names]
    return found


def third_party(modules) -> set[str]:
    tops = {module.split(".")[0] for module in modules if module}
    return {top for top in tops if top not in sys.stdlib_module_names and top not in COURSE_PACKAGES}


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distributions_of(module: str) -> set[str]:
    names = _packages_distributions().get(module)
    if not names:
        pytest.fail(f"`import {module}`: no installed distribution provides it")
    return {normalized(name) for name in names}


def undeclared(files, declared: set[str]) -> dict[str, list[str]]:
    """module -> the files that import it, for each third-party module no distribution of `declared` provides."""
    missing = {}
    for path in files:
        for module in third_party(name for name, level in imports_of(path) if level == 0):
            if not distributions_of(module) & declared:
                missing.setdefault(module, []).append(str(path.relative_to(REPO)))
    return missing


def course_files(*folders: str) -> list[Path]:
    paths = (path for folder in folders for path in (REPO / folder).rglob("*.py"))
    return sorted(path for path in paths if "__pycache__" not in path.parts)


def module_file(dotted: str) -> Path | None:
    path = REPO.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def closure(start, neighbours) -> set:
    """Everything reachable from `start` through `neighbours(item)`, `start` included."""
    seen, todo = set(), list(start)
    while todo:
        item = todo.pop()
        if item not in seen:
            seen.add(item)
            todo += neighbours(item)
    return seen


def course_closure(start: list[Path]) -> list[Path]:
    """The course's files that `start` imports, directly or through one another (relative imports resolved)."""
    def imported(path: Path) -> list[Path]:
        package, found = path.parent.relative_to(REPO).parts, []
        for name, level in imports_of(path):
            if level:
                name = ".".join([*package[:len(package) - level + 1], *filter(None, [name])])
            if name.split(".")[0] in COURSE_PACKAGES:
                found += [f for f in (module_file(name), module_file(name.rsplit(".", 1)[0])) if f]
        return found

    return sorted(closure(start, imported))


def requires_closure(roots: set[str]) -> set[str]:
    """The distributions that installing `roots` brings, by their installed metadata (markers read for this
    Python and this platform, no extras)."""
    def required(name: str) -> list[str]:
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            return []
        return [normalized(r.name) for r in map(Requirement, requires)
                if r.marker is None or r.marker.evaluate({"extra": ""})]

    return closure(roots, required)


def versions_environment() -> set[str]:
    """What `make test-versions` installs in a .venv-torch<minor>/: requirements.txt less the Makefile's
    VERSIONS_SKIP, torch and torch_xla at the tested versions, and what they pull in."""
    skip = re.search(r"^VERSIONS_SKIP := (.+)$", (REPO / "Makefile").read_text(), re.M).group(1)
    kept = [line for line in (REPO / "requirements.txt").read_text().splitlines()
            if re.match("^[A-Za-z]", line) and not re.search(skip, line)]
    return requires_closure(requirement_names(kept) | RUNTIME_OWN)


def test_every_import_of_the_course_is_declared_in_requirements():
    """requirements.txt names every distribution the course's code imports, not only what happens to pull it in."""
    missing = undeclared(course_files(*COURSE_PACKAGES), declared_in_requirements())
    assert not missing, f"imported but not in requirements.txt: {missing}"


def test_the_helpers_package_declares_what_it_imports():
    """On Colab and Kaggle the helpers come from pip (pyproject.toml): each import is a dependency, an extra
    (lesson 4's, hw-check's) or the runtime's own torch and torch_xla."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = requirement_names(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared |= requirement_names(extra)
    missing = undeclared(course_files("helpers"), declared | RUNTIME_OWN)
    assert not missing, f"imported by helpers/ but not in pyproject.toml: {missing}"


def test_the_versions_environments_have_what_the_judge_and_the_helpers_import():
    """make test-versions runs the solutions (the helpers) and graders.judge --check in environments without the
    lab, nbgrader, Dask or the site: whatever those import must still be installed there."""
    files = course_closure([REPO / "graders" / "judge.py", *course_files("helpers", "i18n")])
    assert REPO / "i18n" / "catalog.py" in files  # the judge's feedback words, through graders/words.py or i18n
    missing = undeclared(files, versions_environment())
    assert not missing, f"not installed by make test-versions: {missing}"


def test_the_closure_follows_relative_imports():
    files = course_closure([REPO / "helpers" / "accel.py"])
    assert REPO / "helpers" / "hardware.py" in files and REPO / "helpers" / "launch.py" in files
    assert REPO / "helpers" / "accelerate_script.py" not in files


def test_an_undeclared_import_is_found(tmp_path, monkeypatch):
    """The check itself sees an import that nothing declares, inside a function too."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "module.py").write_text("import os\n\ndef f():\n    import babel.messages\n    from . import sibling\n")
    assert undeclared([tmp_path / "module.py"], {"numpy"}) == {"babel": ["module.py"]}
    assert undeclared([tmp_path / "module.py"], {"babel"}) == {}
