"""`make site`: the released lessons as a static website (build/site/index.html).

    python -m website.build [--out build/site] [--executed FOLDER]

Sphinx with MyST-NB: MyST-NB renders a notebook's stored outputs, figures included, as HTML pages that
Sphinx ties into one site with navigation, search and a landing page, and the same build can take
Markdown pages. (Jupyter Book 2 is a Node.js application, a second toolchain for the same result.)

Each page is a lesson's *student* notebook (notebooks/, never solutions or hidden tests) in its edition (English at
the site's root, notebooks/<lang>/ under <lang>/) with the outputs of its explanation cells from a run of that same
notebook: run here, or taken from FOLDER/<lesson>.ipynb (English) and FOLDER/<lang>/<lesson>.ipynb, the same
notebook already executed (make test reuses the graded class's untouched English submissions). An edition's page
shows only its own run's outputs: the Turkish code prints Turkish, and the helpers speak the notebook's language.
Exercise and check cells are shown without outputs: unsolved, they only show their own errors. Outputs carry
no machine paths (machine_paths_removed): tracebacks show repository-relative paths, `site-packages/`, `/tmp/…`
and `~` instead of the build machine's folders. The landing page lists the lessons (from the README),
prerequisites, study-time estimates and the hardware table (website/pages/hardware.md). The instructors'
pages are the Markdown files of website/pages/ (PAGES), under an "Instructors" caption.
"""

from __future__ import annotations

import argparse
import html
import os
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
REPOSITORY = "https://github.com/multi-device-course/pytorch-multi-device-course"
# Estimates, exercises included, for a reader who knows a PyTorch training loop (not measured).
STUDY_TIME = {"01-dataparallel": (1, 1.5), "02-ddp": (2, 3), "03-amp": (1, 1.5), "04-accelerate-tpu": (2, 3),
              "05-sharding": (1.5, 2)}  # hours
HOURS = {"en": ("{} h", "."), "tr": ("{} sa", ",")}  # the edition's hour and decimal mark


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
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [machine_paths_removed(v, root) for v in value]
    return machine_paths_removed(value, root) if isinstance(value, str) else value


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


def released(lesson: str, lang: str = "en") -> Path:
    """A lesson's student notebook in edition `lang` (notebooks/, notebooks/<lang>/)."""
    return REPO / "notebooks" / ("" if lang == "en" else lang) / lesson / f"{lesson}.ipynb"


def edition_of(nb) -> str:
    """The edition a notebook is (the metadata i18n/catalog.py's translate writes), English without it."""
    return nb.metadata.get("course_edition") or "en"


def page(lesson: str, executed: nbformat.NotebookNode | None, root: Path | str = REPO,
         lang: str = "en") -> nbformat.NotebookNode:
    """The released notebook of edition `lang` with the outputs of its explanation cells from `executed`, a run of
    that edition's notebook (matched by cell id, where the cell ran as released), without the paths of the machine
    that ran them (`root`: the repository there). Another edition's run is refused: its outputs are in its words."""
    nb = nbformat.read(released(lesson, lang), as_version=4)
    if executed is not None and edition_of(executed) != lang:
        raise ValueError(f"{lesson}: a run of the {edition_of(executed)!r} edition cannot give the {lang!r} page its outputs")
    outputs = {c.get("id"): c for c in executed.cells} if executed is not None else {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        ran = outputs.get(cell.get("id"))
        if ran is None or is_exercise_cell(cell) or ran.source != cell.source:
            cell.outputs, cell.execution_count = [], None
        else:
            shown = _coalesced(_static_widgets(ran.outputs, widget_state(executed)))
            cell.outputs = [_output_without_machine_paths(output, root) for output in shown]
            cell.execution_count = ran.execution_count
    return nb


WIDGET_VIEW, WIDGET_STATE = "application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json"


def widget_state(executed) -> dict:
    """The widgets' last state that the run saved in the notebook (nbclient does), by model id."""
    saved = (executed.metadata.get("widgets") or {}).get(WIDGET_STATE) or {} if executed is not None else {}
    return {model: entry.get("state", {}) for model, entry in (saved.get("state") or {}).items()}


def _static_widgets(outputs: list, state: dict) -> list:
    """A progress bar (tqdm's widget: an HBox of a label, a bar and a count) as the text of its last state, which a
    static page can show; a widget whose state the run did not keep is left out (its text is its first state)."""
    shown = []
    for output in outputs:
        view = output.get("data", {}).get(WIDGET_VIEW) if output.get("output_type") == "display_data" else None
        if view is None:
            shown.append(output)
        elif (text := _progress_text(view.get("model_id"), state)) is not None:
            shown.append(nbformat.v4.new_output("stream", name="stdout", text=text + "\n"))
    return shown


def _progress_text(model_id, state: dict) -> str | None:
    parts = [state.get(child.removeprefix("IPY_MODEL_"), {}) for child in state.get(model_id, {}).get("children", [])]
    if len(parts) != 3 or "max" not in parts[1]:
        return None
    left, bar, right = parts
    filled = round(20 * bar.get("value", 0) / bar["max"]) if bar["max"] else 20
    label = lambda part: html.unescape(re.sub(r"<[^>]*>", "", str(part.get("value", "")))).replace("\u2007", " ").strip()
    return f"{label(left)}|{'█' * filled}{' ' * (20 - filled)}| {label(right)}"


def _coalesced(outputs: list) -> list:
    """Consecutive stream outputs of one name as one, as Jupyter shows them (a launch's rank lines come one print at a
    time: a page would box each)."""
    merged = []
    for output in outputs:
        last = merged[-1] if merged else None
        if (output.get("output_type") == "stream" and last is not None and last.get("output_type") == "stream"
                and last.get("name") == output.get("name")):
            merged[-1] = nbformat.from_dict({**last, "text": _text(last) + _text(output)})
        else:
            merged.append(output)
    return merged


def _text(output) -> str:
    return "".join(output["text"]) if isinstance(output["text"], list) else output["text"]


def execute(lesson: str, lang: str = "en") -> nbformat.NotebookNode:
    """The lesson's student notebook of edition `lang`, run top to bottom (an error does not stop it)."""
    from jupyter_client import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(released(lesson, lang), as_version=4)
    with tempfile.TemporaryDirectory() as scratch:  # what the lesson writes stays out of the checkout
        # on unix sockets: a kernel on TCP warns that it is unencrypted; shut down here, or it warns its parent left
        kernel = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(scratch, "kernel"))
        try:
            NotebookClient(nb, km=kernel, timeout=600, allow_errors=True, resources={"metadata": {"path": scratch}}).execute()
        finally:
            if kernel.has_kernel:
                kernel.shutdown_kernel(now=True)
    return nb


def page_text(name: str, lang: str = "en") -> str:
    """A page of website/pages/ in edition `lang` (i18n/<lang>/pages/<name>.po)."""
    if lang == "en":
        return (PAGES_DIR / f"{name}.md").read_text()
    from i18n import catalog

    return catalog.translate_page(name, lang)


def page_title(name: str, lang: str = "en") -> str:
    """An instructors' page's title: its first line, a `# ` heading."""
    first = page_text(name, lang).splitlines()[0]
    if not first.startswith("# "):
        raise ValueError(f"website/pages/{name}.md must start with a `# ` title, not {first!r}")
    return first[2:].strip()


def hardware_table(lang: str = "en") -> str:
    """The full "What runs where" table (website/pages/hardware.md, before its first `## ` section)."""
    hardware = page_text("hardware", lang).split("\n## ")[0]
    return "\n".join(line for line in hardware.splitlines() if line.startswith("|"))


def lesson_title(lesson: str, lang: str = "en") -> str:
    """A lesson's title, from its notebook's first heading ("# Lesson 1 — DataParallel ..." -> after the dash)."""
    folder = REPO / "notebooks" / (lesson if lang == "en" else f"{lang}/{lesson}")
    first = nbformat.read(folder / f"{lesson}.ipynb", as_version=4).cells[0].source.splitlines()[0]
    return first.lstrip("# ").split(" — ", 1)[-1].strip()


def study_time(lesson: str, lang: str = "en") -> str:
    """A lesson's study time in the edition's words ("1–1.5 h", "1–1,5 sa")."""
    if lang not in HOURS:
        raise ValueError(f"lang must be one of {sorted(HOURS)}, got {lang!r}")
    unit, mark = HOURS[lang]
    low, high = STUDY_TIME.get(lesson, (1, 2))
    return unit.format("–".join(f"{hours:g}".replace(".", mark) for hours in (low, high)))


def landing_page(names: list[str], lang: str = "en") -> str:
    """website/pages/landing.md (in `lang`) with the lessons, the hardware table and the instructors' pages filled
    in, and the site's navigation (captions: the landing page's own headings)."""
    text = page_text("landing", lang)
    rows = [f"{number}. [**{lesson_title(name, lang)}**](lessons/{name}.ipynb) — ⏱ {study_time(name, lang)}"
            for number, name in enumerate(names, start=1)]
    instructors = "\n".join(f"- [{page_title(name, lang)}]({name}.md)" for name in PAGES)
    headings = re.findall(r"^## (.+)$", text, re.M)
    captions = (headings[0], headings[-1])  # "Lessons", "For instructors"
    text = (text.replace("%%LESSONS%%", "\n".join(rows)).replace("%%HARDWARE_TABLE%%", hardware_table(lang))
            .replace("%%INSTRUCTORS%%", instructors))
    toctree = "\n".join(f"lessons/{name}" for name in names)
    for caption, entries in zip(captions, (toctree, "\n".join(PAGES))):
        text += f"\n```{{toctree}}\n:hidden:\n:maxdepth: 1\n:caption: {caption}\n\n{entries}\n```\n"
    return text


CONF = '''project = "{title}"
extensions = ["myst_nb"]
nb_execution_mode = "off"  # the outputs are already in the notebooks
myst_enable_extensions = ["colon_fence"]
html_theme = "sphinx_book_theme"
html_title = "{title}"
html_theme_options = {{"repository_url": "{REPOSITORY}", "use_repository_button": True, "show_toc_level": 2,
                       "article_header_end": ["article-header-buttons.html", "language-switch.html"]}}
templates_path = ["_templates"]
html_last_updated_fmt = None
exclude_patterns = ["_build"]
suppress_warnings = ["mystnb.unknown_mime_type"]
'''
# Every page links to the same page of the other edition: English at the site's root, Turkish under tr/.
EDITIONS = {"en": ("", "English"), "tr": ("tr/", "Türkçe")}
LANGUAGE_SWITCH = """{%- set root = '../' * pagename.count('/') + ('../' if language != 'en' else '') -%}
{%- for lang, prefix, name in other_editions %}
<a class="btn btn-sm language-switch" href="{{ root }}{{ prefix }}{{ pagename }}.html" hreflang="{{ lang }}"
   lang="{{ lang }}" title="{{ name }}">{{ name }}</a>
{%- endfor %}
"""


def build(out: Path, executed: Path | None = None, names: list[str] | None = None, run_missing: bool = True) -> Path:
    """The site in `out`: for each edition (English at the root, the others under <lang>/) the lessons `names`
    (all by default), the landing page and the instructors' pages. A lesson's outputs come from
    executed/<lang prefix><lesson>.ipynb, or from a run of the edition's notebook here (not `run_missing`: none)."""
    names = lessons() if names is None else names
    ran = {lang: {} for lang in EDITIONS}
    for lang, (prefix, _) in EDITIONS.items():
        for name in names:
            path = executed / prefix / f"{name}.ipynb" if executed is not None else None
            if path is not None and path.is_file():
                ran[lang][name] = nbformat.read(path, as_version=4)
            elif run_missing:
                print(f"running {prefix}{name} for its outputs", flush=True)
                ran[lang][name] = execute(name, lang)
            else:
                ran[lang][name] = None
    if out.exists():
        shutil.rmtree(out)
    for lang in EDITIONS:
        _build_edition(out / EDITIONS[lang][0], names, ran[lang], lang)
    return out / "index.html"


def _build_edition(out: Path, names: list[str], ran: dict, lang: str) -> None:
    with tempfile.TemporaryDirectory(prefix="site-src-") as tmp:
        src = Path(tmp)
        (src / "lessons").mkdir()
        (src / "_templates").mkdir()
        (src / "_templates" / "language-switch.html").write_text(LANGUAGE_SWITCH)
        for name in PAGES:
            (src / f"{name}.md").write_text(page_text(name, lang))
        for name in names:
            nbformat.write(page(name, ran[name], lang=lang), src / "lessons" / f"{name}.ipynb")
        (src / "index.md").write_text(landing_page(names, lang))
        others = [(other, prefix, title) for other, (prefix, title) in EDITIONS.items() if other != lang]
        conf = CONF.format(title=page_title("landing", lang), REPOSITORY=REPOSITORY)
        (src / "conf.py").write_text(conf + f"language = {lang!r}\nhtml_context = {{'other_editions': {others!r}}}\n")
        build_run = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going",
                                    str(src), str(out)], capture_output=True, text=True)
        if build_run.returncode:
            raise RuntimeError(f"sphinx-build ({lang}) failed:\n{build_run.stdout[-3000:]}\n{build_run.stderr[-3000:]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "build" / "site")
    parser.add_argument("--executed", type=Path, default=None,
                        help="a folder of the lessons' notebooks, already executed (<lesson>.ipynb, <lang>/<lesson>.ipynb;"
                             " one it lacks is run)")
    args = parser.parse_args(argv)
    index = build(args.out.resolve(), args.executed)
    print(f"built {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
