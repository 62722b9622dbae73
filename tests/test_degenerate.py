"""No judge accepts degenerate data: every judged cell of every lesson is fed mutations of its honest results.

For each judged grade cell (graders.judge.judged_cells), the solution's own answers run in-process as in
test_answers.py, and the cell's visible, setup and collect parts collect the honest results (once per module:
lessons 2 and 4 launch processes). Mutations of those results are then made from the data's shape alone, never
per exercise: every float in a part of the data one NaN object, or every tensor one empty tensor (as ranks that
all return it); a tensor empty, of a broadcastable wrong shape, NaN- or inf-filled or of another dtype; a float
non-finite or an int; ints and bools swapped with floats; a dict missing a key, with an extra key or (a state dict,
where order matters) reordered; a list empty, truncated or one element repeated (the same object); tuples and
lists swapped; any value a grading.Other. Each mutation goes through the cell's judge part, in the namespace
graders/judge.py builds (prelude cells, setup, `_got`), which must reject it (raise), unless the mutation left the
data identical or ACCEPTABLE lists it as a right answer. At most MAX_MUTATIONS per cell, spread over the kinds
and, seeded, over the data's places (the rejections were checked with budgets of 2500 too: none got through).
"""

import collections
import contextlib
import io
import json
import math
import random

import nbformat
import pytest
import torch

from conftest import REPO
from graders import judge
from helpers import grading

LESSONS = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())
MAX_MUTATIONS = 40
# Mutations a right answer may make, so the judge is right to accept them: (lesson, cell) -> {(kind, path)}.
ACCEPTABLE = {
    # any further variable, with any value, is still an environment that keeps Accelerate on the CPU
    ("04-accelerate-tpu", "trap_tests"): {("extra key", ("no TPU",))},
}


def _solution(lesson):
    return nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)


CELLS = [(lesson, grade_id) for lesson in LESSONS for grade_id in judge.judged_cells(_solution(lesson))]


@pytest.fixture(scope="module")
def honest():
    """lesson -> {grade_id: the honest collected data}: the solution's cells run as test_answers.py runs them."""
    made = {}

    def get(lesson):
        if lesson not in made:
            made[lesson] = _collect_honestly(_solution(lesson))
        return made[lesson]

    return get


@pytest.fixture(scope="module")
def preludes():
    made = {}

    def get(lesson):
        if lesson not in made:
            made[lesson] = judge.prelude(_solution(lesson))
        return made[lesson]

    return get


def _collect_honestly(solution) -> dict:
    """The setup and import cells, then every answer cell and the visible, setup and collect parts of every judged
    cell, in order, in one namespace (the demos between them are not run)."""
    code = [c for c in solution.cells if c.cell_type == "code"]
    namespace, collected = {}, {}
    with contextlib.redirect_stdout(io.StringIO()):
        for cell in code[:2]:
            exec(cell.source, namespace)
        for cell in code[2:]:
            meta = cell.metadata.get("nbgrader", {})
            parts = judge.split(cell.source) if meta.get("grade") else None
            if meta.get("solution"):
                exec(cell.source, namespace)
            elif parts:
                exec(parts["visible"] + "\n" + parts["setup"] + "\n" + parts["collect"], namespace)
                collected[meta["grade_id"]] = namespace["_got"]
    return collected


def _judge(prelude, parts, got):
    """Run the judge part on `got` as graders/judge.py does: raises when it rejects the data."""
    namespace = dict(prelude)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(parts["setup"], "<setup>", "exec"), namespace)
        namespace["_got"] = got
        exec(compile(parts["judge"], "<judge>", "exec"), namespace)


# ---- mutations ------------------------------------------------------------------------------------


DICTS = (dict, collections.OrderedDict)


def _is_state_dict(value) -> bool:
    return type(value) in DICTS and len(value) > 1 and all(type(v) is torch.Tensor for v in value.values())


def _other_dtype(t):
    if t.dtype.is_floating_point:
        return torch.float32 if t.dtype == torch.float64 else torch.float64
    if t.dtype == torch.bool:
        return torch.uint8
    return torch.int32 if t.dtype == torch.int64 else torch.int64


def _broadcastable(t):
    """A tensor of ones in every dimension (another shape than t's), holding t's first value."""
    shape = [1] * t.dim() if t.dim() else [1]
    if list(t.shape) == shape:
        shape = [1] + shape
    first = t.reshape(-1)[:1] if t.numel() else torch.zeros(1, dtype=t.dtype)
    return first.reshape(shape).clone()


def _extra_key(d):
    """`d` with one more key, holding a copy of its last value (so that a check of the values' types passes)."""
    keys = list(d)
    key = max(keys) + 1 if keys and all(type(k) is int for k in keys) else "extra"
    return type(d)([*d.items(), (key, d[keys[-1]] if keys else 0)])


def _every(value, applies, new):
    """`value` with everything in it that `applies` to replaced by the one object `new`."""
    if applies(value):
        return new
    if type(value) in (list, tuple):
        return type(value)(_every(v, applies, new) for v in value)
    if type(value) in DICTS:
        return type(value)((k, _every(v, applies, new)) for k, v in value.items())
    return value


def _holding(applies):
    """Applies to a list, tuple or dict with something in it that `applies` to."""
    return lambda v: type(v) in (list, tuple, *DICTS) and any(applies(x) for _, x in _places(v))


_is_float = lambda v: type(v) is float  # noqa: E731
_is_tensor = lambda v: type(v) is torch.Tensor  # noqa: E731
_is_float_tensor = lambda v: type(v) is torch.Tensor and (v.dtype.is_floating_point or v.dtype.is_complex)  # noqa: E731

# (kind, applies to, the mutated value), the most telling kinds first: a cell's budget is spread over them in order.
MUTATIONS = [
    # one object everywhere, as ranks that all return it (a set of NaNs made of one object holds one NaN)
    ("every float one NaN", _holding(_is_float), lambda v: _every(v, _is_float, math.nan)),
    ("every tensor one empty", _holding(_is_tensor), lambda v: _every(v, _is_tensor, torch.empty((0, 1, 1)))),
    ("empty (0, 1, 1)", _is_tensor, lambda t: torch.empty((0, 1, 1), dtype=t.dtype)),
    ("empty (0,)", _is_tensor, lambda t: torch.empty((0,), dtype=t.dtype)),
    ("broadcastable", _is_tensor, _broadcastable),
    ("NaN-filled", _is_float_tensor, lambda t: torch.full_like(t, math.nan)),
    ("inf-filled", _is_float_tensor, lambda t: torch.full_like(t, math.inf)),
    ("other dtype", lambda v: _is_tensor(v) and not v.dtype.is_complex, lambda t: t.to(_other_dtype(t))),
    ("nan", _is_float, lambda x: math.nan),
    ("inf", _is_float, lambda x: math.inf),
    ("-inf", _is_float, lambda x: -math.inf),
    ("float as int", lambda v: type(v) is float and math.isfinite(v) and v.is_integer(), int),
    ("int as float", lambda v: type(v) is int, float),
    ("int as bool", lambda v: type(v) is int, bool),
    ("bool as int", lambda v: type(v) is bool, int),
    ("bool as float", lambda v: type(v) is bool, float),
    ("missing key", lambda v: type(v) in DICTS and len(v) > 0, lambda d: type(d)(list(d.items())[:-1])),
    ("extra key", lambda v: type(v) in DICTS, _extra_key),
    ("reordered", _is_state_dict, lambda d: type(d)(list(d.items())[::-1])),
    ("empty list", lambda v: type(v) is list and len(v) > 0, lambda xs: []),
    ("truncated", lambda v: type(v) is list and len(v) > 1, lambda xs: xs[:-1]),
    ("one element repeated", lambda v: type(v) is list and len(v) > 1, lambda xs: [xs[0]] * len(xs)),
    ("list as tuple", lambda v: type(v) is list, tuple),
    ("tuple as list", lambda v: type(v) is tuple, list),
    ("Other", lambda v: True, lambda v: grading.Other("x")),
]


def _places(data, path=()):
    """(path, value) of every value in `data`, containers before what they hold."""
    yield path, data
    if type(data) in (list, tuple):
        for i, v in enumerate(data):
            yield from _places(v, path + (i,))
    elif type(data) in DICTS:
        for k, v in data.items():
            yield from _places(v, path + (k,))


def _at(data, path):
    for step in path:
        data = data[step]
    return data


def _replaced(data, path, new):
    """`data` with the value at `path` replaced by `new` (the containers on the way copied, the rest shared)."""
    if not path:
        return new
    step, rest = path[0], path[1:]
    if type(data) in (list, tuple):
        return type(data)(_replaced(v, rest, new) if i == step else v for i, v in enumerate(data))
    return type(data)((k, _replaced(v, rest, new) if k == step else v) for k, v in data.items())


def _identical(a, b) -> bool:
    """Exactly the same data: types, dtypes, shapes, bytes, key order (the codec's encoding of it is)."""
    return json.dumps(grading.encode(a)) == json.dumps(grading.encode(b))


def mutations(data, seed: str, budget: int = MAX_MUTATIONS):
    """Up to `budget` (kind, path, mutated data), none identical to `data`: the kinds taken in turn, each at places
    drawn (seeded) from all the places it applies to."""
    places = list(_places(data))
    queues = []
    for kind, applies, make in MUTATIONS:
        paths = [path for path, value in places if applies(value)]
        random.Random(f"{seed} {kind}").shuffle(paths)
        queues.append((kind, make, collections.deque(paths)))
    made = []
    while len(made) < budget and any(paths for _, _, paths in queues):
        for kind, make, paths in queues:
            while paths and len(made) < budget:
                path = paths.popleft()
                old = _at(data, path)
                new = make(old)
                if not _identical(old, new):
                    made.append((kind, path, _replaced(data, path, new)))
                    break
    return made


# ---- the tests -----------------------------------------------------------------------------------------


def test_mutations_cover_every_kind_and_leave_the_data_alone():
    data = {"state": collections.OrderedDict(w=torch.ones(2, 3), b=torch.zeros(3)),
            "runs": [(1, 0.5, True), (2, 2.0, False)], "name": "x"}
    before = json.dumps(grading.encode(data))
    made = mutations(data, "self-test", budget=1000)
    assert json.dumps(grading.encode(data)) == before, "the mutations must not change the honest data"
    assert {kind for kind, _, _ in made} == {kind for kind, _, _ in MUTATIONS}
    assert all(not _identical(data, mutated) for _, _, mutated in made)
    assert len(mutations(data, "self-test")) == MAX_MUTATIONS


@pytest.mark.parametrize("lesson, grade_id", CELLS, ids=[f"{lesson}-{grade_id}" for lesson, grade_id in CELLS])
def test_the_judge_rejects_degenerate_results(honest, preludes, lesson, grade_id):
    parts = judge.judged_cells(_solution(lesson))[grade_id]
    got = honest(lesson)[grade_id]
    _judge(preludes(lesson), parts, got)  # the honest results pass
    acceptable = ACCEPTABLE.get((lesson, grade_id), set())
    accepted = []
    for kind, path, mutated in mutations(got, f"{lesson} {grade_id}"):
        if (kind, path) in acceptable:
            continue
        try:
            _judge(preludes(lesson), parts, mutated)
        except Exception:  # noqa: BLE001 - any exception is a rejection, as graders/judge.py counts it
            continue
        accepted.append(f"{kind} at {list(path)}")
    assert not accepted, f"{lesson} {grade_id}: the judge accepted {len(accepted)} degenerate results: {accepted}"
