"""The Turkish edition (i18n/): every text translated and current, the same code as the English, and feedback in
the submission's language. The site in both languages is tested in tests/test_site.py, the grading of Turkish
submissions in the class (tests/test_grading.py), the Turkish text's terms, register, suffixes and glosses against
its glossary in tests/test_turkish_style.py."""

import ast
import copy
import re

import nbformat
import pytest

from graders import redact
from graders.words import ENGLISH
from i18n import catalog

REPO = catalog.REPO
LESSONS = catalog.LESSONS
EDITIONS = sorted(catalog.LANGUAGES)


@pytest.mark.parametrize("lang", EDITIONS)
def test_every_text_has_a_current_translation(lang):
    missing = [line for name in catalog.catalogs() for line in catalog.problems(lang, name)]
    assert not missing, "run `python -m i18n.catalog update` and translate:\n" + "\n".join(missing)


def test_a_changed_english_text_makes_its_translation_stale(monkeypatch):
    lesson = LESSONS[0]
    nb = copy.deepcopy(catalog.source_notebook(lesson))  # the cached one stays as it is
    markdown = next(c for c in nb.cells if c.cell_type == "markdown" and len(c.source) > 40)
    code = next(c for c in nb.cells if c.cell_type == "code" and catalog.literals(c.source))
    start, end, literal = catalog.literals(code.source)[0]
    markdown.source += " One more sentence."
    code.source = code.source[:start] + literal[:-1] + ' (changed)' + literal[-1] + code.source[end:]
    monkeypatch.setattr(catalog, "source_notebook", lambda name: nb)
    found = "\n".join(catalog.problems("tr", lesson))
    assert f"{lesson} {markdown.id}: not translated" in found and f"{lesson} {code.id} " in found
    updated = catalog.update("tr", lesson)
    stale = {m.context: m for m in updated if m.id and "fuzzy" in m.flags}
    assert stale[markdown.id].string == catalog.read("tr", lesson).get(markdown.source[:-len(" One more sentence.")],
                                                                        context=markdown.id).string
    with pytest.raises(KeyError, match="no current tr translation"):
        catalog.translate(nb, "tr", lesson)


def test_a_translated_message_must_keep_its_placeholders():
    assert catalog.literal_problem('f"got {x}"', 'f"{x} geldi"') is None
    assert catalog.literal_problem('f"got {x}"', 'f"{y} geldi"')
    assert catalog.literal_problem('f"got {x}"', '"geldi"')
    assert catalog.literal_problem('"got it"', '"tamam')
    assert catalog.literal_problem('(f"a {x} "\n    f"b")', '(f"{x} a "\n    f"b")') is None
    assert catalog._translation_problem("feedback", "{label}: ok", "{etiket}: tamam")


@pytest.mark.parametrize("lang", EDITIONS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_the_released_edition_is_the_english_notebook_translated(lesson, lang):
    english = nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    committed = (REPO / "notebooks" / lang / lesson / f"{lesson}.ipynb").read_text()
    assert committed == nbformat.writes(catalog.translate(english, lang, lesson)) + "\n", \
        f"notebooks/{lang}/{lesson} is out of sync: run `make release`"


def _code_without_messages(source: str) -> str:
    for start, end, _ in reversed(catalog.literals(source)):
        source = source[:start] + "MESSAGE" + source[end:]
    return source


@pytest.mark.parametrize("lang", EDITIONS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_both_editions_run_the_same_code_and_grade_the_same_cells(lesson, lang):
    """Same cells, ids, metadata (grade ids, points, tags); code equal but for the student-facing messages; the
    solutions and hidden tests byte for byte: every answer of the corpus is the same code in both editions."""
    for folder in ("solutions", "notebooks"):
        english = nbformat.read(REPO / folder / lesson / f"{lesson}.ipynb", as_version=4)
        translated = catalog.translate(english, lang, lesson)
        assert [(c.id, c.cell_type, c.metadata) for c in translated.cells] == \
               [(c.id, c.cell_type, c.metadata) for c in english.cells]
        for ours, theirs in zip(translated.cells, english.cells):
            if theirs.cell_type == "code":
                assert _code_without_messages(ours.source) == _code_without_messages(theirs.source)
                for secret in re.findall(r"### BEGIN (?:SOLUTION|HIDDEN TESTS).*?### END (?:SOLUTION|HIDDEN TESTS)",
                                         theirs.source, re.S):
                    assert secret in ours.source
    assert translated.metadata["course_edition"] == lang


@pytest.mark.parametrize("lang", EDITIONS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_the_badges_open_the_editions_own_notebook(lesson, lang):
    first = nbformat.read(REPO / "notebooks" / lang / lesson / f"{lesson}.ipynb", as_version=4).cells[0].source
    targets = re.findall(r"blob/main/(notebooks/[^)\s]+\.ipynb)", first)
    assert {t for t in targets} == {f"notebooks/{lang}/{lesson}/{lesson}.ipynb"} and len(targets) == 2


def test_feedback_speaks_the_submissions_language(tmp_path, monkeypatch):
    cell = nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade_id": "split_sizes_tests", "points": 2}})
    english, turkish = redact.verdict_line(cell), redact.verdict_line(cell, redact.words("tr"))
    assert english.startswith("✓ split_sizes (2 points): The tests in this cell passed.")
    assert turkish.startswith("✓ split_sizes (2 puan): Bu hücredeki testler geçti.") and ENGLISH["notice"] not in turkish
    nb = nbformat.v4.new_notebook(metadata={"course_edition": "tr"})
    assert redact.edition(nb) == "tr"
    for forged in ("xx", ["tr"], None, "../tr"):
        assert redact.edition(nbformat.v4.new_notebook(metadata={"course_edition": forged})) == "en"
    page = redact.in_language('<span class="nbgrader-label">Student\'s answer</span> Score: 2 / 2 <a>(Top)</a>', "tr")
    assert "Öğrencinin yanıtı" in page and "Puan: 2 / 2" in page and "(Başa dön)" in page


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_audit_reads_another_editions_cells_as_the_instructors(lesson):
    """The Turkish solution's explanation cells (translated messages) are the instructor's, not a student's: the
    references they call are flagged in no honest submission."""
    from graders import audit, judge

    source = catalog.source_notebook(lesson)
    translated = catalog.translate(source, "tr", lesson)
    assert audit.audit(judge.student_cells(source, translated), audit.course_modules(source)) == []


def test_every_string_a_cell_shows_is_a_message():
    """What a cell's run shows a student, whatever shows it: an assert's or a raise's message, a print's arguments
    (a short label too), a figure's title, axes, legend and tick labels, a progress bar's description, and the
    language the setup cell tells the helpers. A string the run does not show stays out."""
    source = '\n'.join([
        'if broken:',
        '    raise RuntimeError(f"could not install {package}: turn Internet on")',
        'print("in fp16:", x, "vs", y)',
        'plt.plot(xs, label="fixed batch"); plt.xlabel("devices k"); ax.set_title(f"model of {mb} MB")',
        'ax.legend(["ring all-reduce", "device 0"])',
        'plotting.plot_bars(speeds, "ms per training step", title="measured here")',
        'plotting.plot_losses({"bf16 autocast": curve, **others})',
        'bar = tqdm(total=3, desc="training")',
        'language.use("en")',
        'key = "not shown"',
        'config = dict(mode="shown nowhere")',
    ])
    assert [text for _, _, text in catalog.literals(source)] == [
        'f"could not install {package}: turn Internet on"', '"in fp16:"', '"vs"', '"fixed batch"', '"devices k"',
        'f"model of {mb} MB"', '"ring all-reduce"', '"device 0"', '"ms per training step"', '"measured here"',
        '"bf16 autocast"', '"training"', '"en"']


def test_the_names_a_cell_gives_its_runs_and_its_headers_are_messages_and_the_keys_it_reads_are_not():
    """Issue 41: a cell's labels reach the student through its table, its print or its figure (a loop's cases, a dict
    literal's keys, a header in a print's placeholder), and every use of the label's text in the cell goes with it. A
    key read from data (a worker's result, a helper's row) and a worker's own keys stay as the code has them."""
    source = '\n'.join([
        'for name, wrap in [("one device", False), ("DataParallel, 2 devices", True)]:',
        '    curves[name] = train(wrap)',
        'runs = {"step 1 overflows": [True], "no sync in the loop": [False]}',
        'assert counted == {"step 1 overflows": 1}, counted',
        'for ax, (mode, name) in zip(axes, (("ddp", "DDP"), ("fsdp", "FSDP2 (ZeRO-3)"))):',
        '    print(f"{\'rank\':>5}{\'Adam state\':>12} {\'emulated\' if fake else \'CUDA\'}", b["optimizer state"])',
        'if XLA:',
        '    runs["8 virtual XLA:CPU devices"], log = run(8)',
        'report = memory.MemoryReport(rows, "DDP ranks, ledger" if ledger else memory.MEASURED)',
        'print(f"holds {r[\'state elements\']}", saved[0]["value types"])',
        'def worker(rank):',
        '    return {"file on my disk": True, "rank name": {"a b": 1}}',
    ])
    found = [text for _, _, text in catalog.literals(source)]
    assert sorted(found) == sorted([
        '"one device"', '"DataParallel, 2 devices"', '"step 1 overflows"', '"no sync in the loop"', '"step 1 overflows"',
        '"FSDP2 (ZeRO-3)"',
        "'rank'", "'Adam state'", "'emulated'", "'CUDA'", '"8 virtual XLA:CPU devices"', '"DDP ranks, ledger"',
        'f"holds {r[\'state elements\']}"']), found


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_label_is_read_only_in_the_cell_that_names_it(lesson):
    """A label is translated with every use of its text in its own cell: another cell that looked a run up by the
    English name would fail in the Turkish edition (a KeyError in a demonstration, which make test runs in English)."""
    nb = nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    labels = {label.value: cell.id for cell in code for label in catalog._labels(ast.parse(catalog.visible_code(
        cell.source)).body) if isinstance(label, ast.Constant)}
    elsewhere = [(text, owner, cell.id) for cell in code for node in ast.walk(ast.parse(catalog.visible_code(cell.source)))
                 if isinstance(node, ast.Constant) and (owner := labels.get(node.value)) not in (None, cell.id)
                 for text in [node.value]]
    assert not elsewhere, elsewhere


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_turkish_code_keeps_english_only_in_what_it_reads_as_data(lesson):
    """Every string of two words or more left as the English has it in a Turkish cell is data, not something a run
    shows: a key read from a result, a worker's own, a pattern, a package to install (the labels of issue 41's review,
    "small MLP (32-64-4)" and "DDP ranks, ledger" among them, were English in the Turkish lessons' runs)."""
    english = {c.id: c.source for c in nbformat.read(REPO / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4).cells}
    turkish = nbformat.read(REPO / "notebooks" / "tr" / lesson / f"{lesson}.ipynb", as_version=4)
    left = []
    for cell in turkish.cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(catalog.visible_code(cell.source))
        data = {id(n) for node in ast.walk(tree) for n in ast.walk(node) if isinstance(node, (
            ast.FunctionDef, ast.Lambda)) or isinstance(node, ast.Subscript) and n is node.slice and isinstance(
            node.ctx, ast.Load) or isinstance(node, ast.Expr) and n is node.value}  # functions' bodies, keys, docstrings
        data |= {id(n.args[0]) for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args and
                 getattr(n.func, "attr", None) in ("search", "match", "fullmatch", "compile")}  # patterns
        left += [(cell.id, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and id(n) not in data and sum(bool(re.fullmatch(r"[A-Za-z]{3,}[,.:;]?", w)) for w in n.value.split()) >= 2
                 and repr(n.value)[1:-1] in english.get(cell.id, "") and "@ git+" not in n.value]
    assert not left, left


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_setup_cell_speaks_the_editions_language(lesson):
    """Its errors (Kaggle's "turn Internet on" among them) are translated, and it tells the helpers the edition's
    language, as the edition's catalog translates it."""
    english = catalog.source_notebook(lesson)
    setup = next(c for c in english.cells if c.cell_type == "code")
    turkish = next(c for c in catalog.translate(english, "tr", lesson, strict=False).cells if c.id == setup.id).source
    assert "could not install" in setup.source and "could not install" not in turkish
    assert "hides the course's" not in turkish and "This is native Windows" not in turkish
    assert "Settings > Internet > On" in turkish and 'language.use("tr")' in turkish


SEARCHES = {"startswith", "endswith", "find", "index", "count", "search", "match", "fullmatch"}


def _looked_for(source: str) -> list[str]:
    """The strings of two words or more a cell's visible code compares with (`in`, `==`, ...) or searches for."""
    code = catalog.visible_code(source)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) in SEARCHES:
            operands = node.args
        else:
            continue
        found += [v.value for v in operands
                  if isinstance(v, ast.Constant) and isinstance(v.value, str) and re.search(r"\w \w", v.value)]
    return found


def _said(literal: str) -> str:
    """What a message literal says, outside its placeholders (what a translation changes)."""
    node = ast.parse(f"(\n{literal}\n)", mode="eval").body
    return node.value if isinstance(node, ast.Constant) else "".join(
        v.value for v in node.values if isinstance(v, ast.Constant))


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_cell_looks_for_a_message_its_edition_translates(lesson):
    """A cell that checks the text of its own message (`"cannot find its data" in error.details`) fails in every
    edition that translates it: the code looks for what the student is told only in a form both editions share."""
    found = []
    for cell in catalog.source_notebook(lesson).cells:
        if cell.cell_type != "code":
            continue
        said = "\n".join(_said(text) for _, _, text in catalog.literals(cell.source))
        found += [f"{cell.id}: {text!r}" for text in _looked_for(cell.source) if text in said]
    assert not found, "code that reads a translated message:\n" + "\n".join(found)


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_locked_cells_nbgrader_puts_back_come_back_in_the_submissions_edition(lesson):
    """nbgrader restores every locked cell from the gradebook's English source; a Turkish submission gets them in
    Turkish (its checks then speak Turkish), its own answers untouched; an English one is left as it is."""
    from nbgrader import utils

    from graders.edition_cells import in_edition

    english = catalog.source_notebook(lesson)
    turkish = catalog.translate(english, "tr", lesson)
    submitted = copy.deepcopy(turkish)
    for cell, source in zip(submitted.cells, english.cells):
        if utils.is_locked(cell):
            cell.source = source.source  # what OverwriteCells leaves
        elif utils.is_solution(cell):
            cell.source = "'Bu hücredeki testler geçti'  # a student's own"
    restored = in_edition(submitted, lesson)
    locked = [i for i, cell in enumerate(turkish.cells) if utils.is_locked(cell)]
    assert locked and all(restored.cells[i].source == turkish.cells[i].source for i in locked)
    assert any(turkish.cells[i].source != english.cells[i].source for i in locked if english.cells[i].cell_type == "code")
    assert all(c.source == "'Bu hücredeki testler geçti'  # a student's own" for c in restored.cells if utils.is_solution(c))
    assert in_edition(copy.deepcopy(english), lesson).cells == english.cells
