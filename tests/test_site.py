"""The course website (`make site`, website/build.py), built from the class's runs (tests/corpus.py: the English
student notebooks untouched and the Turkish solutions, already executed by the grader with their demonstrations) and
opened in headless Chromium: every page loads, every figure shows, no link is broken, and no page shows a solution or
a hidden test. A Turkish page shows its own notebook's run, never the English run's, and no English sentence. The
instructors' pages (website/pages/) are in the navigation and linked, and outputs carry no machine paths (both also
checked without the class, on a build of the pages alone)."""

import base64
import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import nbformat
import pytest

from graders import release
from website import build as site

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# In CI (CI=true) a missing Chromium fails the browser test; a developer machine without it skips it.
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
NO_CHROMIUM = "no Chromium: install Debian's chromium (`make browser` as root, or apt-get install chromium)"
# As the machine's notes prescribe for a closed network: no background connections, no sandbox as root.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# Links and images that leave the site (not reachable from the test machine): where each may point.
EXTERNAL = {
    "colab.research.google.com": r"/github/multi-device-course/pytorch-multi-device-course/blob/main/(notebooks/.+\.ipynb)",
    "kaggle.com": r"/kernels/welcome\?src=https://github\.com/multi-device-course/pytorch-multi-device-course/blob/main/(notebooks/.+\.ipynb)",
    "github.com": r"/multi-device-course/pytorch-multi-device-course(?:/blob/main/(.+))?",
    "distributed.dask.org": r"/?",  # Dask's home page, from the cluster page
}
BADGES = {"https://colab.research.google.com/assets/colab-badge.svg", "https://kaggle.com/static/images/open-in-kaggle.svg"}


# The class's runs each edition's pages take their outputs from: the released notebook (English), the solutions (Turkish)
RUNS = {"en": "blank", "tr": "turkish"}


def _class_run(graded_class, lesson: str, lang: str) -> Path:
    return graded_class.root / "autograded" / RUNS[lang] / lesson / f"{lesson}.ipynb"


@pytest.fixture(scope="module")
def built(graded_class, tmp_path_factory):
    executed = tmp_path_factory.mktemp("executed")
    for lang, (prefix, _) in site.EDITIONS.items():
        (executed / prefix).mkdir(parents=True, exist_ok=True)
        for lesson in site.lessons():
            shutil.copy(_class_run(graded_class, lesson, lang), executed / prefix / f"{lesson}.ipynb")
    out = tmp_path_factory.mktemp("site") / "html"
    site.build(out, executed, run_missing=False)
    handler = functools.partial(QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", out, executed
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _figures(nb) -> int:
    return sum(1 for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
               if "image/png" in out.get("data", {}))


def test_pages_show_the_student_notebooks_outputs_and_nothing_of_the_solutions(built, graded_class):
    _, out, _ = built
    for lesson in site.lessons():
        solution = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
        for lang, (prefix, _) in site.EDITIONS.items():
            html = (out / prefix / "lessons" / f"{lesson}.html").read_text()
            released = "\n".join(c.source for c in site.page(lesson, None, lang=lang).cells)
            for cell in solution.cells:
                for block in re.findall(r"### BEGIN (?:SOLUTION|HIDDEN TESTS)\n(.*?)### END", cell.source, re.S):
                    for line in (l.strip() for l in block.splitlines()):
                        if len(line) > 30 and line not in released:  # a line the student version has anyway is no secret
                            assert html.find(line.replace("<", "&lt;")) == -1 and html.find(line) == -1, \
                                f"{prefix}{lesson} shows a secret line: {line}"
            assert "BEGIN HIDDEN TESTS" not in html and "# [judge]" not in html
        for lang in site.EDITIONS:
            executed = nbformat.read(_class_run(graded_class, lesson, lang), as_version=4)
            assert _figures(site.page(lesson, executed, lang=lang)) > 0, f"{lesson} ({lang}): its figures were not carried over"


def _outputs(html: str) -> str:
    """The text of a built lesson page's outputs (MyST-NB's cell_output blocks)."""
    from bs4 import BeautifulSoup

    return "\n".join(div.get_text() for div in BeautifulSoup(html, "html.parser").select("div.cell_output"))


def _leading_words(literal: str) -> str:
    """The text of a string literal before its first placeholder."""
    import ast

    node = ast.parse(f"(\n{literal}\n)", mode="eval").body
    first = node if isinstance(node, ast.Constant) else node.values[0]
    return first.value.strip() if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""


def _printed(lesson: str, lang: str) -> list[tuple[str, str]]:
    """(English, translation) of the words before the first placeholder of each translated `print` message of the
    lesson's code (i18n/<lang>/<lesson>.po), where the English is two words or more."""
    import ast

    from i18n import catalog

    said = {(m.context, m.id): m.string for m in catalog.read(lang, lesson) if m.string and "fuzzy" not in m.flags}
    found = []
    for cell in catalog.source_notebook(lesson).cells:
        code = catalog.visible_code(cell.source) if cell.cell_type == "code" else ""
        try:
            tree = ast.parse(code)
        except SyntaxError:  # a cell with its solution blanked out: the catalog takes no message of it either
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                found += [(_leading_words(english), _leading_words(said[cell.id, english]))
                          for english in (ast.get_source_segment(code, arg) for arg in node.args) if (cell.id, english) in said]
    return [(english, turkish) for english, turkish in found if len(english.split()) >= 2 and english != turkish]


@pytest.mark.parametrize("lesson", site.lessons())
def test_a_turkish_lesson_page_shows_its_own_notebooks_outputs(built, lesson):
    """The Turkish page of each lesson shows what its Turkish `print`s printed when the Turkish notebook ran (every
    line the English page shows, in Turkish), never the English run's line under Turkish code ("rows per device:"
    under `print("cihaz başına satır:", ...)`), and no English sentence of the catalogs (test_turkish_outputs.py)."""
    from test_turkish_outputs import english_in

    _, out, _ = built
    turkish = _outputs((out / "tr" / "lessons" / f"{lesson}.html").read_text())
    english = _outputs((out / "lessons" / f"{lesson}.html").read_text())
    pairs = _printed(lesson, "tr")
    shown = [(e, t) for e, t in pairs if e in english]
    assert len(pairs) >= 5 and len(shown) >= 3, (pairs, shown)
    assert lesson != "01-dataparallel" or ("rows per device:", "cihaz başına satır:") in shown
    assert [e for e, _ in pairs if e in turkish] == [], "English lines on the Turkish page"
    missing = [t for e, t in shown if t not in turkish]
    assert not missing, f"the Turkish page lacks its run's lines {missing}"
    assert not english_in(turkish, lesson), english_in(turkish, lesson)


@pytest.mark.skipif(CHROMIUM is None and not IN_CI, reason=NO_CHROMIUM)
def test_every_page_loads_every_figure_shows_and_no_link_is_broken(built, graded_class):
    if CHROMIUM is None:  # only in CI (CI is set): the browser test must run there
        pytest.fail(f"{NO_CHROMIUM}; in CI it must run: `make browser`, which make test runs first, said why not")
    from playwright.sync_api import sync_playwright

    base, out, executed_folder = built
    lessons = site.lessons()
    pages = [f"{prefix}{path}" for prefix, _ in site.EDITIONS.values()
             for path in ["index.html", *(f"lessons/{lesson}.html" for lesson in lessons), *(f"{n}.html" for n in site.PAGES)]]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            links = set()
            for path in pages:
                response = page.goto(f"{base}/{path}", wait_until="load")
                assert response is not None and response.ok, path
                images = page.eval_on_selector_all(
                    "img", "els => els.map(e => ({src: e.currentSrc || e.src, shown: e.complete && e.naturalWidth > 0}))")
                local = [i for i in images if i["src"].startswith(base)]
                assert all(i["shown"] for i in local), f"{path}: figures that do not show: {[i for i in local if not i['shown']]}"
                assert {i["src"] for i in images if not i["src"].startswith(base)} <= BADGES, path
                lang = "tr" if path.startswith("tr/") else "en"
                switch = page.eval_on_selector_all("a.language-switch", "els => els.map(e => [e.hreflang, e.href])")
                other = [(other, prefix) for other, (prefix, _) in site.EDITIONS.items() if other != lang]
                same_page = path.removeprefix(site.EDITIONS[lang][0])
                assert switch == [[o, f"{base}/{prefix}{same_page}"] for o, prefix in other], f"{path}: language switch {switch}"
                if "lessons/" in path:
                    lesson = Path(path).stem
                    ran = executed_folder / site.EDITIONS[lang][0] / f"{lesson}.ipynb"
                    executed = nbformat.read(ran, as_version=4) if ran.is_file() else None
                    figures = [i for i in local if "/_images/" in i["src"]]
                    assert len(figures) == _figures(site.page(lesson, executed, lang=lang)), \
                        f"{path}: not every figure is on the page"
                    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
                    assert any("colab.research.google.com" in h for h in hrefs) and any("kaggle.com" in h for h in hrefs)
                links |= {(path, href) for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")}
            assert not errors, f"JavaScript errors: {errors}"
            for prefix, _ in site.EDITIONS.values():
                index_links = {href for where, href in links if where == f"{prefix}index.html"}
                for lesson in lessons:
                    assert f"{base}/{prefix}lessons/{lesson}.html" in index_links, f"{prefix}index does not link {lesson}"
                for name in site.PAGES:
                    assert f"{base}/{prefix}{name}.html" in index_links, f"{prefix}index does not link {name}"
            for where, href in sorted(links):
                _check_link(page, base, out, where, href)
        finally:
            browser.close()


def _check_link(page, base, out, where, href):
    url, fragment = urldefrag(href)
    parsed = urlparse(url)
    if href.startswith(base):
        response = page.request.get(url)
        assert response.ok, f"{where}: broken link {href} ({response.status})"
        if fragment and url.endswith(".html"):
            target = (out / parsed.path.lstrip("/")).read_text()
            assert f'id="{fragment}"' in target, f"{where}: {href}: no such anchor"
    elif parsed.scheme in ("http", "https"):
        host = parsed.hostname.removeprefix("www.")
        assert host in EXTERNAL, f"{where}: a link to {host} ({href})"
        match = re.fullmatch(EXTERNAL[host], parsed.path + (f"?{parsed.query}" if parsed.query else ""))
        assert match, f"{where}: unexpected link {href}"
        target = match.group(match.lastindex) if match.lastindex else None
        if target:
            assert (REPO / target).exists(), f"{where}: {href} points to {target}, which the repository lacks"
    else:
        assert parsed.scheme in ("mailto", "javascript", ""), f"{where}: {href}"


# Real output, copied from notebooks run in a checkout at /work/main with its venv, Python from pyenv in /root and
# the notebook's folder in /tmp: lesson 2's mp.spawn child that cannot find a notebook's function, and IPython
# tracebacks through torch, the course's helpers and a file in the notebook's folder.
SPAWN_CHILD_STDERR = """Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/spawn.py", line 122, in spawn_main
    exitcode = _main(fd, parent_sentinel)
               ^^^^^^^^^^^^^^^^^^^^^^^^^^
AttributeError: Can't get attribute 'notebook_worker' on <module '__main__' (built-in)>
"""
IPYTHON_TRACEBACK = [
    "\x1b[36mFile \x1b[39m\x1b[32m/work/main/.venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py:364\x1b[39m, "
    "in \x1b[36mspawn\x1b[39m\x1b[34m(fn, args, nprocs, join, daemon, start_method)\x1b[39m\n",
    "\x1b[36mFile \x1b[39m\x1b[32m/work/main/helpers/launch.py:104\x1b[39m, in \x1b[36mlaunch\x1b[39m"
    "\x1b[34m(worker, n_procs, args, backend, timeout_s, init_process_group, env)\x1b[39m\n",
    "\x1b[36mFile \x1b[39m\x1b[32m/tmp/sitework/x.py:2\x1b[39m, in \x1b[36mf\x1b[39m\x1b[34m()\x1b[39m\n",
]


def test_outputs_lose_the_paths_of_the_machine_that_ran_them():
    clean = site.machine_paths_removed(SPAWN_CHILD_STDERR, "/work/main")
    assert '  File "python3.11/multiprocessing/spawn.py", line 122, in spawn_main' in clean
    assert "AttributeError: Can't get attribute 'notebook_worker'" in clean
    venv, repo, tmp = (site.machine_paths_removed(line, "/work/main") for line in IPYTHON_TRACEBACK)
    assert "\x1b[32msite-packages/torch/multiprocessing/spawn.py:364\x1b[39m, in \x1b[36mspawn" in venv
    assert "\x1b[32mhelpers/launch.py:104\x1b[39m, in \x1b[36mlaunch" in repo
    assert "\x1b[32m/tmp/…:2\x1b[39m, in \x1b[36mf" in tmp
    assert site.machine_paths_removed("/home/alice/data.csv /Users/bob/x.py /root/.cache/y", "/work/main") == \
        "~/data.csv ~/x.py ~/.cache/y"
    assert site.machine_paths_removed("cwd /work/main; /work/main2/x", "/work/main") == "cwd .; /work/main2/x"
    assert site.machine_paths_removed("x in /opt/py/lib/python3.11/site-packages (1.0)", "/work/main") == \
        "x in site-packages (1.0)"
    for text in [SPAWN_CHILD_STDERR, *IPYTHON_TRACEBACK]:
        clean = site.machine_paths_removed(text, "/work/main")
        assert not re.search(r"/work/main|/root|/tmp/[^…]|/home/|\.pyenv|\.venv", clean), clean
        assert site.machine_paths_removed(clean, "/work/main") == clean


def test_a_lesson_page_shows_its_outputs_without_machine_paths_and_its_figures_unchanged():
    released = nbformat.read(REPO / "notebooks" / "02-ddp" / "02-ddp.ipynb", as_version=4)
    executed = nbformat.from_dict(released)
    cell = next(c for c in executed.cells if c.cell_type == "code" and not release.is_exercise_cell(c))
    figure = base64.b64encode(base64.b64decode("iVBORw0KGgoA/tmp/AAA")).decode()  # a PNG's base64 may hold "/tmp/"
    assert "/tmp/" in figure
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text=SPAWN_CHILD_STDERR.replace("/work/main", str(REPO))),
        nbformat.v4.new_output("error", ename="ProcessExitedException", evalue=f"see {REPO}/helpers/launch.py",
                               traceback=[line.replace("/work/main", str(REPO)) for line in IPYTHON_TRACEBACK]),
        nbformat.v4.new_output("display_data", data={"image/png": figure, "text/plain": f"<Figure in {REPO}>"}),
    ]
    shown = next(c for c in site.page("02-ddp", executed).cells if c.get("id") == cell.get("id"))
    text = nbformat.writes(nbformat.v4.new_notebook(cells=[shown]))
    assert str(REPO) not in text and "/root/" not in text and "/tmp/sitework" not in text
    assert shown.outputs[0].text == site.machine_paths_removed(SPAWN_CHILD_STDERR, "/work/main")
    assert shown.outputs[1].evalue == "see helpers/launch.py"
    assert shown.outputs[2].data["image/png"] == figure and shown.outputs[2].data["text/plain"] == "<Figure in .>"
    assert cell.outputs[0].text.startswith("Traceback") and str(REPO) in cell.outputs[1].evalue  # executed: as it was


def test_a_progress_bar_shows_as_its_last_state_and_rank_lines_as_one_block():
    """tqdm's widget is text on a static page (its last state, which the run saved); a launch's rank lines, printed
    one at a time, are one block, not a box each; a widget whose state was not kept is left out."""
    released = nbformat.read(REPO / "notebooks" / "02-ddp" / "02-ddp.ipynb", as_version=4)
    executed = nbformat.from_dict(released)
    cell = next(c for c in executed.cells if c.cell_type == "code" and not release.is_exercise_cell(c))
    view = {site.WIDGET_VIEW: {"model_id": "box", "version_major": 2, "version_minor": 0},
            "text/plain": "training:   0%|          | 0/30"}
    cell.outputs = [nbformat.v4.new_output("display_data", data=view),
                    nbformat.v4.new_output("stream", name="stdout", text="[rank0]: a\n"),
                    nbformat.v4.new_output("stream", name="stdout", text=["[rank1]: b\n"]),
                    nbformat.v4.new_output("display_data", data={**view, site.WIDGET_VIEW: {"model_id": "gone"}})]
    state = {"box": {"children": ["IPY_MODEL_l", "IPY_MODEL_b", "IPY_MODEL_r"]}, "l": {"value": "training:\u2007100%"},
             "b": {"value": 30.0, "max": 30.0}, "r": {"value": "\u200730/30\u2007[00:02&lt;00:00,\u200712.3step/s]"}}
    executed.metadata["widgets"] = {site.WIDGET_STATE: {"state": {k: {"state": v} for k, v in state.items()}}}
    shown = next(c for c in site.page("02-ddp", executed).cells if c.get("id") == cell.get("id"))
    assert [o.output_type for o in shown.outputs] == ["stream"], shown.outputs
    assert shown.outputs[0].text == f"training: 100%|{'█' * 20}| 30/30 [00:02<00:00, 12.3step/s]\n[rank0]: a\n[rank1]: b\n"


def _ran(nb, text: str):
    """A copy of released notebook `nb` as if run: each explanation cell printed `text`."""
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        if cell.cell_type == "code" and not release.is_exercise_cell(cell):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    return nb


def test_an_editions_page_shows_only_its_own_runs_outputs():
    """A Turkish page takes its outputs from a run of the Turkish notebook, cell by cell where the cell ran as the
    page shows it; an English run (its lines in English, its helpers speaking English) is refused."""
    lesson = "01-dataparallel"
    english = nbformat.read(site.released(lesson), as_version=4)
    turkish = nbformat.read(site.released(lesson, "tr"), as_version=4)
    with pytest.raises(ValueError, match="'en' edition"):
        site.page(lesson, _ran(english, "rows per device: [2, 2, 2]\n"), lang="tr")
    with pytest.raises(ValueError, match="'tr' edition"):
        site.page(lesson, _ran(turkish, "cihaz başına satır: [2, 2, 2]\n"), lang="en")
    shown = [o.text for c in site.page(lesson, _ran(turkish, "cihaz başına satır: [2, 2, 2]\n"), lang="tr").cells
             if c.cell_type == "code" for o in c.outputs]
    assert len(shown) > 10 and set(shown) == {"cihaz başına satır: [2, 2, 2]\n"}
    changed = _ran(turkish, "x\n")
    cell = next(c for c in changed.cells if 'print("cihaz başına satır:"' in c.source)
    cell.source += "\n# edited after the run"
    assert next(c for c in site.page(lesson, changed, lang="tr").cells if c.get("id") == cell.get("id")).outputs == []


def test_the_site_runs_each_editions_notebook_it_was_not_given(tmp_path, monkeypatch):
    """build: an edition's run from executed/<prefix><lesson>.ipynb, else run here (`make site`), or, not
    `run_missing`, no outputs; never another edition's run."""
    lesson = "01-dataparallel"
    (tmp_path / "executed").mkdir()
    nbformat.write(_ran(nbformat.read(site.released(lesson), as_version=4), "ran\n"),
                   tmp_path / "executed" / f"{lesson}.ipynb")
    runs, pages = [], {}
    monkeypatch.setattr(site, "execute", lambda name, lang="en": runs.append((name, lang)) or
                        _ran(nbformat.read(site.released(name, lang), as_version=4), f"{lang} run\n"))
    monkeypatch.setattr(site, "_build_edition", lambda out, names, ran, lang: pages.update(
        {lang: {name: site.page(name, ran[name], lang=lang) for name in names}}))
    site.build(tmp_path / "out", tmp_path / "executed", names=[lesson])
    assert runs == [(lesson, "tr")]
    outputs = {lang: {o.text for c in nb[lesson].cells if c.cell_type == "code" for o in c.outputs} for lang, nb in pages.items()}
    assert outputs == {"en": {"ran\n"}, "tr": {"tr run\n"}}
    runs.clear()
    site.build(tmp_path / "out", tmp_path / "executed", names=[lesson], run_missing=False)
    assert runs == [] and not any(c.get("outputs") for c in pages["tr"][lesson].cells)


def _static_links(out: Path, path: str) -> set[str]:
    """The links and sources of a built page, as a browser would resolve them (a base address, then the page's)."""
    html = (out / path).read_text()
    return {urljoin(f"http://site/{path}", value.replace("&amp;", "&")) for value in re.findall(r'(?:href|src)="([^"]*)"', html)}


def test_the_instructors_pages_are_built_linked_and_in_the_navigation(tmp_path):
    """A build of the landing page and the instructors' pages alone (no lesson: seconds, no class): each page is
    built, in the navigation under "Instructors" and linked from the landing page, and every link resolves."""
    assert sorted(p.stem for p in site.PAGES_DIR.glob("*.md")) == sorted([*site.PAGES, "landing"]), "every page is in PAGES"
    out = tmp_path / "html"
    site.build(out, names=[])
    index = (out / "index.html").read_text()
    assert 'caption-text">For instructors<' in index
    for name in site.PAGES:
        built = (out / f"{name}.html").read_text()
        assert site.page_title(name).split(":")[0] in built and 'caption-text">For instructors<' in built, name
        assert f'href="{name}.html"' in index, f"the landing page does not link {name}"
    assert site.hardware_table() in site.landing_page([]) and site.hardware_table().count("\n") >= 5
    for path in ["index.html"] + [f"{name}.html" for name in site.PAGES]:
        for href in _static_links(out, path):
            url, fragment = urldefrag(href)
            parsed = urlparse(url)
            if parsed.netloc == "site":
                target = out / parsed.path.lstrip("/")
                assert target.is_file(), f"{path}: broken link {href}"
                if fragment and target.suffix == ".html":
                    assert f'id="{fragment}"' in target.read_text(), f"{path}: {href}: no such anchor"
            elif parsed.scheme in ("http", "https"):
                host = parsed.hostname.removeprefix("www.")
                assert host in EXTERNAL, f"{path}: a link to {host} ({href})"
                match = re.fullmatch(EXTERNAL[host], parsed.path + (f"?{parsed.query}" if parsed.query else ""))
                assert match, f"{path}: unexpected link {href}"
                target = match.group(match.lastindex) if match.lastindex else None
                assert target is None or (REPO / target).exists(), f"{path}: {href}: the repository lacks {target}"
            else:
                assert parsed.scheme in ("mailto", "javascript", ""), f"{path}: {href}"


def test_the_readme_links_every_instructors_page_on_the_site_and_in_the_repository():
    readme = (REPO / "README.md").read_text()
    site_address = "https://multi-device-course.github.io/pytorch-multi-device-course"
    for name in site.PAGES:
        assert f"({site_address}/{name}.html)" in readme and f"(website/pages/{name}.md)" in readme, name


def test_running_a_lesson_for_the_site_prints_nothing_but_its_outputs(tmp_path, monkeypatch, capfd):
    """`make site` runs the lessons quietly: no kernel warning (a TCP kernel's, a kernel whose parent left), no
    traceback of a cell that fails on purpose; the outputs are in the notebook."""
    (tmp_path / "notebooks" / "tiny").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1/0"), nbformat.v4.new_code_cell("print(2)")]),
                   tmp_path / "notebooks" / "tiny" / "tiny.ipynb")
    monkeypatch.setattr(site, "REPO", tmp_path)
    ran = site.execute("tiny")
    assert ran.cells[0].outputs[0].ename == "ZeroDivisionError" and ran.cells[1].outputs[0].text == "2\n"
    printed = capfd.readouterr()
    assert "WARNING" not in printed.err + printed.out and "Traceback" not in printed.err + printed.out, printed
