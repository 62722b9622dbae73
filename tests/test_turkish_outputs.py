"""What a Turkish student reads when a lesson runs is Turkish: the helpers speak the notebook's edition (the setup
cell's `language.use("en")`, which the edition's catalog translates; helpers/language.py), every helpers' message
has a current translation (i18n/tr/helpers.po, shipped as helpers/_messages.py), and the outputs of the Turkish
solutions, run top to bottom with their demonstrations in the class's sandbox (tests/classroom.py, the "turkish"
student), hold no English sentence of the English catalogs: the lesson's code messages and the helpers' messages.
Code, identifiers and the libraries' own messages are not the catalogs' sentences, so they may stay."""

import ast
import re
import string
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from i18n import catalog

LESSONS = catalog.LESSONS
WORDS = re.compile(r"[A-Za-z]{2,}")


def test_every_helpers_message_has_a_current_turkish_translation():
    assert catalog.helpers_messages(), "the extraction finds the helpers' say(...) and message(...) calls"
    assert not catalog.problems("tr", catalog.HELPERS), "\n".join(catalog.problems("tr", catalog.HELPERS))


def test_the_helpers_ship_the_catalogs_translations():
    shipped = (catalog.REPO / "helpers" / "_messages.py").read_text()
    assert shipped == catalog.messages_module(), "helpers/_messages.py is out of sync: run `make release`"


def test_a_kernel_speaks_the_language_its_setup_cell_names(monkeypatch):
    """The setup cell of each edition names its language, as its catalog translates it; from then on the helpers
    (here the hardware summary, the memory ledger and a visible check's verdict) speak it."""
    from helpers import dataparallel, hardware, language, memory

    monkeypatch.delenv(language.ENV, raising=False)
    for lesson in LESSONS:
        english = catalog.source_notebook(lesson)
        setup = next(c for c in english.cells if c.cell_type == "code").source
        assert 'language.use("en")' in setup, lesson
        turkish = next(c for c in catalog.translate(english, "tr", lesson, strict=False).cells
                        if c.cell_type == "code").source
        assert 'language.use("tr")' in turkish, lesson
    hw = hardware.detect()
    report = memory.MemoryReport([{"parameters": 1, "gradients": 2}], memory.EMULATED)
    x = torch.arange(4.0).reshape(4, 1)
    twice = dataparallel.pieces_problem([x[:2], x[:2]], x, 2)
    assert language.current() == "en" and "CPU cores" in hw.summary() and "parameters" in report.table()
    language.use("tr")
    assert "CPU çekirdekleri" in hw.summary() and "CPU cores" not in hw.summary()
    assert "parametreler" in report.table() and "öykünülmüş" in report.table()
    assert dataparallel.pieces_problem([x[:2], x[:2]], x, 2) != twice
    assert "bir kez" in dataparallel.pieces_problem([x[:2], x[:2]], x, 2)
    with pytest.raises(ValueError, match=r"^device_ids negatif olmayan int'lerden .*, gelen: \[-1\]$"):
        dataparallel.make_data_parallel(torch.nn.Linear(1, 1), device_ids=[-1])  # an argument's error, in Turkish
    with pytest.raises(ValueError, match="^helpers'ın 'xx' için kataloğu yok"):
        language.use("xx")


def test_the_processes_a_kernel_starts_speak_its_language(monkeypatch):
    """A DDP rank or a fresh Python prints its progress and verdicts in the kernel's language."""
    from helpers import language

    monkeypatch.delenv(language.ENV, raising=False)
    language.use("tr")
    child = subprocess.run([sys.executable, "-c", "from helpers.language import say; print(say('training'))"],
                           capture_output=True, text=True, cwd=catalog.REPO, check=True)
    assert child.stdout.strip() == "eğitim"


# -- the English sentences a Turkish run may not show -------------------------------------------------------------

def _pieces(message: str) -> list[str]:
    """The fixed text of a message: a code literal's text outside its placeholders, a template's outside its
    fields, a line at a time."""
    if catalog._is_code(message):
        node = ast.parse(f"(\n{message}\n)", mode="eval").body
        parts = [node.value] if isinstance(node, ast.Constant) else [
            v.value for v in node.values if isinstance(v, ast.Constant)]
    else:
        parts = [literal for literal, *_ in string.Formatter().parse(message)]
    return [line.strip() for part in parts for line in part.split("\n")]


def english_sentences(lesson: str) -> set[str]:
    """The English sentences of a lesson's code messages and of the helpers' messages: each fixed piece of three
    words or more that its Turkish translation does not keep (a path or a menu name kept in the Turkish is not
    English to translate)."""
    found = set()
    for name in (lesson, catalog.HELPERS):
        turkish = {(m.context, m.id): m.string for m in catalog.read("tr", name) if m.id}
        for context, english in catalog.units(name):
            if name != catalog.HELPERS and not catalog._is_code(english):
                continue  # markdown: never an output
            kept = turkish.get((context, english)) or ""
            found.update(piece for piece in _pieces(english)
                         if len(WORDS.findall(piece)) >= 3 and piece not in kept)
    return found


def output_text(nb, shown=None) -> str:
    """What a notebook's code cells showed: streams, plain-text results and displays, errors; with `shown`, a
    notebook, only the cells whose code is its cell's (of the same id)."""
    code = {cell.get("id"): cell.source for cell in shown.cells} if shown is not None else None
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "code" or (code is not None and code.get(cell.get("id")) != cell.source):
            continue
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                texts.append(output.text)
            elif output.output_type in ("execute_result", "display_data"):
                texts.append(output.get("data", {}).get("text/plain", ""))
            elif output.output_type == "error":
                texts.append(f"{output.ename}: {output.evalue}")
    return "\n".join(texts)


def english_in(text: str, lesson: str) -> list[str]:
    return sorted(sentence for sentence in english_sentences(lesson) if sentence in text)


def test_the_check_finds_the_english_a_turkish_run_showed_before_the_helpers_spoke_turkish():
    """The hardware summary and a check's verdict, in English as the Turkish runs printed them: found."""
    shown = ("DataParallel: emulated nn.DataParallel (virtual devices on the CPU)\n"
             "AssertionError: the model ran more than once on one device's rows: run it once per device")
    assert english_in(shown, LESSONS[0]) == [
        "emulated nn.DataParallel (virtual devices on the CPU)",
        "the model ran more than once on one device's rows: run it once per device"]


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_turkish_lesson_run_shows_no_english_sentence(graded_class, lesson):
    """Every Turkish submission of the class (the "turkish" student's solutions, and any other in the Turkish
    edition), as the sandbox ran it: the outputs of the cells that ran the Turkish code, the checks among them
    (nbgrader puts the locked cells back from the English source; graders/edition_cells.py, in the edition's)."""
    turkish = catalog.translate(catalog.source_notebook(lesson), "tr", lesson, strict=False)
    runs = [path for path in sorted(graded_class.root.glob(f"autograded/*/{lesson}/{lesson}.ipynb"))
            if nbformat.read(path, as_version=4).metadata.get("course_edition") == "tr"]
    assert graded_class.root / "autograded" / "turkish" / lesson / f"{lesson}.ipynb" in runs
    for path in runs:
        nb = nbformat.read(path, as_version=4)
        visible = {c.get("id"): c.source.split("### BEGIN HIDDEN TESTS")[0] for c in turkish.cells}
        checks = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
        assert checks and all(c.source.split("### BEGIN HIDDEN TESTS")[0] == visible[c.get("id")] for c in checks), \
            f"the checks of {path} ran as another edition writes them"
        text = output_text(nb, shown=turkish)
        assert "CPU" in text, f"the Turkish run of {lesson} did not show the setup cell's summary: {path}"
        assert not english_in(text, lesson), f"English in {path}:\n" + "\n".join(english_in(text, lesson))


# What the helpers show a student, by where a string goes: an exception's message (argument validation included: the
# argument's name stays as the code spells it), print, tqdm's description and unit, a figure's labels. Left out: the
# instructor's and developer's tools, the judge's reading of collected data, and tokens that are identifiers or units.
SHOWN_BY = {"print", "tqdm", "set_title", "set_xlabel", "set_ylabel", "suptitle", "title", "xlabel", "ylabel", "legend",
            "text", "annotate", "set_description", "warn"}
SHOWN_KEYWORDS = {"desc", "unit", "label", "title"}
NOT_A_STUDENTS = {"hw_check.py", "import_heap.py", "_messages.py"}  # `make hw-check`'s report, `make setup`'s hook
NOT_A_STUDENTS_EXCEPTIONS = {("grading.py", "ReferenceFailed"), ("lightning_demo.py", "AttributeError")}  # the grader's; Python's
JUDGES_OWN = {("grading.py", "decode"), ("grading.py", "_decode_tensor"), ("grading.py", "loads")}  # judge.py words its verdict
TOKENS = {"[rank", "KiB"}
# A message a helper repeats as the library words it (the emulation warns as nn.DataParallel's gather does), and the
# library's file that says it (checked below)
LIBRARYS_OWN = {"Was asked to gather along dimension 0, but all input tensors were scalars; will instead unsqueeze and "
                "return a vector.": "torch/nn/parallel/_functions.py"}


def _english_shown(path) -> list[str]:
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def said(node):
        while (node := parents.get(node)) is not None:
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("say", "message"):
                return True
        return False

    judges = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and (path.name, node.name) in JUDGES_OWN]
    judges_own = {node for function in judges for node in ast.walk(function)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            raised = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", ""))
            if (path.name, raised) in NOT_A_STUDENTS_EXCEPTIONS or node in judges_own:
                continue
            values = node.exc.args
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in SHOWN_BY:
            values = list(node.args) + [k.value for k in node.keywords if k.arg in SHOWN_KEYWORDS]
            values = [v for v in values if not (isinstance(v, ast.Constant) and v.value in LIBRARYS_OWN)]
        else:
            continue
        found += [f"{path.name}:{s.lineno}: {s.value.strip()[:60]!r}" for value in values for s in ast.walk(value)
                  if isinstance(s, ast.Constant) and isinstance(s.value, str) and WORDS.search(s.value)
                  and s.value.strip() not in TOKENS and not said(s)]
    return found


def test_what_the_helpers_repeat_of_a_library_is_the_librarys_own_words():
    for text, file in LIBRARYS_OWN.items():
        tree = ast.parse((Path(torch.__file__).parent.parent / file).read_text())
        assert text in {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}, (text, file)


def test_every_string_the_helpers_show_a_student_is_a_message():
    """Issue 41: a helpers' string a student reads (an error's message, a print, a progress bar, a figure) goes
    through the catalogs (say/message), so that the Turkish edition shows it in Turkish; none is left out one by one."""
    found = [line for path in sorted((catalog.REPO / "helpers").glob("*.py")) if path.name not in NOT_A_STUDENTS
             for line in _english_shown(path)]
    assert not found, "\n".join(found)
