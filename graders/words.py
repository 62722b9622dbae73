"""The words a feedback page says, in English; other editions' words are in i18n/<lang>/feedback.po.

A key names each message; the English is a str.format template whose placeholders a translation keeps. The
page's frame (nbgrader's feedback template) is translated by its exact English phrases (FRAME).
"""

import re

ENGLISH = {
    "notice": "Hidden tests ran here. Their code and output are not shown.",
    # a cell whose visible checks failed: its hidden tests did not run (graders/hidden_runs.py)
    "not_run": "Hidden tests run here once the visible checks pass. Their code is not shown.",
    "points": "{exercise} ({points:g} points)",
    "one_point": "{exercise} ({points:g} point)",
    "passed": "✓ {label}: The tests in this cell passed.",
    "failed": "✗ {label}: A test in this cell failed: {why}",
    "errored": "the cell stopped with an error (run it to see the visible checks' message).",
    "errored_with": "the cell stopped with {error}",
    # the stub of an unsolved exercise in a released notebook (nbgrader's ClearSolutions), in its language
    "unsolved": "not solved yet: write your answer in place of this line, then run this cell and its check",
    "found": "the hidden tests found this: {message}",
    "problem": "the hidden tests found a problem.",
    "this_exercise": "this exercise",  # a graded cell the lesson does not name (no heading before it)
    # the judge's own verdicts, as graders/judge.py writes them (tests/test_feedback_language.py checks that they are
    # the same); the hidden tests' are in each lesson's catalog (i18n/catalog.py judge_texts)
    "judge_missing": "the cell is missing from the graded notebook",
    "judge_no_run": "the hidden tests did not run",
    "judge_no_results": "the hidden tests' results did not arrive",
    "judge_several": "more than one collection",
    "judge_assertion": "an assertion failed",
    "judge_refused": "your answer calls one of the reference implementations of the course, which the hidden tests "
                     "refuse to an answer: write that code yourself",
    # nbgrader's feedback template, phrase by phrase as it writes them
    "frame_score": "Score: ",
    "frame_test_cell": ">Test cell<",
    "frame_comment": ">Comment<",
    "frame_answer": ">Student's answer<",
    "frame_task": ">Student's task<",
    "frame_grade_cell": ">Grade cell: ",
    "frame_comments": "<b>Comments:</b>",
    "frame_late": ">Late submission penalty ",
    "frame_top": ">(Top)<",
}
FRAME = tuple(key for key in ENGLISH if key.startswith("frame_"))
JUDGE = tuple(key for key in ENGLISH if key.startswith("judge_"))
DATA = re.compile(r"[0-9'\"\[\]{}()<>=]")  # what a hidden input or an expected value is written with


def shows_no_data(message: str) -> bool:
    """Whether a judge's message may be shown: short, in words only (no digits, quotes or brackets: never a hidden
    input or an expected value)."""
    return 0 < len(message) <= 200 and not DATA.search(message)


def unsolved_stub(message: str) -> str:
    """The code that stands for a solution in a released notebook: it raises with `message` (words' "unsolved")."""
    return f"# YOUR CODE HERE\nraise NotImplementedError({message!r})"
