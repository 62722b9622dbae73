"""Students' answers to the graded exercises, one module per lesson (tests/answers_NN.py): correct ones written
differently from the solution, and the plausible wrong ones. Every answer replaces the exercise's solution
cell; tests/test_answers.py runs the exercise's test cell (visible and hidden tests) after it: a right answer
must pass, a wrong one must fail.

ANSWERS[lesson][grade_id of the solution cell] = {"right": {name: source}, "wrong": {name: source}}
"""

import importlib
from pathlib import Path

ANSWERS = {}
for _path in sorted(Path(__file__).parent.glob("answers_[0-9][0-9].py")):
    _module = importlib.import_module(_path.stem)
    ANSWERS.update(_module.ANSWERS)

# Right by value but by a reference the judge uses (helpers/refusal.py): the hidden tests refuse the reference to an
# answer, so these score nothing there (and the audit flags them); they were right answers until 2026-12-06.
CALL_A_REFERENCE = [("02-ddp", "scaling", "the course's helpers"), ("02-ddp", "quiz", "computed with torch and the helpers"),
                    ("03-amp", "predict_dtypes", "measured with the course's table"),
                    ("03-amp", "scaler", "a real GradScaler"), ("03-amp", "activation_ratio", "the course's counter")]
for _lesson, _exercise, _name in CALL_A_REFERENCE:
    _kinds = ANSWERS[_lesson][_exercise]
    _kinds["wrong"][f"{_name} (a reference, refused)"] = _kinds["right"].pop(_name)
