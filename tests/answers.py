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
