"""The Turkish edition speaks as its glossary says (i18n/tr/GLOSSARY.md, whose tables and lists this file reads):
the glossary's terms and not their refused variants, "yığın" for batch only, one register (the "-iniz" imperative),
suffixes in vowel harmony with how an English name is said, each English gloss once per lesson, and decimal points.
Every translated message of every Turkish catalog is checked: the lessons (markdown and code messages), the site's
pages and the feedback words."""

import functools
import re

import pytest

from i18n import catalog

GLOSSARY = catalog.REPO / "i18n" / "tr" / "GLOSSARY.md"
NAMES = catalog.catalogs()

FRONT, ROUNDED, HIGH = set("eiöü"), set("oöuü"), set("ıiuü")
VOWELS = set("aeıioöuü")
LETTER = r"[^\W\d_]"


def lower(text: str) -> str:
    """Turkish lower case: I → ı, İ → i."""
    return text.replace("I", "ı").replace("İ", "i").lower()


# -- what a message says, without its code ---------------------------------------------------------------------

FENCED = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
URL = re.compile(r"https?://\S+")
PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def prose(text: str, *, keep_spans: bool = False) -> str:
    """The words of a message: fenced code, link targets, addresses and f-string placeholders removed, code spans
    too (or only their backticks: `keep_spans`), bold and italic marks dropped."""
    text = URL.sub(" ", LINK_TARGET.sub("]", FENCED.sub(" ", text)))
    text = PLACEHOLDER.sub(" ", text)
    text = CODE_SPAN.sub((lambda m: m.group(0)) if keep_spans else " ", text)
    return re.sub(r"\s+", " ", text.replace("*", ""))


@functools.lru_cache(maxsize=None)
def messages(name: str) -> tuple[tuple[str, str, str], ...]:
    """(context, English, Turkish) of every translated message of a Turkish catalog."""
    return tuple((m.context, m.id, m.string) for m in catalog.read("tr", name) if m.id and m.string)


# -- the glossary, read --------------------------------------------------------------------------------------------

def _sections() -> dict[str, str]:
    parts = re.split(r"^## (.+)$", GLOSSARY.read_text(), flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2])}


def _table(body: str) -> list[list[str]]:
    rows = [line.strip().strip("|").split("|") for line in body.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows[2:]]  # below the header and its rule


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


@functools.lru_cache(maxsize=None)
def terms() -> tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...]:
    """(English terms, Turkish forms of which one is required, refused forms) of each checked row of Terms."""
    rows = []
    for english, turkish, refused in _table(_sections()["Terms"]):
        if _ticked(english):
            rows.append((tuple(_ticked(english)), tuple(_ticked(turkish)), tuple(_ticked(refused))))
    return tuple(rows)


@functools.lru_cache(maxsize=None)
def imperatives() -> tuple[str, ...]:
    return tuple(_ticked(_sections()["Register"]))


@functools.lru_cache(maxsize=None)
def harmony() -> dict[str, str]:
    """Each English name of the Suffixes table: the last vowel of its Turkish pronunciation."""
    return {name: vowel for name, _, vowel in _table(_sections()["Suffixes"])}


def test_the_glossary_gives_the_tables_the_checks_read():
    assert len(terms()) >= 10 and all(english and (turkish or refused) for english, turkish, refused in terms())
    assert len(imperatives()) >= 40 and all(re.search(r"(ı|i|u|ü)n(ı|i|u|ü)z$", v) for v in imperatives())
    assert harmony()["DataParallel"] == "e" and harmony()["rank"] == "a"
    assert all(len(v) == 1 and v in VOWELS for v in harmony().values())


# -- the rules -------------------------------------------------------------------------------------------------

def _english_has(english: str, term: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(term)}(?:s|es)?(?!\w)", prose(english), re.I) is not None


def _turkish_has(turkish: str, form: str) -> bool:
    """Whether a word of `turkish` starts with `form` (a form of several words: their sequence)."""
    return re.search(rf"(?<!\w){re.escape(lower(form))}", lower(prose(turkish))) is not None


def term_problems(english: str, turkish: str) -> list[str]:
    found = []
    for english_terms, required, refused in terms():
        if not any(_english_has(english, term) for term in english_terms):
            continue
        if required and not any(_turkish_has(turkish, form) for form in required):
            found.append(f"{english_terms[0]!r} is not said as {' or '.join(map(repr, required))}")
        found += [f"{english_terms[0]!r} said as {form!r}" for form in refused if _turkish_has(turkish, form)]
    return found


BATCH = re.compile(r"(?<!\w)(?:mini-|micro-)?batch(?:es)?(?!\w)", re.I)
YIGIN = re.compile(r"(?<!\w)yığın", re.I)


def yigin_problem(english: str, turkish: str) -> str | None:
    """"yığın" is the course's word for batch: said more often than the English says batch, it names something
    else (a software stack, a heap)."""
    batches, yigins = len(BATCH.findall(prose(english))), len(YIGIN.findall(lower(prose(turkish))))
    return f"'yığın' {yigins} times for {batches} batch(es)" if yigins > batches else None


@functools.lru_cache(maxsize=None)
def _plain_imperatives() -> dict[str, str]:
    return {form[:-2]: form for form in imperatives()}


def register_problems(turkish: str) -> list[str]:
    plain = _plain_imperatives()
    return [f"{word!r} (the register is {plain[word]!r})"
            for word in re.findall(rf"{LETTER}+", lower(prose(turkish))) if word in plain]


def _agrees(term_vowel: str, suffix: str) -> bool:
    vowel = next((ch for ch in lower(suffix) if ch in VOWELS), None)
    if vowel is None:
        return True
    if (vowel in FRONT) != (term_vowel in FRONT):
        return False
    return vowel not in HIGH or (vowel in ROUNDED) == (term_vowel in ROUNDED)


@functools.lru_cache(maxsize=None)
def _suffixed() -> re.Pattern:
    names = "|".join(sorted(map(re.escape, harmony()), key=len, reverse=True))
    return re.compile(rf"(?<![\w])(?:[\w.]*\.)?({names})`?(?:['’]({LETTER}+)| (m[ıiuü])(?!\w))", re.I)


def suffix_problems(turkish: str) -> list[str]:
    """A suffix (or the question particle) after a name of the glossary's Suffixes table, any case ("Rank'ın"
    at the start of a sentence is "rank" too), whose vowel does not follow the name's."""
    vowel_of = {name.lower(): vowel for name, vowel in harmony().items()}
    found = []
    for match in _suffixed().finditer(prose(turkish, keep_spans=True)):
        name, suffix = match.group(1), match.group(2) or match.group(3)
        vowel = vowel_of[name.lower()]
        if not _agrees(vowel, suffix):
            found.append(f"{match.group(0)!r} (say {name} with {vowel!r}: the suffix's vowel follows it)")
    return found


GLOSS = re.compile(r"\(([A-Za-z][A-Za-z -]{2,}[A-Za-z])\)")


def glosses(english: str, turkish: str) -> list[str]:
    """The English glosses of a Turkish text: a parenthesis holding only English words that the English says (or
    inflects: "(checkpoint)" for "Checkpoints")."""
    return [g for g in GLOSS.findall(prose(turkish)) if re.search(rf"(?<!\w){re.escape(g)}", prose(english), re.I)]


DECIMAL = re.compile(r"(?<![\d.,])\d+\.\d+(?![\d.])")


def number_problems(english: str, turkish: str) -> list[str]:
    """A decimal number of the English must come back with its decimal point, not a comma."""
    said = prose(turkish)
    return [f"{n} written {n.replace('.', ',')}" for n in DECIMAL.findall(prose(english))
            if n.replace(".", ",") in said and n not in said]


# -- the rules on every catalog -------------------------------------------------------------------------------------

def _failures(name: str, check) -> list[str]:
    return [f"{name} {context}: {problem}" for context, english, turkish in messages(name)
            for problem in check(english, turkish)]


@pytest.mark.parametrize("name", NAMES)
def test_glossary_terms_are_said_as_the_glossary_says(name):
    found = _failures(name, term_problems)
    found += _failures(name, lambda english, turkish: [p] if (p := yigin_problem(english, turkish)) else [])
    assert not found, "i18n/tr/GLOSSARY.md, Terms:\n" + "\n".join(found)


@pytest.mark.parametrize("name", NAMES)
def test_one_register_the_iniz_imperative(name):
    found = _failures(name, lambda english, turkish: register_problems(turkish))
    assert not found, "i18n/tr/GLOSSARY.md, Register:\n" + "\n".join(found)


@pytest.mark.parametrize("name", NAMES)
def test_suffixes_after_english_names_follow_their_pronunciation(name):
    found = _failures(name, lambda english, turkish: suffix_problems(turkish))
    assert not found, "i18n/tr/GLOSSARY.md, Suffixes:\n" + "\n".join(found)


@pytest.mark.parametrize("name", NAMES)
def test_decimal_numbers_keep_their_point(name):
    found = _failures(name, number_problems)
    assert not found, "i18n/tr/GLOSSARY.md, Numbers:\n" + "\n".join(found)


@pytest.mark.parametrize("lesson", catalog.LESSONS)
def test_each_english_gloss_once_per_lesson(lesson):
    seen: dict[str, list[str]] = {}
    for context, english, turkish in messages(lesson):
        if not catalog._is_code(english):  # a check message is read alone, when it fails: it may repeat one
            for gloss in glosses(english, turkish):
                seen.setdefault(lower(gloss), []).append(context)
    repeated = {gloss: cells for gloss, cells in seen.items() if len(cells) > 1}
    assert not repeated, "i18n/tr/GLOSSARY.md, Glosses: glossed again in " + "; ".join(
        f"({gloss}): {', '.join(cells)}" for gloss, cells in sorted(repeated.items()))


# -- the rules can fail ---------------------------------------------------------------------------------------------

def test_the_rules_refuse_what_the_review_found():
    """Each rule on a sentence of the 2026-12-04 review (../shared/reviews/turkish-review-2026-12-04.md) and on
    its corrected form."""
    assert term_problems("are marked deprecated in favour of `x`", "kullanımdan kaldırılmış (deprecated) olarak")
    assert not term_problems("are marked deprecated in favour of `x`", "eskimiş (deprecated) olarak")
    assert term_problems("The **global** batch is", "**Toplam** (global) yığın")
    assert not term_problems("The **global** batch is", "**Global** yığın")
    assert term_problems("Next: lesson 2.", "Sırada: 2. ders.") and not term_problems("Next: x", "Sıradaki ders: x")
    assert not term_problems("the `prefix` argument", "`prefix` önek")  # only the English outside code counts
    assert yigin_problem("at the foundation of its PyTorch stack; shards the batch",
                         "PyTorch yazılım yığınının temeline; yığını parçalar")
    assert yigin_problem("its PyTorch stack", "PyTorch altyapısının (stack)") is None
    assert register_problems("`predicted` sözlüğünü doldurun. Akıl yürütün, sonra karşılaştırın.") == [
        "'doldurun' (the register is 'doldurunuz')", "'yürütün' (the register is 'yürütünüz')",
        "'karşılaştırın' (the register is 'karşılaştırınız')"]
    assert not register_problems("doldurunuz; kullanmayınız; bu sorun değil; verinin boyutu")
    assert suffix_problems("`nn.DataParallel`'ı kullanır; DataParallel'da; bir nn.DataParallel mı; rank'ler")
    assert len(suffix_problems("DataParallel'ın DataParallel'da DataParallel'dır `nn.DataParallel`'ı rank'ler "
                               "rank'i Colab'in bir nn.DataParallel mı")) == 8
    assert not suffix_problems("DataParallel'in, DataParallel'de, `nn.DataParallel`'dir, bir nn.DataParallel mi, "
                               "DistributedDataParallel'i, rank'lar, Rank'ı, Colab'ın, Kaggle'ın, NCCL'in, "
                               "gloo'nun, GPU'ya, fp16'nın, fp32'nin, torch'un, torchrun'ın, Trainer'ın, `x`'in")
    assert glosses("a checkpoint", "denetim noktası (checkpoint)") == ["checkpoint"]
    assert glosses("a checkpoint (a)", "denetim noktası (hook)") == []  # not an English word of the message
    assert number_problems("about 5.5 CPU-seconds", "yaklaşık 5,5 CPU saniyesi")
    assert not number_problems("about 5.5 CPU-seconds", "yaklaşık 5.5 CPU saniyesi")
