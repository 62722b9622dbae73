"""Which language the helpers speak, told in one place: the notebook's setup cell calls `use("en")`, a literal the
lesson's catalog translates like any other message of the cell ("tr" in the Turkish edition), so the kernel speaks
its notebook's edition with no setting of its own. `say(english)` is a helpers message in that language: its
translation in i18n/<lang>/helpers.po (`python -m i18n.catalog update` finds every `say("...")` of helpers/*.py),
shipped in helpers/_messages.py, which `make release` writes from the catalogs. A message without a current
translation stays English, as gettext does. Processes a kernel starts (DDP ranks, fresh Pythons) inherit its choice.
"""

from __future__ import annotations

import os

ENGLISH = "en"
ENV = "COURSE_LANGUAGE"  # how the kernel's choice reaches the processes it starts; `use` alone sets it


def languages() -> list[str]:
    """English and every edition whose helpers' catalog ships with the package."""
    from ._messages import CATALOGS

    return [ENGLISH, *sorted(CATALOGS)]


def use(language: str) -> None:
    """Speak `language` from now on, in this process and those it starts."""
    if language not in languages():
        raise ValueError(say("no helpers' catalog for {language!r}: one of {languages}", language=language,
                             languages=languages()))
    os.environ[ENV] = language


def current() -> str:
    """The language in use: what `use` last said here or in the process that started this one, else English."""
    language = os.environ.get(ENV, ENGLISH)
    return language if language in languages() else ENGLISH


def say(english: str, **fields) -> str:
    """`english` (a str.format template: `say("rank {rank} failed", rank=1)`) in the language in use, its fields
    filled in."""
    from ._messages import CATALOGS

    text = CATALOGS.get(current(), {}).get(english, english)
    return text.format(**fields) if fields else text


def message(english: str) -> str:
    """`english` unchanged, marked as a message (the catalog's extraction finds it): for a constant that is said
    later, `say(CONSTANT)`, in the language in use then."""
    return english
