"""The words a feedback page says, in English; other editions' words are in i18n/<lang>/feedback.po.

A key names each message; the English is a str.format template whose placeholders a translation keeps. The
page's frame (nbgrader's feedback template) is translated by its exact English phrases (FRAME).
"""

ENGLISH = {
    "notice": "Hidden tests ran here. Their code and output are not shown.",
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


def unsolved_stub(message: str) -> str:
    """The code that stands for a solution in a released notebook: it raises with `message` (words' "unsolved")."""
    return f"# YOUR CODE HERE\nraise NotImplementedError({message!r})"
