"""A lesson's text as a gettext catalog, and an edition of the lesson built from it.

Every markdown cell of `solutions/<lesson>/<lesson>.ipynb` is one message: its context (msgctxt) is the cell's id,
its msgid the English source, its msgstr the translation. In code cells every string a student reads when the cell
runs is a message (`literals`): the messages of its asserts and raises, its print arguments, the titles, axis labels,
legends and bar descriptions it draws, and the language it tells the helpers (`language.use("en")`), in the part a
student sees (not solutions, not hidden tests); context the cell's id, msgid the literal as written (an f-string
with its placeholders). The helpers' own messages (their `say("...")` templates) are the catalog `helpers`
(i18n/<lang>/helpers.po, context the module), shipped to the kernels as helpers/_messages.py by `release`. Both editions run the same code, with the same grade ids, points and hidden tests: a translated
literal must be the same kind of literal with the same placeholders (`literal_problem`). `python -m i18n.catalog update` writes the catalogs
anew from the English sources: a message whose English changed keeps its old translation marked fuzzy (stale),
and a new cell comes in untranslated; a translator (Poedit, or any editor) fills them in and clears the flag.
"""
import argparse
import ast
import copy
import functools
import re
import string
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

REPO = Path(__file__).resolve().parent.parent
LANGUAGES = {"tr": "Türkçe"}  # the editions besides English
LESSONS = sorted(p.name for p in (REPO / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())
PAGES = sorted(p.stem for p in (REPO / "website" / "pages").glob("*.md"))  # the site's landing page and others


def catalog_path(lang: str, name: str) -> Path:
    """A lesson's catalog (i18n/<lang>/<lesson>.po), a site page's (i18n/<lang>/pages/<page>.po) or the
    grader's feedback words (i18n/<lang>/feedback.po)."""
    if name.startswith("pages/"):
        return REPO / "i18n" / lang / "pages" / f"{name.removeprefix('pages/')}.po"
    return REPO / "i18n" / lang / f"{name}.po"


def catalogs() -> list[str]:
    return [*LESSONS, *(f"pages/{p}" for p in PAGES), "feedback", HELPERS]


HELPERS = "helpers"  # the helpers package's messages: i18n/<lang>/helpers.po, shipped as helpers/_messages.py


def units(name: str) -> list[tuple[str, str]]:
    """(context, English) of every message of a catalog."""
    if name.startswith("pages/"):
        text = (REPO / "website" / "pages" / f"{name.removeprefix('pages/')}.md").read_text()
        return [(f"block-{i:03d}", block) for i, block in enumerate(markdown_blocks(text)) if _translatable(block)]
    if name == "feedback":
        from graders.words import ENGLISH

        return list(ENGLISH.items())
    if name == HELPERS:
        return helpers_messages()
    nb = source_notebook(name)
    shown = code_texts(nb)
    return [*texts(nb).items(), *shown, *(t for t in judge_texts(nb) if t not in shown)]  # judge's: feedback pages


def markdown_blocks(text: str) -> list[str]:
    """A Markdown page's blocks: paragraphs, lists, tables, headings (split at blank lines), a fenced code block
    whole. Joined with blank lines they give the page back."""
    blocks, current, fenced = [], [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            if current:
                blocks.append("\n".join(current))
                current = []
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _translatable(block: str) -> bool:
    """Not a fenced code block, nor a line the site's builder fills in (%%NAME%%)."""
    return not block.startswith("```") and not re.fullmatch(r"%%\w+%%", block) and bool(WORD.search(block))


def translate_page(name: str, lang: str) -> str:
    """A site page in `lang`: each translatable block replaced by its translation, code blocks as they are."""
    catalog = read(lang, f"pages/{name}")
    text = (REPO / "website" / "pages" / f"{name}.md").read_text()
    out = []
    for i, block in enumerate(markdown_blocks(text)):
        out.append(_translation(catalog, f"block-{i:03d}", block, lang, f"pages/{name}") if _translatable(block)
                   else block)
    return "\n\n".join(out) + "\n"


def words(lang: str) -> dict[str, str]:
    """The grader's feedback words in `lang` (graders/words.py's keys); English where `lang` is "en"."""
    from graders.words import ENGLISH

    if lang == "en":
        return dict(ENGLISH)
    catalog = read(lang, "feedback")
    return {key: _translation(catalog, key, english, lang, "feedback") for key, english in ENGLISH.items()}


@functools.lru_cache(maxsize=None)
def source_notebook(lesson: str):
    import nbformat

    return nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)


def texts(nb) -> dict[str, str]:
    """The translatable text of a notebook: its markdown cells by cell id."""
    return {cell["id"]: cell["source"] for cell in nb.cells if cell["cell_type"] == "markdown"}


HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?(### END HIDDEN TESTS|\Z)", re.S)
SOLUTION = re.compile(r"### BEGIN SOLUTION.*?### END SOLUTION", re.S)
WORD = re.compile(r"[^\W\d_]{3,}")  # three letters of any script


def _blank(match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def visible_code(source: str) -> str:
    """The code of a cell as a student sees it, same offsets: solutions, hidden tests and IPython's magic and
    shell lines blanked out."""
    source = SOLUTION.sub(_blank, HIDDEN.sub(_blank, source))
    return "\n".join(" " * len(line) if line.lstrip().startswith(("%", "!")) else line
                     for line in source.split("\n"))


def literals(source: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of the student-facing string literals of a code cell, offsets into `source`: what its
    run shows a student (the messages of its asserts and raises, the arguments of its print calls, the titles, axis
    labels, legends and progress-bar descriptions it draws) wherever they hold a word, and the language the cell
    tells the helpers (`language.use("en")`), which each edition's catalog translates."""
    code = visible_code(source)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    starts = [0]
    for line in code.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    found, shown = [], [(value, needs) for node in ast.walk(tree) for value, needs in _shown(node)]
    placed = [value.value for f_string, _ in shown if isinstance(f_string, ast.JoinedStr)
              for value in f_string.values if isinstance(value, ast.FormattedValue)]  # f"{'Adam state':>12}"
    shown += [(e, True) for v in placed for e in ((v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,))]
    labels = _labels(tree.body)
    texts = {label.value for label in labels if isinstance(label, ast.Constant)}
    shown += [(node, False) for node in ast.walk(tree) if any(node is label for label in labels)
              or isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in texts]
    for value, needs_words in shown:
        if not isinstance(value, (ast.Constant, ast.JoinedStr)) or (
                isinstance(value, ast.Constant) and not isinstance(value.value, str)):
            continue
        start = _offset(code, starts, value.lineno, value.col_offset)
        end = _offset(code, starts, value.end_lineno, value.end_col_offset)
        if not needs_words or SHORT_WORD.search(_outside_placeholders(value)):
            found.append((start, end, source[start:end]))
    # a placeholder's string inside an f-string that is a message itself is code of that message: the message's
    # translation keeps it as it is (literal_problem)
    return sorted({(a, b, t) for a, b, t in found if not any(c <= a and b <= d and (c, d) != (a, b) for c, d, _ in found)})


def _labels(body) -> list:
    """The names a cell gives its runs, cases and rows at its top level (never in a function: a worker's keys are
    data), which its prints, tables and figures show: the strings of a literal it loops over, the keys of a dict
    literal it names, the keys it stores under (`runs["8 virtual XLA:CPU devices"] = ...`). Every use of the same text
    in the cell is translated with them (a lookup, an assert's expected keys), so the cell still runs."""
    found = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        literal = (node.iter if isinstance(node, ast.For) else node.value if isinstance(node, ast.Assign) else None)
        looped = [literal, *literal.args] if isinstance(node, ast.For) and isinstance(literal, ast.Call) else [literal]
        for value in looped if isinstance(node, ast.For) else []:  # `for x in [...]`, `for a, x in zip(b, [...])`
            if isinstance(value, (ast.List, ast.Tuple)):
                found += [e for item in value.elts for e in (item.elts if isinstance(item, ast.Tuple) else [item])]
        if isinstance(literal, ast.Dict):
            found += literal.keys
        if isinstance(node, ast.Assign):
            targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            found += [t.slice for t in targets if isinstance(t, ast.Subscript)]
        for field in ("body", "orelse", "finalbody"):
            found += _labels(getattr(node, field, []))
    return [n for n in found if isinstance(n, (ast.Constant, ast.JoinedStr)) and _a_label(n)]


def _a_label(node) -> bool:
    text = node.value if isinstance(node, ast.Constant) else _outside_placeholders(node)
    return isinstance(text, str) and " " in text.strip() and bool(WORD.search(text))


SHORT_WORD = re.compile(r"[^\W\d_]{2,}")  # "in fp16:" is a message too
LABELS = {"title", "set_title", "suptitle", "xlabel", "ylabel", "set_xlabel", "set_ylabel", "text", "annotate",
          "legend", "set_description",  # matplotlib's and tqdm's calls whose strings a figure or a bar shows
          "plot_bars", "plot_losses", "plot_phases", "plot_memory",  # the course's (helpers/plotting.py): labels too
          "MemoryReport"}  # a ledger's label (helpers/memory.py), which its table and figure show
LABEL_KEYWORDS = {"label", "title", "xlabel", "ylabel", "desc"}


def _shown(node) -> list[tuple[ast.AST, bool]]:
    """The values of `node` a student reads when the cell runs, each with whether it must hold a word to count."""
    if isinstance(node, ast.Assert):
        return [(node.msg, True)] if node.msg is not None else []
    if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
        return [(value, True) for value in node.exc.args]
    if not isinstance(node, ast.Call):
        return []
    name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
    if name == "use" and isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", None) == "language":
        return [(value, False) for value in node.args[:1]]  # the edition's language (helpers/language.py)
    values = list(node.args) if name == "print" or name in LABELS else []
    values = [e for v in values for e in (v.elts if isinstance(v, (ast.List, ast.Tuple)) else v.keys
                                          if isinstance(v, ast.Dict) else [v.key] if isinstance(v, ast.DictComp)
                                          else [v])]  # a dict's keys: the labels of its values
    values += [k.value for k in node.keywords if k.arg in LABEL_KEYWORDS]
    while any(isinstance(v, (ast.IfExp, ast.BoolOp)) for v in values):  # `"a" if x else "b"`, `name or "none"`: each
        values = [e for v in values for e in ((v.body, v.orelse) if isinstance(v, ast.IfExp) else
                                              v.values if isinstance(v, ast.BoolOp) else (v,))]
    return [(value, True) for value in values]


def _offset(code: str, starts: list[int], lineno: int, col: int) -> int:
    line = code.split("\n")[lineno - 1]
    return starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8"))  # ast columns count bytes


def _outside_placeholders(value) -> str:
    if isinstance(value, ast.Constant):
        return value.value
    return "".join(v.value for v in value.values if isinstance(v, ast.Constant))


def _shape(literal: str):
    """What a translation must keep of a literal: its kind and its placeholders' code, in any order."""
    node = ast.parse(f"(\n{literal}\n)", mode="eval").body  # a literal on several lines is several, joined
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return ("str", ())
    if isinstance(node, ast.JoinedStr):
        return ("f-string", tuple(sorted(ast.dump(v) for v in node.values if isinstance(v, ast.FormattedValue))))
    raise ValueError("not a string literal")


def literal_problem(english: str, translated: str) -> str | None:
    """Why `translated` cannot replace `english` in the code (None if it can)."""
    try:
        if _shape(translated) != _shape(english):
            return "its placeholders or its kind of literal differ from the English"
    except (SyntaxError, ValueError) as error:
        return f"not a Python string literal ({error})"
    return None


def code_texts(nb) -> list[tuple[str, str]]:
    """(cell id, literal) of every student-facing literal of the notebook's code cells, in order, once each."""
    seen, found = set(), []
    for cell in nb.cells:
        if cell["cell_type"] == "code":
            for _, _, text in literals(cell["source"]):
                if (cell["id"], text) not in seen:
                    seen.add((cell["id"], text))
                    found.append((cell["id"], text))
    return found


JUDGE_PART = re.compile(r"^[ \t]*# \[judge\][ \t]*\n(.*?)^[ \t]*### END HIDDEN TESTS", re.S | re.M)


def judge_texts(nb) -> list[tuple[str, str]]:
    """(cell id, literal) of the messages of the asserts in the judge parts of the hidden tests (graders/judge.py):
    what a feedback page may say of a failed test (graders/redact.py): those whose own words carry no data, in
    order, once each. Only looked up: the hidden tests run as the English source writes them in every edition."""
    from graders.words import shows_no_data

    found = []
    for cell in nb.cells:
        for part in JUDGE_PART.findall(cell["source"]) if cell["cell_type"] == "code" else ():
            try:
                tree = ast.parse(part)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                value = node.msg if isinstance(node, ast.Assert) else None
                if (isinstance(value, ast.JoinedStr) or isinstance(value, ast.Constant) and isinstance(value.value, str)
                        ) and WORD.search(words_of := _outside_placeholders(value)) and shows_no_data(words_of):
                    text = ast.get_source_segment(part, value)
                    if (cell["id"], text) not in found:
                        found.append((cell["id"], text))
    return found


def helpers_messages() -> list[tuple[str, str]]:
    """(module, English) of every message of the helpers package: the template of each `say("...")` or
    `message("...")` call in helpers/*.py (helpers/language.py), in the order of the files and their lines, once
    each."""
    seen, found = set(), []
    for path in sorted((REPO / "helpers").glob("*.py")):
        calls = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
                 and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("say", "message") and node.args
                 and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)]
        for node in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
            if node.args[0].value not in seen:
                seen.add(node.args[0].value)
                found.append((path.stem, node.args[0].value))
    return found


def messages_module() -> str:
    """helpers/_messages.py, what the helpers read at run time: each edition's current translations of their
    messages (a message without one stays English)."""
    lines = ['"""The helpers\' messages in each edition\'s language, {language: {English: translation}}: written by',
             "`make release` from i18n/<lang>/helpers.po (i18n/catalog.py); edit the catalogs, not this file.\"\"\"",
             "", "CATALOGS = {"]
    for lang in sorted(LANGUAGES):
        catalog = read(lang, HELPERS)
        lines.append(f"    {lang!r}: {{")
        for module, english in helpers_messages():
            try:
                lines.append(f"        {english!r}:\n            {_translation(catalog, module, english, lang, HELPERS)!r},")
            except (KeyError, ValueError):
                continue
        lines.append("    },")
    return "\n".join([*lines, "}", ""])


def read(lang: str, lesson: str) -> Catalog:
    path = catalog_path(lang, lesson)
    if not path.is_file():
        return Catalog(locale=lang)
    with open(path, "rb") as f:
        return read_po(f, locale=lang)


def write(catalog: Catalog, lang: str, lesson: str) -> None:
    path = catalog_path(lang, lesson)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        write_po(f, catalog, width=0, omit_header=False, ignore_obsolete=True)


def update(lang: str, lesson: str) -> Catalog:
    """The catalog rebuilt from the English source: translations kept where the English is unchanged, kept and
    marked fuzzy where it changed, empty for new cells; messages of removed cells dropped."""
    old = read(lang, lesson)
    new = Catalog(locale=lang, project=f"pytorch-multi-device-course {lesson}", charset="utf-8",
                  creation_date=old.creation_date, revision_date=old.revision_date)  # no diff when nothing changed
    for cell_id, english in units(lesson):
        before = old.get(english, context=cell_id)
        if before is not None and before.string:
            new.add(english, before.string, context=cell_id, flags=[f for f in before.flags if f != "fuzzy"])
            continue
        by_cell = next((m for m in old if m.id and m.context == cell_id and m.string and
                        _is_code(m.id) == _is_code(english) and _similar(m.id, english)), None)
        if by_cell is not None:
            new.add(english, by_cell.string, context=cell_id, flags=["fuzzy"])
        else:
            new.add(english, "", context=cell_id)
    return new


def _is_code(text: str) -> bool:
    try:
        _shape(text)
        return True
    except (SyntaxError, ValueError):
        return False


def _similar(a: str, b: str) -> bool:
    """Whether b is an edit of a (for a cell's several messages: which old translation a changed one had)."""
    import difflib

    return difflib.SequenceMatcher(None, a, b).ratio() > 0.6


def problems(lang: str, lesson: str) -> list[str]:
    """What keeps the edition from being complete: cells with no translation, or a stale (fuzzy) one, or one
    whose English is no longer the source's."""
    catalog = read(lang, lesson)
    found = []
    for cell_id, english in units(lesson):
        what = f"{lesson} {cell_id}" + (f" {english[:40]!r}" if lesson in ("feedback", HELPERS) or _is_code(english)
                                         else "")
        message = catalog.get(english, context=cell_id)
        if message is None:
            found.append(f"{what}: not translated (or its English changed: python -m i18n.catalog update)")
        elif not message.string:
            found.append(f"{what}: not translated")
        elif "fuzzy" in message.flags:
            found.append(f"{what}: stale (fuzzy): its English changed")
        elif (why := _translation_problem(lesson, english, message.string)):
            found.append(f"{what}: the translation is {why}")
    return found


def translate(nb, lang: str, lesson: str, strict: bool = True):
    """The notebook in `lang`: every markdown cell replaced by its translation (KeyError if one is missing);
    code cells and all metadata unchanged, the edition's language in the notebook's metadata. Not `strict`: a text
    without a current translation stays English (as gettext does)."""
    from graders.words import ENGLISH

    catalog = read(lang, lesson)
    out = copy.deepcopy(nb)

    stub = repr(ENGLISH["unsolved"])

    def translated(cell_id: str, english: str) -> str:
        if english == stub:  # the released stub (graders/words.py), not a lesson's own text
            return repr(words(lang)["unsolved"])
        try:
            return _translation(catalog, cell_id, english, lang, lesson)
        except (KeyError, ValueError):
            if strict:
                raise
            return english

    for cell in out.cells:
        if cell["cell_type"] == "markdown":
            cell["source"] = translated(cell["id"], cell["source"])
        elif cell["cell_type"] == "code":
            source = cell["source"]
            for start, end, text in reversed(literals(source)):
                source = source[:start] + translated(cell["id"], text) + source[end:]
            cell["source"] = source
    out.metadata["course_edition"] = lang
    return out


def release(root: Path) -> list[Path]:
    """notebooks/<lang>/<lesson>/<lesson>.ipynb for every edition: the released English notebook translated."""
    import nbformat

    written = [root / "helpers" / "_messages.py"]
    written[0].parent.mkdir(parents=True, exist_ok=True)
    written[0].write_text(messages_module())
    for lang in sorted(LANGUAGES):
        for lesson in LESSONS:
            if not (root / "notebooks" / lesson / f"{lesson}.ipynb").is_file():
                continue  # a course root with some of the lessons (tests)
            english = nbformat.read(root / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
            path = root / "notebooks" / lang / lesson / f"{lesson}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(translate(english, lang, lesson, strict=False), path)
            written.append(path)
            if missing := problems(lang, lesson):
                print(f"warning: notebooks/{lang}/{lesson}: {len(missing)} texts stay English until translated "
                      "(python -m i18n.catalog update, then check)", file=sys.stderr)
    return written


def lesson_of(nb) -> str | None:
    """Which of the course's lessons `nb` is a version of (its first cell is that lesson's), or None."""
    first = texts(nb).get("cell-000")
    return next((lesson for lesson in LESSONS if texts(source_notebook(lesson)).get("cell-000") == first), None)


def code_in_editions(nb) -> dict[str, set[str]]:
    """Each code cell of `nb` (one of the course's lessons, in English) by id: its source in English and as every
    edition releases it (its student-facing messages translated)."""
    found = {cell["id"]: {cell["source"]} for cell in nb.cells if cell["cell_type"] == "code"}
    lesson = lesson_of(nb)
    for lang in LANGUAGES if lesson else ():
        for cell in translate(nb, lang, lesson, strict=False).cells:
            if cell["cell_type"] == "code":
                found[cell["id"]].add(cell["source"])
    return found


def _translation(catalog: Catalog, cell_id: str, english: str, lang: str, lesson: str) -> str:
    message = catalog.get(english, context=cell_id)
    if message is None or not message.string or "fuzzy" in message.flags:
        raise KeyError(f"{lesson} {cell_id}: no current {lang} translation of {english[:60]!r} "
                       "(python -m i18n.catalog check)")
    if (why := _translation_problem(lesson, english, message.string)):
        raise ValueError(f"{lesson} {cell_id}: the {lang} translation of {english[:60]!r} is {why}")
    return message.string


def _fields(template: str) -> list[str]:
    return sorted(f"{name}:{spec}" for _, name, spec, _ in string.Formatter().parse(template) if name is not None)


def _translation_problem(name: str, english: str, translated: str) -> str | None:
    if name in ("feedback", HELPERS):
        try:
            same = _fields(translated) == _fields(english)
        except ValueError as error:
            return f"not a str.format template ({error})"
        return None if same else "a template with other placeholders than the English"
    if _is_code(english):
        return literal_problem(english, translated)
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m i18n.catalog", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["update", "check"])
    parser.add_argument("--lang", choices=sorted(LANGUAGES), default=None, help="one edition (default: all)")
    args = parser.parse_args(argv)
    langs = [args.lang] if args.lang else sorted(LANGUAGES)
    missing = []
    for lang in langs:
        for lesson in catalogs():
            if args.command == "update":
                write(update(lang, lesson), lang, lesson)
            missing += problems(lang, lesson)
    for line in missing:
        print(line)
    print(f"{len(missing)} messages to translate" if missing else "every message translated")
    return 1 if (missing and args.command == "check") else 0


if __name__ == "__main__":
    sys.exit(main())
