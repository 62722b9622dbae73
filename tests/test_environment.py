"""The environment files agree with each other, and the README's commands are what CI runs."""

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _pins(lines):
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if "==" in line:
            name, rest = line.split("==", 1)
            pins[re.sub(r"[-_.]+", "-", name.strip().lower())] = rest.strip()
    return pins


def requirements():
    return _pins((REPO / "requirements.txt").read_text().splitlines())


def test_environment_yml_installs_what_make_setup_installs():
    """conda runs pip on the pip section in the environment file's folder: the same pins, the same lock, the
    helpers package; and the file says how to start the course."""
    text = (REPO / "environment.yml").read_text()
    pip_section = [line.strip()[2:] for line in text.split("- pip:")[1].splitlines() if line.strip().startswith("- ")]
    assert pip_section == ["-r requirements.txt", "-c requirements.lock", "-e ."]
    makefile = (REPO / "Makefile").read_text()
    assert "-r requirements.txt -c requirements.lock" in makefile and "-e ." in makefile
    assert "python=3.11" in text and "jupyter lab" in text and "JUPYTER_CONFIG_PATH=graders" in text


def test_every_requirement_is_pinned_exactly_and_locked():
    lines = [l for l in (REPO / "requirements.txt").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert all("==" in l for l in lines), "pin every requirement with =="
    lock = _pins((REPO / "requirements.lock").read_text().splitlines())
    for name, version in requirements().items():
        assert lock.get(name) == version, f"{name} differs between requirements.txt and requirements.lock"
    assert requirements()["torch"] == "2.9.0" and requirements()["torch-xla"].startswith("2.9.0;")


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)


def test_package_metadata():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "torch" not in " ".join(project["dependencies"]), "never make Colab reinstall its torch"


def test_the_licence_the_workflow_and_the_readme_agree():
    readme = (REPO / "README.md").read_text()
    licence = (REPO / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "code" in licence and "text" in licence
    assert "(LICENSE)" in readme and "MIT" in readme
    workflow = (REPO / ".github" / "workflows" / "ci.yml").read_text()
    assert re.search(r"run: .*bash \.ci/run", workflow), "the workflow runs what CI runs"
    assert "run: make site" in workflow and "path: build/site" in workflow, "the workflow publishes the site"
    badge = re.search(r"\[!\[make test\]\((https://github\.com/[^)]+)/actions/workflows/(\S+?)/badge\.svg\)\]", readme)
    assert badge and (REPO / ".github" / "workflows" / badge.group(2)).is_file()
    contributing = (REPO / "CONTRIBUTING.md").read_text()
    for command in ("make release", "make test", "make lab", "TEST_PATHS="):
        assert command in contributing, command
    assert "TEST_PATHS ?= solutions tests" in (REPO / "Makefile").read_text()
