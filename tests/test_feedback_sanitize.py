"""A feedback page runs nothing a student wrote (graders/redact.py): its links go to http, https, mailto or an
anchor in the page, it has no script, no event handler, nothing that loads another page from the student's
text, and honest Markdown still reads as it should.

The page is made as `nbgrader generate_feedback` makes it: nbgrader's exporter and feedback template with the
course's feedback preprocessors (graders/nbgrader_config.py), all but GetGrades, which reads the gradebook:
the resources it would add are given here."""

import re
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell
from nbgrader.converters import GenerateFeedback
from traitlets.config.loader import PyFileConfigLoader

CONFIG = Path(__file__).resolve().parent.parent / "graders" / "nbgrader_config.py"
PYTHON = {"language_info": {"name": "python"}}
GRADES = {"notebook": "lesson", "score": 1.0, "max_score": 2.0, "late_penalty": 0}

# Each spelling of a link or a script that a student could put in a Markdown cell.
ATTACKS = [
    "[inline](javascript:alert(1))",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgyKTwvc2NyaXB0Pg==)",
    "An autolink: <javascript:alert(3)>",
    "[reference][evil]\n\n[evil]: javascript:alert(4)",
    "![image](javascript:alert(5)) ![svg](data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=)",
    "[entity](jav&#x61;script:alert(6)) <a href='jav&#x61;script:alert(7)'>e</a> "
    "<a href='&#106;avascript:alert(8)'>e</a>",
    "<a href='JaVaScRiPt:alert(9)'>caps</a> <a href=' javascript:alert(10)'>space</a> "
    "<a href='java\tscript:alert(11)'>tab</a> [vb](vbscript:msgbox(12))",
    "<script>alert(13)</script>",
    "<img src=x onerror=alert(14)> <div onmouseover='alert(15)'>hover</div> <body onload=alert(16)>",
    "<iframe src='javascript:alert(17)'></iframe> "
    "<form action='javascript:alert(18)'><button formaction='javascript:alert(19)'>go</button></form>",
    "<svg><a xlink:href='javascript:alert(20)'><text>svg</text></a><script>alert(21)</script></svg> "
    "<math><a href='javascript:alert(22)'>math</a></math>",
    "<style>body{display:none}</style> <object data='data:text/html,alert(23)'></object> "
    "<meta http-equiv='refresh' content='0;url=javascript:alert(24)'> <base href='javascript:alert(25)/'>",
    "[relative](notes.html) [up](../../gradebook.db) ![local](plot.png)",
    "```\ncode with a blank line\n\n[after the blank line](javascript:alert(26))\n```",
    "`[in a code span](javascript:alert(27))`",
    "<noscript><p title=\"</noscript><img src=x onerror=alert(28)>\"></noscript>",
    "<a href='https://example.org/ok' onclick='alert(29)' style='color:red'>a good link with a handler</a>",
]
# Each way of making the page fetch a student-chosen address when it is opened (a tracking beacon).
BEACONS = [
    "![beacon](https://beacon.example/md.png) ![ref][b]\n\n[b]: http://beacon.example/ref.png",
    "<img src='https://beacon.example/img.png'> <IMG SRC=//beacon.example/proto.png>",
    "<img src='data:image/png;base64,iVBO' srcset='https://beacon.example/set.png 2x'>",
    "<div style=\"background:url('https://beacon.example/css.png')\">css</div>",
    "<style>@import 'https://beacon.example/import.css'; p { background: url(https://beacon.example/s.png) }</style>",
    "<link rel=stylesheet href='https://beacon.example/link.css'> <iframe src='https://beacon.example/frame'></iframe>",
    "<svg><image href='https://beacon.example/svg.png'/><use xlink:href='https://beacon.example/u.svg#a'/></svg>",
    "<video poster='https://beacon.example/poster.png' src='https://beacon.example/v.mp4'></video> "
    "<audio src='https://beacon.example/a.mp3'></audio> <object data='https://beacon.example/o'></object>",
    "<table background='https://beacon.example/bg.png'><tr><td>t</td></tr></table>",
]

HONEST = """## Results

See [the docs](https://example.org/docs), write to [the TAs](mailto:ta@example.org),
or go back to [the results](#Results).

- the loss falls as $x^2$ does
- inline code shows `<b>bold?</b>` as written

```python
for step in range(3):
    print(step)
```

![a plot](https://example.org/plot.png)
"""

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
URL_ATTRIBUTES = ("href", "src", "action", "formaction", "xlink:href", "data", "poster", "background")
# Elements that run, load or restyle something: a student's page may have only those the template writes.
ACTIVE_ELEMENTS = ("script", "style", "iframe", "frame", "object", "embed", "form", "button", "svg", "math",
                   "link", "meta", "base", "noscript")
SAFE_URL = re.compile(r"(https?:|mailto:|#)", re.I)
OUTPUT_IMAGE = re.compile(r"data:image/(png|jpeg);base64,[A-Za-z0-9+/=]*$")


def feedback_page(nb) -> BeautifulSoup:
    """The page nbgrader's generate_feedback writes of a graded notebook (see the module's docstring)."""
    config = PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()
    app = GenerateFeedback(config=config)
    exporter = app.exporter_class(parent=app, config=app.config)
    for preprocessor in app.preprocessors:
        if preprocessor != "nbgrader.preprocessors.GetGrades":
            exporter.register_preprocessor(preprocessor)
    page, _ = exporter.from_notebook_node(nb, resources={"nbgrader": dict(GRADES)})
    return BeautifulSoup(page, "html.parser")


def students_notebook():
    answer = new_markdown_cell("My answer: [see](javascript:alert(40)) <script>alert(41)</script>")
    answer.metadata["nbgrader"] = {"grade": True, "solution": True, "grade_id": "answer", "points": 2,
                                   "score": 1.0, "schema_version": 3,
                                   "comment": "Good. [Read](https://example.org/c) [not this](javascript:alert(42))"}
    code = new_code_cell("show()", outputs=[
        new_output("execute_result", execution_count=1, data={
            "text/plain": "<script>alert(43)</script><b>plain</b>",
            "text/html": "<script>alert(44)</script>",
            "text/markdown": "[md](javascript:alert(45))",
            "image/svg+xml": "<svg onload='alert(46)'></svg>",
            "application/javascript": "alert(47)"}),
        new_output("display_data", data={"image/png": "iVBORw0KGgo=\" onerror=\"alert(48)"},
                   metadata={"image/png": {"width": "1 onerror=alert(49)", "alt": "\" onload=\"alert(50)"}}),
        new_output("display_data", data={"image/png": PIXEL, "text/plain": "<Figure>"},
                   metadata={"image/png": {"width": 300, "height": 200}}),
        new_output("stream", name="stdout", text="<img src=x onerror=alert(51)>\n"),
        new_output("error", ename="<script>alert(52)</script>", evalue="<b>err</b>", traceback=["<i>tb</i>"]),
    ])
    raw_html = new_raw_cell("<script>alert(53)</script><a href='javascript:alert(54)'>raw</a>")
    raw_html.metadata["raw_mimetype"] = "text/html"
    raw_plain = new_raw_cell("<img src=x onerror=alert(55)><a href='data:text/html,x'>raw2</a>")
    cells = [new_markdown_cell(HONEST), *(new_markdown_cell(a) for a in ATTACKS + BEACONS), answer, code, raw_html,
             raw_plain]
    return new_notebook(cells=cells, metadata=PYTHON)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The page of the student's notebook (as the pipeline reads it from disk), and of a notebook with nothing
    of a student's: what the template writes itself."""
    path = tmp_path_factory.mktemp("autograded") / "lesson.ipynb"
    nbformat.write(students_notebook(), path)
    return feedback_page(nbformat.read(path, as_version=4)), feedback_page(new_notebook(metadata=PYTHON))


def _urls(page):
    return [(tag.name, name, value) for tag in page.find_all(True) for name, value in tag.attrs.items()
            if name.lower() in URL_ATTRIBUTES]


def test_every_link_from_a_student_is_http_https_mailto_or_an_anchor(pages):
    page, template = pages
    ours = set(_urls(template))
    unsafe = [(tag, name, value) for tag, name, value in _urls(page) if (tag, name, value) not in ours
              and not SAFE_URL.match(value) and not (tag == "img" and OUTPUT_IMAGE.match(value))]
    assert not unsafe


def test_no_script_no_event_handler_no_active_element_from_a_student(pages):
    page, template = pages
    for name in ACTIVE_ELEMENTS:
        assert [str(t) for t in page.find_all(name)] == [str(t) for t in template.find_all(name)], name
    handlers = [(tag.name, attr) for tag in page.find_all(True) for attr in tag.attrs if attr.lower().startswith("on")]
    assert not handlers
    assert not [tag for tag in page.find_all(True) if "style" in tag.attrs]


def test_honest_markdown_still_reads(pages):
    page, _ = pages
    links = {a.get("href"): a.get_text() for a in page.find_all("a")}
    assert links.get("https://example.org/docs") == "the docs"
    assert links.get("mailto:ta@example.org") == "the TAs"
    assert links.get("#Results") == "the results"
    assert page.find("h2", id="Results") and "Results" in page.find("h2", id="Results").get_text()
    assert page.find("img", alt="a plot"), "a remote image keeps its alt text (its address is gone: BEACONS)"
    assert any("for step in range(3):" in pre.get_text() for pre in page.find_all("pre"))
    code = next(c for c in page.find_all("code") if "bold?" in c.get_text())
    assert code.get_text() == "<b>bold?</b>" and not code.find("b"), "inline code shows its HTML as text"
    assert "$x^2$" in page.get_text(), "math stays for MathJax"
    assert any("the loss falls as" in li.get_text() for li in page.find_all("li"))
    assert page.find("img", src=f"data:image/png;base64,{PIXEL}", width="300", height="200"), "a plot stays"


def test_what_a_student_wrote_as_html_shows_as_text(pages):
    page, _ = pages
    text = page.get_text()
    assert "<script>alert(13)</script>" in text, "a disallowed tag is shown, not run"
    assert "<script>alert(43)</script><b>plain</b>" in text, "text/plain is escaped"
    assert "<img src=x onerror=alert(51)>" in text and "<i>tb</i>" in text
    assert any("[after the blank line](javascript:alert(26))" in pre.get_text() for pre in page.find_all("pre")), \
        "a code block stays text, after a blank line too"


def test_grading_remarks_stay(pages):
    page, _ = pages
    assert "My answer:" in page.get_text() and "Student's answer" in page.get_text()
    assert page.find("a", href="https://example.org/c"), "a grader's comment keeps its links"
    assert "A test in this cell" not in page.get_text(), "no hidden tests here: nothing redacted"


def test_redact_keeps_its_cells_and_messages():
    """The hidden-test redaction runs before the sanitizer and says what it said before."""
    from graders import redact

    cell = new_code_cell("x = 1\n### BEGIN HIDDEN TESTS\nassert x == 1\n### END HIDDEN TESTS",
                         outputs=[new_output("stream", name="stdout", text="SECRET\n")])
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "points": 1, "score": 1.0, "solution": False,
                                 "locked": True, "schema_version": 3}
    page = feedback_page(new_notebook(cells=[cell], metadata=PYTHON))
    assert "SECRET" not in str(page) and "assert x == 1" not in page.get_text()
    assert f"The tests in this cell passed. {redact.NOTICE}" in page.get_text()


def test_a_missing_attachment_shows_the_cell_as_text():
    """nbconvert refuses to render an image of an attachment the cell lacks; the feedback shows the text."""
    cell = new_markdown_cell("![gone](attachment:gone.png) [x](javascript:alert(60))")
    page = feedback_page(new_notebook(cells=[cell], metadata=PYTHON))
    assert "![gone](attachment:gone.png)" in page.get_text()
    assert not [u for u in _urls(page) if "javascript" in u[2].lower()]



def _failed_check(source: str, ename: str, evalue: str):
    cell = new_code_cell(source + "\n### BEGIN HIDDEN TESTS\nassert secret_case == 1\n### END HIDDEN TESTS",
                         outputs=[new_output("error", ename=ename, evalue=evalue, traceback=[evalue])])
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "ex_tests", "points": 2, "score": 0.0, "solution": False,
                                 "locked": True, "schema_version": 3}
    return feedback_page(new_notebook(cells=[cell], metadata=PYTHON)).get_text()


def test_a_failed_visible_check_shows_its_message_as_the_source_writes_it_and_nothing_the_kernel_chose():
    """The visible check's message, placeholders elided (they could carry what a student's code captured of a hidden
    test); a built-in exception's name; the unsolved stub's words. A kernel's own text, or a made-up class, never."""
    from graders.words import ENGLISH

    shown = " ".join(_failed_check('assert got == 3, "answer all five questions"', "AssertionError",
                                   "answer all five questions").split())
    assert "the cell stopped with AssertionError: answer all five questions" in shown, shown
    shown = " ".join(_failed_check('assert got == 3, f"split_sizes(10, 4) returned {got}, not {want}"',
                                   "AssertionError", "split_sizes(10, 4) returned SECRET-42, not [3]").split())
    assert "AssertionError: split_sizes(10, 4) returned …, not …" in shown and "SECRET" not in shown, shown
    shown = " ".join(_failed_check("check(got)", "NotImplementedError", ENGLISH["unsolved"]).split())
    assert f"NotImplementedError: {ENGLISH['unsolved']}" in shown, shown
    shown = " ".join(_failed_check('assert got == 3, "a message"', "AssertionError", "SECRET kernel text").split())
    assert "stopped with AssertionError. " in shown + " " and "SECRET" not in shown, shown
    shown = " ".join(_failed_check('assert got == 3, "a message"', "Leak_SECRET", "a message").split())
    assert "run it to see the visible checks' message" in shown and "SECRET" not in shown, shown


def test_printed_lines_wrap_on_the_page():
    from graders import redact

    page = redact.finished("<html><head><title>x</title></head><body><pre>long</pre></body></html>", "en")
    assert "white-space: pre-wrap" in page and page.index("pre-wrap") < page.index("</head>")


def test_the_page_loads_nothing_remote(pages):
    """No element, attribute or style a student wrote makes the page fetch an address, nor does the template (its
    MathJax scripts are taken out); and the page's policy forbids every fetch, whatever a sanitizer missed."""
    from graders import redact

    page, template = pages
    assert _loaded(template), "the template itself loads MathJax: the test would not see it go"
    finished = BeautifulSoup(redact.finished(str(page), "en"), "html.parser")
    assert not _loaded(finished)
    assert not finished.find_all("script", src=True)
    policy = finished.head.find("meta", attrs={"http-equiv": "Content-Security-Policy"})
    assert policy is not None and finished.head.find(True) is policy, "the policy comes first in the head"
    rules = dict((r.split()[0], r.split()[1:]) for r in policy["content"].split(";") if r.strip())
    assert rules["default-src"] == ["'none'"] and rules["img-src"] == ["data:"]
    assert not [s for rule in rules.values() for s in rule if s.startswith(("http", "//", "*")) or s == "https:"]


def _loaded(page) -> set:
    """Every address the page would fetch on opening (links, which load only when clicked, aside)."""
    found = {value for tag in page.find_all(True) for name, value in tag.attrs.items()
             if name.lower() in ("src", "srcset", "poster", "data", "background", "xlink:href")
             or (name.lower() == "href" and tag.name not in ("a",))}
    styles = [tag.get_text() for tag in page.find_all("style")] + [tag["style"] for tag in page.find_all(style=True)]
    for css in styles:
        found |= set(re.findall(r"url\(\s*['\"]?([^'\")]+)", css)) | set(re.findall(r"@import\s+['\"]([^'\"]+)", css))
    return {str(value) for value in found if "://" in str(value) or str(value).startswith("//")}


def test_an_attachment_image_stays_and_a_remote_one_loses_its_address():
    from graders import redact

    attachment = new_markdown_cell("![inline](attachment:p.png) ![far](https://beacon.example/far.png)",
                                   attachments={"p.png": {"image/png": PIXEL}})
    html = redact.markdown_as_safe_html(attachment.source, attachment.attachments)
    assert f'src="data:image/png;base64,{PIXEL}"' in html and "beacon.example" not in html and 'alt="far"' in html


def test_a_page_without_a_head_is_refused_by_name():
    from graders import redact

    with pytest.raises(ValueError, match="page"):
        redact.finished("<html><body>x</body></html>", "en")
