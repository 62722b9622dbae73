"""Feedback that carries nothing of the hidden tests and runs nothing a student wrote.

* A cell with hidden tests keeps its visible code, but none of its outputs: anything it printed (a
  student's hook can print every cell's source), its error's class and message, are replaced by one
  line naming the exercise and its points and saying whether its tests passed (and, when the judge's
  message carries no data, which property failed).
* Outputs that a browser would run or render as markup (HTML, JavaScript, SVG, Markdown, LaTeX) are
  replaced by their plain-text form, which the page escapes; PNG and JPEG images stay if their data is
  base64 and their sizes numbers.
* Markdown cells, raw cells and graders' comments become HTML cleaned by bleach against an allow-list:
  plain text markup only (headings, paragraphs, lists, code, tables, links, images), links to http, https,
  mailto or an anchor in the page, images only from the notebook itself (a base64 PNG, JPEG or GIF: an
  attachment); any other tag is shown as text, any other attribute dropped. An image from anywhere else keeps
  its alt text but loses its address: opening the page fetches nothing a student chose (a tracking beacon).
  Math stays as text for the page's MathJax (loaded with its Safe extension).
* The page carries a Content-Security-Policy that lets it load nothing from anywhere but the template's own
  MathJax: no image, style, font, frame or connection from elsewhere, whatever a sanitizer missed.
"""

import ast
import builtins
import functools
import html
import json
import os
import re

import bleach
from nbconvert.filters.markdown_mistune import InvalidNotebook, IPythonRenderer, MarkdownWithMath
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor

from graders import judge
from graders.words import ENGLISH, FRAME, JUDGE, shows_no_data
from i18n.catalog import LANGUAGES, words

NOTICE = ENGLISH["notice"]
# The page fetches nothing: not a student's address, nor the template's MathJax (no lesson writes maths; the
# template's script tags for it are taken out, so nothing is even attempted).
POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; font-src data:; "
          "img-src data:; base-uri 'none'; form-action 'none'")
REMOTE_SCRIPT = re.compile(r"<script\b[^>]*\bsrc\s*=[^>]*>\s*</script>", re.I)
CSP = f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
# Printed lines (a verdict among them) wrap at the page's width instead of making it scroll sideways.
WRAP_CSS = "<style>.output_stream pre, .output_error pre { white-space: pre-wrap; overflow-wrap: anywhere; }</style>"
SAFE_DATA = ("text/plain", "image/png", "image/jpeg")
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
SAFE_TAGS = {
    *HEADINGS, "p", "br", "hr", "div", "span", "em", "strong", "b", "i", "del", "s", "sub", "sup", "kbd",
    "code", "pre", "blockquote", "ul", "ol", "li", "dl", "dt", "dd", "input",
    "table", "thead", "tbody", "tr", "th", "td", "a", "img",
}
SAFE_ATTRIBUTES = {
    **{heading: ("id",) for heading in HEADINGS},  # the targets of the headings' anchor links
    "a": ("href", "title", "class"),
    "img": ("src", "alt", "title", "width", "height"),
    "ol": ("start",),
    "input": ("type", "checked", "disabled", "class"),  # a task list's checkboxes
    **{tag: ("class",) for tag in ("div", "span", "pre", "code", "li")},  # code highlighting, task lists
}
# Matched from the value's first character on: a browser ignores leading spaces and control characters, and
# tabs and line breaks anywhere, so a scheme spelt with any of those is refused, not parsed.
SAFE_VALUES = {
    ("a", "href"): re.compile(r"(https?:|mailto:|#)", re.I),
    ("img", "src"): re.compile(r"data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*$", re.I),
    ("input", "type"): re.compile(r"checkbox$", re.I),
}


def edition(nb) -> str:
    """The submission's language: the edition its notebook says it is (i18n.catalog.LANGUAGES), else English."""
    lang = nb.get("metadata", {}).get("course_edition")
    return lang if isinstance(lang, str) and lang in LANGUAGES else "en"


def finished(page: str, lang: str) -> str:
    """A rendered feedback page as the student gets it: in `lang`, its printed lines wrapped, and a policy that
    lets it load nothing remote (first in the head: it governs only what follows it)."""
    page = REMOTE_SCRIPT.sub("", in_language(page, lang)).replace("</head>", WRAP_CSS + "\n</head>", 1)
    head = re.search(r"<head\b[^>]*>", page, re.I)
    if head is None:
        raise ValueError("page has no <head>: the feedback page's security policy has nowhere to go")
    return page[:head.end()] + "\n" + CSP + page[head.end():]


def in_language(page: str, lang: str) -> str:
    """A rendered feedback page with the phrases of nbgrader's template (words.FRAME) in `lang`."""
    if lang == "en":
        return page
    said = words(lang)
    for key in FRAME:
        page = page.replace(ENGLISH[key], said[key])
    return page


class RedactHiddenTests(ClearHiddenTests):
    def preprocess(self, nb, resources):
        self.lang = edition(nb)
        self.said = words(self.lang)
        self.lesson = lesson_of(nb, resources)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, cell_index):
        had_hidden = self.begin_test_delimeter in cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if had_hidden:
            said = getattr(self, "said", ENGLISH)
            cell.source = cell.source.rstrip() + f"\n# {said[_notice(cell)]}"
            line = verdict_line(cell, said, getattr(self, "lesson", None), getattr(self, "lang", "en"))
            cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=line + "\n")]
        return cell, resources


def lesson_of(nb, resources: dict) -> str | None:
    """Which lesson a submission is: the assignment nbgrader renders (the grader's name for it), else the lesson
    whose first cell the notebook has."""
    from i18n.catalog import LESSONS, lesson_of as by_first_cell

    named = (resources or {}).get("nbgrader", {}).get("assignment")
    return named if named in LESSONS else by_first_cell(nb)


@functools.lru_cache(maxsize=None)
def lesson_words(lesson: str, lang: str) -> dict:
    """What the lesson's source says of its graded cells in `lang` (its catalog: i18n/<lang>/<lesson>.po): "names",
    grade id -> the heading the lesson puts before the cell ("Exercise 3 — ...", its points left to the label);
    "messages", grade id -> (English, translation) of each message its hidden tests' judge may show (both
    literals as the source writes them; i18n.catalog.judge_texts)."""
    from i18n import catalog

    source = catalog.source_notebook(lesson)
    shown = source if lang == "en" else catalog.translate(source, lang, lesson, strict=False)
    names, heading = {}, None
    for cell in shown.cells:
        if cell.cell_type == "markdown":
            heading = ([*re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", cell.source, re.M)] or [heading])[-1]
        elif cell.metadata.get("nbgrader", {}).get("grade") and heading:
            names[cell.metadata["nbgrader"]["grade_id"]] = re.sub(r"\s*\(\s*\d[^()]*\)$", "", heading)
    grade_ids = {cell.get("id"): cell.metadata.get("nbgrader", {}).get("grade_id") for cell in source.cells}
    said = catalog.read(lang, lesson)
    messages = {}
    for cell_id, english in catalog.judge_texts(source):
        found = said.get(english, context=cell_id)
        if lang == "en":
            translated = english
        elif found and found.string and "fuzzy" not in found.flags and not catalog.literal_problem(english, found.string):
            translated = found.string
        else:
            continue  # not translated (yet): such a message is not shown (verdict_line)
        messages.setdefault(grade_ids[cell_id], []).append((english, translated))
    return {"names": names, "messages": messages}


def said_in(message: str, templates: list) -> str | None:
    """`message`, said by one of the (English, translation) literals of `templates` (the most specific that writes it:
    plain literals, then the most fixed text; its placeholders' values carried over, each said in the translation's
    words where a template writes it, as `f"step {i}: {why}"` carries a `why` of its own), in the translation's words;
    None if none writes it."""
    def specificity(pair):
        parts = _parts(pair[0])
        return any(field for _, field in parts), -sum(len(text) for text, _ in parts)

    for english, translated in sorted(templates, key=specificity):
        parts, said = _parts(english), _parts(translated)
        if not any(text for text, _ in parts):
            continue  # placeholders only: it writes anything, and says nothing
        pattern = "".join("(.*?)" if field else re.escape(text) for text, field in parts)
        if (match := re.fullmatch(pattern, message, re.S)) is not None:
            values = dict(zip([field for _, field in parts if field], match.groups()))
            values = {field: value and (said_in(value, templates) or value) for field, value in values.items()}
            return "".join(values[field] if field else text for text, field in said)
    return None


def _parts(literal: str) -> list[tuple[str, str | None]]:
    """A string literal's (text, None) parts and (, placeholder) parts (the placeholder's code, as ast.dump)."""
    node = ast.parse(f"(\n{literal}\n)", mode="eval").body
    if isinstance(node, ast.Constant):
        return [(node.value, None)]
    return [(v.value, None) if isinstance(v, ast.Constant) else ("", ast.dump(v)) for v in node.values]


def verdict_line(cell, said: dict = ENGLISH, lesson: str | None = None, lang: str = "en") -> str:
    """One line for a graded cell: the exercise as the lesson names it, its points, passed or failed, and, when the
    judge said which property failed in words that carry no data (no digits, quotes or brackets: never a hidden
    input or an expected value), that property, in `lang` (said: words(lang)); in another language than English,
    only a message the lesson's catalog translates (else that the hidden tests found a problem)."""
    meta = cell.metadata.get("nbgrader", {})
    grade_id = meta.get("grade_id")
    known = lesson_words(lesson, lang) if lesson else {"names": {}, "messages": {}}
    exercise = known["names"].get(grade_id) or (str(grade_id).removesuffix("_tests") if grade_id else said["this_exercise"])
    points = meta.get("points", 0)
    label = exercise
    if isinstance(points, (int, float)):
        label = said["points" if points != 1 else "one_point"].format(exercise=exercise, points=points)
    judged = _verdicts().get(meta.get("grade_id"), {"passed": True})
    errored = judge.shows_error(cell)
    if not errored and judged["passed"]:
        return said["passed"].format(label=label) + " " + said["notice"]
    if errored:
        shown = visible_error(cell, said)
        why = said["errored_with"].format(error=shown) if shown else said["errored"]
    else:
        message = str(judged.get("message", ""))
        words_of_judge = [(repr(ENGLISH[key]), repr(said[key])) for key in JUDGE]
        shown = said_in(message, words_of_judge + known["messages"].get(grade_id, [])) if shows_no_data(message) else None
        shown = message if shown is None and lang == "en" and shows_no_data(message) else shown
        why = said["found"].format(message=shown) if shown else said["problem"]
    why += "" if why.rstrip().endswith((".", "?", "!")) else "."  # the notice after it is a sentence of its own
    return said["failed"].format(label=label, why=why) + " " + said[_notice(cell)]


def _notice(cell) -> str:
    """What the page says of a graded cell's hidden tests: they ran, or (its visible checks failed: the cell shows an
    error) they did not run (graders/hidden_runs.py)."""
    return "not_run" if judge.shows_error(cell) else "notice"


def visible_error(cell, said: dict = ENGLISH) -> str:
    """What the cell's error says, where nothing in it can be the student code's choice: a built-in exception's
    name, and the message of the visible check (or of the unsolved stub) that raised it as the source writes it,
    its placeholders shown as "…". Anything else a kernel reports (it may carry a hidden test) is left out."""
    error = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
    ename = str((error or {}).get("ename", ""))
    if not isinstance(getattr(builtins, ename, None), type) or not issubclass(getattr(builtins, ename), BaseException):
        return ""
    evalue = str(error.get("evalue", ""))
    for message in [*_check_messages(cell.source), [said["unsolved"]], [ENGLISH["unsolved"]]]:
        if re.fullmatch("".join(".*?" if part is None else re.escape(part) for part in message), evalue, re.S):
            return f"{ename}: " + "".join("…" if part is None else part for part in message)
    return ename


def _check_messages(source: str) -> list[list]:
    """The messages of the visible asserts in `source`: their constant parts, None for each placeholder."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    messages = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and isinstance(node.msg, ast.Constant) and isinstance(node.msg.value, str):
            messages.append([node.msg.value])
        elif isinstance(node, ast.Assert) and isinstance(node.msg, ast.JoinedStr):
            messages.append([v.value if isinstance(v, ast.Constant) else None for v in node.msg.values])
    return messages


def _verdicts() -> dict:
    """The judge's verdicts per grade cell (graders/judge.py), from the file GRADER_VERDICTS_FILE names (the
    recorder writes it for each feedback page)."""
    path = os.environ.get("GRADER_VERDICTS_FILE")
    if not path:
        return {}
    with open(path) as f:
        return json.load(f).get("cells", {})


class SanitizeOutputs(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "markdown":
            cell.source = markdown_as_safe_html(cell.source, cell.get("attachments", {}))
        elif cell.cell_type == "raw":  # the page shows raw cells as HTML
            cell.source = safe_html(cell.source)
        grading = cell.metadata.get("nbgrader", {})
        if isinstance(grading.get("comment"), str):
            grading["comment"] = markdown_as_safe_html(grading["comment"], {})
        for output in cell.get("outputs", []):
            if "data" in output:
                output["data"] = {kind: value for kind, value in output["data"].items() if is_safe_data(kind, value)}
                output["metadata"] = image_sizes(output.get("metadata", {}))
        return cell, resources


def is_safe_data(kind: str, value) -> bool:
    """Plain text (the page escapes it), or an image whose data is base64 and nothing more (the page writes it
    into an attribute)."""
    return kind == "text/plain" or (kind in SAFE_DATA and isinstance(value, str) and bool(BASE64.fullmatch(value)))


def image_sizes(metadata: dict) -> dict:
    """An output's metadata, less all but the numbers that size its images: the page writes a size without
    quotes (a width of "1 onerror=..." would add an attribute), and nothing else there is needed."""
    kept = _sizes(metadata)
    for kind in SAFE_DATA:
        if isinstance(metadata.get(kind), dict):
            kept[kind] = _sizes(metadata[kind])
    return kept


def _sizes(entry: dict) -> dict:
    return {key: value for key, value in entry.items()
            if key in ("width", "height") and isinstance(value, (int, float)) and not isinstance(value, bool)}


def markdown_as_safe_html(source: str, attachments: dict) -> str:
    """Markdown rendered to allow-listed HTML, written so that rendering it as Markdown again (the page's
    template does) gives it back unchanged."""
    try:
        rendered = _markdown_to_html(source, attachments)
    except InvalidNotebook:  # an image of an attachment the cell lacks
        rendered = f"<pre>{html.escape(source)}</pre>"
    # One HTML block: Markdown passes it through verbatim up to a blank line, so the block has no line
    # breaks at all (the character reference is the same line break to the browser, in a <pre> too).
    block = "<div>" + safe_html(rendered).replace("\n", "&#10;") + "</div>"
    if _markdown_to_html(block, {}).strip() != block:  # no feedback rather than HTML made of sanitized HTML
        raise ValueError("Markdown no longer passes sanitized HTML through unchanged")
    return block


def _markdown_to_html(source: str, attachments: dict) -> str:
    """The HTML nbconvert's HTML exporter makes of Markdown (its markdown2html filter)."""
    return MarkdownWithMath(renderer=IPythonRenderer(escape=False, attachments=attachments)).render(source)


def safe_html(text: str) -> str:
    """The allow-listed part of HTML: other tags shown as text, other attributes and comments dropped."""
    return bleach.clean(text, tags=SAFE_TAGS, attributes=_is_safe_attribute,
                        protocols={"http", "https", "mailto", "data"})  # data: for images only (SAFE_VALUES)


def _is_safe_attribute(tag: str, name: str, value: str) -> bool:
    rule = SAFE_VALUES.get((tag, name))
    if rule is not None:
        return bool(rule.match(value))
    return name in SAFE_ATTRIBUTES.get(tag, ())
