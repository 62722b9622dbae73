"""What the course says of itself where a student starts: lesson 1's overview and the site's landing page name every
lesson and count them right, in both editions, and the Turkish edition's site speaks Turkish in its title and hours."""

import re
from pathlib import Path

import nbformat
import pytest

from graders.course import lessons
from website import build

REPO = Path(__file__).resolve().parent.parent
LESSONS = lessons(REPO)
COUNT = {"en": {4: "four", 5: "five", 6: "six", 7: "seven"}, "tr": {4: "dört", 5: "beş", 6: "altı", 7: "yedi"}}
OVERVIEW = {"en": "This is the first of {} lessons", "tr": "Bu, tek bir modeli birden çok cihazda eğitmeyi anlatan {} dersin"}
LANDING = {"en": "{} Jupyter lessons", "tr": "alıştırmalar içeren {}"}


def _overview(lang: str) -> str:
    folder = REPO / "notebooks" / ("" if lang == "en" else lang) / LESSONS[0]
    return nbformat.read(folder / f"{LESSONS[0]}.ipynb", as_version=4).cells[0].source


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_lesson_1s_overview_lists_and_counts_every_lesson(lang):
    overview = _overview(lang)
    assert OVERVIEW[lang].format(COUNT[lang][len(LESSONS)]) in overview
    assert re.findall(r"^(\d+)\. ", overview, re.M) == [str(n) for n in range(1, len(LESSONS) + 1)]


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_the_landing_page_counts_the_lessons_and_lists_each_with_its_study_time(lang):
    text = build.landing_page(LESSONS, lang)
    assert LANDING[lang].format(COUNT[lang][len(LESSONS)]).lower() in " ".join(text.split()).lower()
    for number, lesson in enumerate(LESSONS, start=1):
        assert f"{number}. [**{build.lesson_title(lesson, lang)}**](lessons/{lesson}.ipynb) — ⏱ " in text


def test_study_times_are_said_in_the_editions_words():
    assert build.study_time("01-dataparallel") == "1–1.5 h"
    assert build.study_time("01-dataparallel", "tr") == "1–1,5 sa"
    assert build.study_time("02-ddp", "tr") == "2–3 sa"
    assert not re.search(r"\d h\b", build.landing_page(LESSONS, "tr"))
    with pytest.raises(ValueError, match="lang"):
        build.study_time("01-dataparallel", "de")


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_each_editions_site_is_titled_in_its_language(lang):
    title = build.page_title("landing", lang)
    assert title == {"en": "Training on many devices with PyTorch", "tr": "PyTorch ile birçok cihazda eğitim"}[lang]
    conf = build.CONF.format(title=title, REPOSITORY=build.REPOSITORY)
    assert f'html_title = "{title}"' in conf and f'project = "{title}"' in conf
