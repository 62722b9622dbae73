"""A feedback page speaks the submission's language (graders/redact.py): it names each exercise as the lesson does
("Exercise 3 — ..." / "Alıştırma 3 — ..."), and every verdict it can show (the hidden tests' judge messages, the
judge's own words) comes from the catalogs, so a Turkish page, for a right and for a wrong submission of every
lesson, shows no English sentence of the lesson's English catalog or of the feedback words."""

import ast
import json
import os
import re
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbgrader.converters import GenerateFeedback
from traitlets.config.loader import PyFileConfigLoader

from graders import judge, redact
from graders.words import ENGLISH, JUDGE, shows_no_data
from i18n import catalog

CONFIG = Path(__file__).resolve().parent.parent / "graders" / "nbgrader_config.py"
EDITIONS = sorted(catalog.LANGUAGES)


def _text(literal: str) -> str:
    """What a message literal says, its placeholders as "…"."""
    node = ast.parse(f"(\n{literal}\n)", mode="eval").body
    if isinstance(node, ast.Constant):
        return node.value
    return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)


def _example(literal: str, value: str = "VALUE") -> str:
    """The message a literal makes with every placeholder's value `value`."""
    node = ast.parse(f"(\n{literal}\n)", mode="eval").body
    if isinstance(node, ast.Constant):
        return node.value
    return "".join(v.value if isinstance(v, ast.Constant) else value for v in node.values)


def _graded_cells(lesson: str) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in catalog.source_notebook(lesson).cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]


@pytest.mark.parametrize("lang", EDITIONS)
@pytest.mark.parametrize("lesson", catalog.LESSONS)
def test_every_message_the_feedback_page_can_show_has_a_translation(lesson, lang):
    """Every judge message whose words carry no data (what verdict_line may show), and the judge's own words, are
    translated; each graded cell has the lesson's name for it, in the edition's words."""
    said = redact.lesson_words(lesson, lang)
    english = redact.lesson_words(lesson, "en")
    judged = catalog.judge_texts(catalog.source_notebook(lesson))
    assert judged, "the hidden tests' messages are extracted"
    translated = {(english_, grade_id) for grade_id, pairs in said["messages"].items() for english_, _ in pairs}
    grade_ids = {c.get("id"): c.metadata.get("nbgrader", {}).get("grade_id") for c in catalog.source_notebook(lesson).cells}
    missing = [(cell_id, text) for cell_id, text in judged if (text, grade_ids[cell_id]) not in translated]
    assert not missing, f"{lesson}: judge messages without a current {lang} translation: {missing}"
    words = redact.words(lang)
    assert all(words[key] != ENGLISH[key] for key in JUDGE)
    for grade_id in _graded_cells(lesson):
        assert english["names"][grade_id].startswith(("Exercise ", "Quick check")) or \
            re.match(r"\d+\. Quick check", english["names"][grade_id]), english["names"][grade_id]
        assert said["names"][grade_id] != english["names"][grade_id] and not re.search(r"\(\d", said["names"][grade_id])


@pytest.mark.parametrize("lang", EDITIONS)
@pytest.mark.parametrize("lesson", catalog.LESSONS)
def test_each_judge_message_is_said_in_the_submissions_language(lesson, lang, tmp_path, monkeypatch):
    """verdict_line of a failed cell, for each message its judge can give (placeholders filled with a word), says
    the translation with the value carried over; a message no catalog has is not shown, and English is never."""
    monkeypatch.setenv("GRADER_VERDICTS_FILE", str(tmp_path / "verdicts.json"))
    words = redact.words(lang)
    grade_ids = {c.get("id"): c.metadata.get("nbgrader", {}).get("grade_id") for c in catalog.source_notebook(lesson).cells}
    translations = {(c, e): t for c, pairs in redact.lesson_words(lesson, lang)["messages"].items() for e, t in pairs}
    cases = [(grade_ids[c], _example(e), _example(translations[grade_ids[c], e])) for c, e in
             catalog.judge_texts(catalog.source_notebook(lesson))]
    cases += [(grade_id, ENGLISH[key], words[key] if shows_no_data(ENGLISH[key]) else None)
              for key in JUDGE for grade_id in _graded_cells(lesson)[:1]]
    cases += [(_graded_cells(lesson)[0], "an English message no catalog has", None)]
    for grade_id, message, expected in cases:
        cell = nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade": True, "grade_id": grade_id, "points": 2}})
        (tmp_path / "verdicts.json").write_text(json.dumps({"cells": {grade_id: {"passed": False, "message": message}}}))
        line = redact.verdict_line(cell, words, lesson, lang)
        name = redact.lesson_words(lesson, lang)["names"][grade_id]
        assert line.startswith(f"✗ {name} ("), line
        if expected is None:
            assert words["problem"] in line and message not in line, line
            continue
        assert words["found"].format(message=expected) in line, (message, line)
        assert message not in line or message == expected, line


def test_the_most_specific_template_says_a_message_and_a_carried_message_is_said_too():
    """A message two templates write (`f"step {i}: {why}"` writes every step's message) is said by the one with the
    most fixed text; a placeholder's value that another template writes is said in the translation's words as well;
    a template of placeholders alone says nothing."""
    templates = [('f"step {i}: {why}"', 'f"adım {i}: {why}"'),
                 ('f"{anything}"', 'f"{anything}!"'),
                 ('f"step {i}: return the loss as a float, not {kind}"', 'f"adım {i}: kaybı {kind} değil, float döndürün"'),
                 ('"the scale did not grow"', '"ölçek büyümedi"')]
    assert redact.said_in("step 3: return the loss as a float, not int", templates) == "adım 3: kaybı int değil, float döndürün"
    assert redact.said_in("step 3: the scale did not grow", templates) == "adım 3: ölçek büyümedi"
    assert redact.said_in("step 3: something else", templates) == "adım 3: something else"
    assert redact.said_in("nothing writes this", templates) is None


def _english_sentences(lesson: str, lang: str) -> set[str]:
    """The sentences (and clauses) of three words or more of the lesson's English catalog and of the feedback words
    whose message the edition translates, less those its translations say as well (code kept as written)."""
    translations = {**{(m.context, m.id): m.string for m in catalog.read(lang, lesson) if m.string and "fuzzy" not in m.flags}}
    kept = " ".join(translations.values()) + " " + " ".join(redact.words(lang).values())
    texts = [(_text(e) if catalog._is_code(e) else e) for c, e in catalog.units(lesson) if (c, e) in translations]
    texts += [ENGLISH[key] for key in ENGLISH if not key.startswith("frame_")]
    found = set()
    for text in texts:
        text = re.sub(r"```.*?```|`[^`]*`|\{[^{}]*\}|…", " ", text, flags=re.S)
        for part in re.split(r"[.:;?!()\n]|\s[—–-]\s", text):
            part = " ".join(part.split())
            if len(re.findall(r"[A-Za-z]{3,}", part)) >= 3 and part not in kept:
                found.add(part)
    return found


def _page(nb, lesson: str, verdicts: dict, tmp_path, monkeypatch) -> str:
    """The feedback page nbgrader's generate_feedback writes of graded notebook `nb` (as tests/test_feedback_sanitize.py
    makes it: GetGrades's resources given), finished as the recorder finishes it (graders/record.py)."""
    (tmp_path / "verdicts.json").write_text(json.dumps({"cells": verdicts}))
    monkeypatch.setenv("GRADER_VERDICTS_FILE", str(tmp_path / "verdicts.json"))
    config = PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()
    app = GenerateFeedback(config=config)
    exporter = app.exporter_class(parent=app, config=app.config)
    for preprocessor in app.preprocessors:
        if preprocessor != "nbgrader.preprocessors.GetGrades":
            exporter.register_preprocessor(preprocessor)
    for cell in nb.cells:  # what GetGrades adds from the gradebook
        meta = cell.metadata.get("nbgrader", {})
        if "points" in meta:
            meta["score"] = meta["points"] if verdicts.get(meta.get("grade_id"), {}).get("passed") else 0
    grades = {"notebook": lesson, "assignment": lesson, "score": 1.0, "max_score": 2.0, "late_penalty": 0}
    page, _ = exporter.from_notebook_node(nb, resources={"nbgrader": grades})
    return redact.finished(page, redact.edition(nb))


def _graded(lesson: str, lang: str):
    """The edition's solution as the grader keeps it: hidden tests without their judge part, the edition's stub
    in the first exercise (it stopped with the stub's error)."""
    nb = catalog.translate(catalog.source_notebook(lesson), lang, lesson, strict=False)  # as `make release` does
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = judge.for_kernel(cell.source)
    return nb


@pytest.mark.parametrize("lang", EDITIONS)
@pytest.mark.parametrize("lesson", catalog.LESSONS)
def test_a_feedback_page_in_another_language_shows_no_english_sentence(lesson, lang, tmp_path, monkeypatch):
    """A right and a wrong submission of the edition's notebook: the page names every exercise as the lesson does,
    in the edition's words, and shows no English sentence of the lesson's or the feedback's English (the wrong one:
    every graded cell failed, one with an error, the others with a message of their judge)."""
    first_message, said_as = {}, {}
    for grade_id, pairs in redact.lesson_words(lesson, lang)["messages"].items():
        first_message[grade_id], said_as[grade_id] = (_example(literal, "x") for literal in pairs[0])
    graded = _graded_cells(lesson)
    wrong = _graded(lesson, lang)
    errored = next(c for c in wrong.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == graded[0])
    errored.outputs = [nbformat.v4.new_output("error", ename="NotImplementedError", evalue=redact.words(lang)["unsolved"],
                                              traceback=[])]
    pages = {
        "right": _page(_graded(lesson, lang), lesson, {g: {"passed": True, "message": ""} for g in graded}, tmp_path, monkeypatch),
        "wrong": _page(wrong, lesson, {g: {"passed": False, "message": first_message.get(g, "")} for g in graded},
                       tmp_path, monkeypatch),
    }
    english = _english_sentences(lesson, lang)
    names = redact.lesson_words(lesson, lang)["names"]
    for kind, page in pages.items():
        soup = BeautifulSoup(page, "html.parser")
        for element in [*soup(["style", "script"]), *soup.select(".input_area, .jp-InputArea-editor")]:
            element.decompose()  # code is code (its messages are translated in it: i18n/catalog.py), not a sentence
        text = " ".join(soup.get_text(" ").split())
        shown = sorted(s for s in english if s in text)
        assert not shown, f"{lesson} ({kind}): English on the {lang} page: {shown[:5]}"
        mark, other = ("✓", "✗") if kind == "right" else ("✗", "✓")
        if kind == "wrong":
            for grade_id in graded[1:]:
                assert " ".join(said_as.get(grade_id, redact.words(lang)["problem"]).split()) in text, grade_id
        for grade_id in graded:
            assert f"{mark} {names[grade_id]} (" in text and f"{other} {names[grade_id]} (" not in text, \
                f"{lesson} ({kind}): {grade_id} is not named {names[grade_id]!r}"


def test_every_verdict_the_judge_writes_itself_is_in_the_feedback_words():
    """The judge's own messages (graders/judge.py, which lists above words.py and so repeats them) that a page may
    show are words.py's judge_* entries, which every edition's feedback catalog translates."""
    tree = ast.parse((Path(judge.__file__)).read_text())
    def said(value) -> set:  # a message's constant strings: itself, either branch of an if, either side of an or
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return {value.value}
        parts = [value.body, value.orelse] if isinstance(value, ast.IfExp) else getattr(value, "values", [])
        return set().union(*map(said, parts)) if isinstance(value, (ast.IfExp, ast.BoolOp)) else set()

    written = set().union(*(said(assign.value) for assign in ast.walk(tree) if isinstance(assign, ast.Assign)
                            and any(ast.unparse(target) == "verdict['message']" for target in assign.targets)))
    assert len(written) >= 4
    assert {m for m in written if shows_no_data(m)} <= {ENGLISH[key] for key in JUDGE}, written


def test_the_judge_calls_the_helpers_in_the_submissions_language(monkeypatch):
    """While the judge part runs, a helpers message (helpers/language.py) is in the graded notebook's edition; after
    it, the judge's process speaks as before."""
    from helpers import _messages, language

    monkeypatch.setattr(_messages, "CATALOGS", {**_messages.CATALOGS, "tr": {"on a hidden batch": "gizli bir yığında"}})
    monkeypatch.delenv(language.ENV, raising=False)
    for edition, said in (("tr", "gizli bir yığında"), ("en", "on a hidden batch"), ("xx", "on a hidden batch"), (None, "on a hidden batch")):
        graded = nbformat.v4.new_notebook(metadata={"course_edition": edition} if edition else {})
        with judge.speaking(graded):
            assert language.say("on a hidden batch") == said, edition
        assert language.ENV not in os.environ
