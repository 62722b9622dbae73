"""`make site`: the released lessons as a static website (build/site/index.html).

    python -m website.build [--out build/site] [--executed FOLDER]

Sphinx with MyST-NB: MyST-NB renders a notebook's stored outputs, figures included, as HTML pages that
Sphinx ties into one site with navigation, search and a landing page, and the same build can take
Markdown pages. (Jupyter Book 2 is a Node.js application, a second toolchain for the same result.)

Each page is a lesson's *student* notebook (notebooks/, never solutions or hidden tests) with the outputs
of its explanation cells: run here, or taken from FOLDER/<lesson>.ipynb, the same notebook already
executed (make test reuses the graded class's untouched submissions, so the site costs no extra run).
Exercise and check cells are shown without outputs: unsolved, they only show their own errors. Outputs carry
no machine paths (machine_paths_removed): tracebacks show repository-relative paths, `site-packages/`, `/tmp/…`
and `~` instead of the build machine's folders. The landing page lists the lessons (from the README),
prerequisites, study-time estimates and the hardware table (website/pages/hardware.md). The instructors'
pages are the Markdown files of website/pages/ (PAGES), under an "Instructors" caption.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from graders.release import is_exercise_cell

REPO = Path(__file__).resolve().parent.parent
PAGES_DIR = REPO / "website" / "pages"
# The instructors' pages, in the order of the site's navigation: website/pages/<name>.md.
PAGES = ("instructors", "grading-security", "cluster", "hardware", "development")
TITLE = "Training on many devices with PyTorch"
REPOSITORY = "https://github.com/multi-device-course/pytorch-multi-device-course"
# Estimates, exercises included, for a reader who knows a PyTorch training loop (not measured).
STUDY_TIME = {"01-dataparallel": "1–1.5 h", "02-ddp": "2–3 h", "03-amp": "1–1.5 h", "04-accelerate-tpu": "2–3 h"}


def lessons() -> list[str]:
    return sorted(p.parent.name for p in (REPO / "notebooks").glob("*/*.ipynb") if p.stem == p.parent.name)


# What a built page must not show of the machine that ran the notebook (machine_paths_removed).
_NAME = r"[^/\s\"'`<>:;,()\[\]{}|\\\x00-\x1f]"  # a character of a file name (not a quote, a delimiter, an ANSI escape)
_AT_PATH_START = r"(?:(?<![\w.~-])|(?<=\dm))"  # where a path starts: not inside a name, or after an ANSI colour (`\x1b[32m/tmp/x`)
_SITE_PACKAGES = re.compile(rf"{_AT_PATH_START}(?:/[\w.+~-]+)+/(site|dist)-packages\b")
_PYTHON_LIB = re.compile(rf"{_AT_PATH_START}(?:/[\w.+~-]+)*/lib/(python3\.\d+)/")
_TMP = re.compile(rf"{_AT_PATH_START}/tmp/(?:{_NAME}|/)+")
_HOME = re.compile(rf"{_AT_PATH_START}(?:/root|/home/{_NAME}+|/Users/{_NAME}+)(?=/)")


def machine_paths_removed(text: str, root: Path | str = REPO) -> str:
    """`text`, an output of a notebook run on a machine whose repository is at `root`, without that machine's
    paths: a site-packages folder (the venv's or another) -> `site-packages`, the repository -> paths relative
    to it, Python's own library -> `python3.X/`, `/tmp/...` -> `/tmp/…`, a home folder (`/root`,
    `/home/<user>`, `/Users/<user>`) -> `~`."""
    root = str(root).rstrip("/")
    text = _SITE_PACKAGES.sub(r"\1-packages", text)
    text = _PYTHON_LIB.sub(r"\1/", text)
    if root:
        text = text.replace(root + "/", "")
        text = re.sub(re.escape(root) + r"(?![\w.-])", ".", text)
    text = _TMP.sub("/tmp/…", text)
    return _HOME.sub("~", text)


def _without_machine_paths(value, root):
    if isinstance(value, str):
        return machine_paths_removed(value, root)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [machine_paths_removed(v, root) for v in value]
    return value


def _output_without_machine_paths(output: dict, root: Path | str = REPO) -> nbformat.NotebookNode:
    """A copy of a notebook output with machine_paths_removed from its text: a stream, an error's message and
    traceback, a display's text/* data (never an image's base64, where "/tmp/" can occur by chance)."""
    output = nbformat.from_dict(output)  # a copy: the executed notebook stays as it was
    for key in ("text", "evalue", "traceback"):
        if key in output:
            output[key] = _without_machine_paths(output[key], root)
    for mime, value in output.get("data", {}).items():
        if mime.startswith("text/"):
            output.data[mime] = _without_machine_paths(value, root)
    return output


def page(lesson: str, executed: nbformat.NotebookNode | None, root: Path | str = REPO) -> nbformat.NotebookNode:
    """The released notebook with the outputs of its explanation cells (matched by cell id), without the paths
    of the machine that ran them (`root`: the repository there)."""
    nb = nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    outputs = {c.get("id"): c for c in executed.cells} if executed is not None else {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        ran = outputs.get(cell.get("id"))
        if ran is None or is_exercise_cell(cell) or ran.source != cell.source:
            cell.outputs, cell.execution_count = [], None
        else:
            cell.outputs = [_output_without_machine_paths(output, root) for output in ran.outputs]
            cell.execution_count = ran.execution_count
    return nb


def execute(lesson: str) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    with tempfile.TemporaryDirectory() as scratch:  # what the lesson writes stays out of the checkout
        NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": scratch}}).execute()
    return nb


def page_title(name: str) -> str:
    """An instructors' page's title: its first line, a `# ` heading."""
    first = (PAGES_DIR / f"{name}.md").read_text().splitlines()[0]
    if not first.startswith("# "):
        raise ValueError(f"website/pages/{name}.md must start with a `# ` title, not {first!r}")
    return first[2:].strip()


def hardware_table() -> str:
    """The full "What runs where" table (website/pages/hardware.md, before its first `## ` section)."""
    hardware = (PAGES_DIR / "hardware.md").read_text().split("\n## ")[0]
    return "\n".join(line for line in hardware.splitlines() if line.startswith("|"))


def landing_page(names: list[str]) -> str:
    readme = (REPO / "README.md").read_text()
    blurbs = dict(re.findall(r"^\d\. \*\*(.+?)\*\* — (.+)$", readme.split("## The two commands")[0], re.M))
    table = hardware_table()
    rows = []
    for number, (name, (topic, blurb)) in enumerate(zip(names, blurbs.items()), start=1):
        rows.append(f"{number}. [**{topic}**](lessons/{name}.ipynb) — {blurb} *About {STUDY_TIME.get(name, '1–2 h')}.*")
    toctree = "\n".join(f"lessons/{name}" for name in names)
    instructors = "\n".join(f"- [{page_title(name)}]({name}.md)" for name in PAGES)
    instructors_toctree = "\n".join(PAGES)
    return f"""# {TITLE}

Four Jupyter lessons on training one model on several GPUs or TPU chips, with auto-graded exercises.
Every cell runs for real on the machine you have — a laptop CPU, one or more GPUs, Colab's or Kaggle's free
runtimes (CPU, T4, 2×T4, TPU v5e-1, TPU v5e-8) — and each lesson page has its **Open in Colab** and
**Open in Kaggle** badges. The pages here show the student notebooks with the outputs of their explanation
cells, run on a CPU-only machine; the exercises are left for you.

## Lessons

{chr(10).join(rows)}

Study times are estimates, exercises included.

## Prerequisites

- Python and a PyTorch training loop (a model, a loss, `backward()`, an optimizer step).
- No GPU: every lesson runs on a laptop CPU, real where the CPU can do it (DDP on gloo processes, torch_xla
  on virtual XLA:CPU devices), emulated and labelled as such where it cannot (`nn.DataParallel`).
- To run the course locally: Python 3.11 and GNU make, then `make lab` in a clone of
  [the repository]({REPOSITORY}).

## What runs where

{table}

More on the hardware, and what was run on real hardware: [What runs where](hardware.md).

## For instructors

Grading the exercises, running a class and the course's internals:

{instructors}

```{{toctree}}
:hidden:
:maxdepth: 1
:caption: Lessons

{toctree}
```

```{{toctree}}
:hidden:
:maxdepth: 1
:caption: Instructors

{instructors_toctree}
```

The course's code and text are under the MIT licence.
"""


CONF = f'''project = "{TITLE}"
extensions = ["myst_nb"]
nb_execution_mode = "off"  # the outputs are already in the notebooks
myst_enable_extensions = ["colon_fence"]
html_theme = "sphinx_book_theme"
html_title = "{TITLE}"
html_theme_options = {{"repository_url": "{REPOSITORY}", "use_repository_button": True, "show_toc_level": 2}}
html_last_updated_fmt = None
exclude_patterns = ["_build"]
suppress_warnings = ["mystnb.unknown_mime_type"]
'''


def build(out: Path, executed: Path | None = None, names: list[str] | None = None) -> Path:
    """The site in `out`: the lessons `names` (all by default), the landing page and the instructors' pages."""
    names = lessons() if names is None else names
    with tempfile.TemporaryDirectory(prefix="site-src-") as tmp:
        src = Path(tmp)
        (src / "lessons").mkdir()
        for name in PAGES:
            shutil.copy(PAGES_DIR / f"{name}.md", src / f"{name}.md")
        for name in names:
            ran = None
            if executed is not None:
                ran = nbformat.read(executed / f"{name}.ipynb", as_version=4)
            else:
                print(f"running {name} for its outputs", flush=True)
                ran = execute(name)
            nbformat.write(page(name, ran), src / "lessons" / f"{name}.ipynb")
        (src / "index.md").write_text(landing_page(names))
        (src / "conf.py").write_text(CONF)
        if out.exists():
            shutil.rmtree(out)
        build_run = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going",
                                    str(src), str(out)], capture_output=True, text=True)
        if build_run.returncode:
            raise RuntimeError(f"sphinx-build failed:\n{build_run.stdout[-3000:]}\n{build_run.stderr[-3000:]}")
    return out / "index.html"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "build" / "site")
    parser.add_argument("--executed", type=Path, default=None,
                        help="a folder of the lessons' notebooks, already executed (<lesson>.ipynb)")
    args = parser.parse_args(argv)
    index = build(args.out.resolve(), args.executed)
    print(f"built {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
