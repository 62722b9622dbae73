"""The course website (`make site`, graders/site.py), built from the class's untouched submissions (the student
notebooks, already executed by the grader) and opened in headless Chromium: every page loads, every figure
shows, no link is broken, and no page shows a solution or a hidden test."""

import functools
import http.server
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import nbformat
import pytest

from graders import site

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# As the machine's notes prescribe for a closed network: no background connections, no sandbox as root.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# Links and images that leave the site (not reachable from the test machine): where each may point.
EXTERNAL = {
    "colab.research.google.com": r"/github/multi-device-course/pytorch-multi-device-course/blob/main/(notebooks/.+\.ipynb)",
    "kaggle.com": r"/kernels/welcome\?src=https://github\.com/multi-device-course/pytorch-multi-device-course/blob/main/(notebooks/.+\.ipynb)",
    "github.com": r"/multi-device-course/pytorch-multi-device-course(/blob/main/(.+))?",
}
BADGES = {"https://colab.research.google.com/assets/colab-badge.svg", "https://kaggle.com/static/images/open-in-kaggle.svg"}


@pytest.fixture(scope="module")
def built(graded_class, tmp_path_factory):
    executed = tmp_path_factory.mktemp("executed")
    for lesson in site.lessons():
        shutil.copy(graded_class.root / "autograded" / "blank" / lesson / f"{lesson}.ipynb", executed / f"{lesson}.ipynb")
    out = tmp_path_factory.mktemp("site") / "html"
    site.build(out, executed)
    handler = functools.partial(QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", out
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _figures(nb) -> int:
    return sum(1 for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
               if "image/png" in out.get("data", {}))


def test_pages_show_the_student_notebooks_outputs_and_nothing_of_the_solutions(built, graded_class):
    _, out = built
    for lesson in site.lessons():
        html = (out / "lessons" / f"{lesson}.html").read_text()
        solution = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
        released = "\n".join(c.source for c in site.page(lesson, None).cells)
        for cell in solution.cells:
            for block in re.findall(r"### BEGIN (?:SOLUTION|HIDDEN TESTS)\n(.*?)### END", cell.source, re.S):
                for line in (l.strip() for l in block.splitlines()):
                    if len(line) > 30 and line not in released:  # a line the student version has anyway is no secret
                        assert html.find(line.replace("<", "&lt;")) == -1 and html.find(line) == -1, \
                            f"{lesson} shows a secret line: {line}"
        assert "BEGIN HIDDEN TESTS" not in html and "# [judge]" not in html
        executed = nbformat.read(graded_class.root / "autograded" / "blank" / lesson / f"{lesson}.ipynb", as_version=4)
        assert _figures(site.page(lesson, executed)) > 0, f"{lesson}: its figures were not carried over"


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (make test installs Debian's chromium as root)")
def test_every_page_loads_every_figure_shows_and_no_link_is_broken(built, graded_class):
    from playwright.sync_api import sync_playwright

    base, out = built
    lessons = site.lessons()
    pages = ["index.html"] + [f"lessons/{lesson}.html" for lesson in lessons]
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
                if path.startswith("lessons/"):
                    lesson = Path(path).stem
                    executed = nbformat.read(graded_class.root / "autograded" / "blank" / lesson / f"{lesson}.ipynb",
                                             as_version=4)
                    figures = [i for i in local if "/_images/" in i["src"]]
                    assert len(figures) == _figures(site.page(lesson, executed)), f"{path}: not every figure is on the page"
                    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
                    assert any("colab.research.google.com" in h for h in hrefs) and any("kaggle.com" in h for h in hrefs)
                links |= {(path, href) for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")}
            assert not errors, f"JavaScript errors: {errors}"
            index_links = {href for where, href in links if where == "index.html"}
            for lesson in lessons:
                assert f"{base}/lessons/{lesson}.html" in index_links, f"the landing page does not link {lesson}"
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
