"""What a hidden test hands to the judge: a student's results as plain data.

The hidden tests of a graded cell are in three parts (see graders/judge.py):

    ### BEGIN HIDDEN TESTS
    _cases = [...]                                   # setup: hidden inputs, no student code
    # [collect]
    _got = grading.collect("split_sizes_tests", {...my_split_sizes(...)...})
    # [judge]
    assert ...                                       # only _got, the setup and trusted functions
    ### END HIDDEN TESTS

When a submission is graded, the student's kernel runs only the setup and the collect part: `collect`
publishes the results as JSON (never pickle) in an output of MIME type MIME. The judge part runs in a
separate, trusted process that never ran student code, on the data decoded from that output, with
references it computes itself. So nothing a student's code does to its own kernel (hooks, patched
torch, a shadowing module) can make a wrong answer pass: at most the data goes missing.

`collect` returns `decode(encode(value))`, so that a judge part run in the kernel (the solution notebooks
under nbval) sees exactly the data the judge sees. The codec keeps the types the tests check: bool, int,
float (inf and nan too), str, list, tuple, dict (key order and key types), torch tensors (dtype, shape,
values; always decoded on the CPU), dtypes and devices. Anything else decodes to an `Other`, which no
test accepts.
"""

from __future__ import annotations

import base64
import collections
import json
import math
import sys

from .language import say

MIME = "text/x-course-collected"
_type, _isinstance = type, isinstance  # as they were when the lesson imported this module, before any answer ran
# What a hidden test's judge part sets `_flag` to where it could not judge as it does elsewhere: graders/judge.py adds
# it to the cell's flags, for a person (the verdict stands).
JUDGED_WITHOUT_XLA = ("judged without torch_xla (this grading machine has none): the answer's XLA runs were not "
                      "checked as they are where torch_xla is installed; grade it again there")
MAX_BYTES = 8 * 2**20  # one collection (the lessons' largest is ~0.3 MB); more is a test's mistake or an attack
MAX_DEPTH = 32


class Other:
    """A value of a type the codec does not carry (its type's name is kept for messages)."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<a {self.type_name}, which the grader cannot carry>"

    def __eq__(self, other):
        return isinstance(other, Other) and other.type_name == self.type_name

    __hash__ = None


def _name(argument: str, value) -> None:
    if _type(value) is not str or not value:
        raise ValueError(say("{argument} must be a non-empty str, got {value!r}", argument=argument, value=value))


def encode(value, _depth: int = 0):
    """`value` as JSON-serialisable data (raises ValueError if it nests deeper than MAX_DEPTH)."""
    if _depth > MAX_DEPTH:
        raise ValueError(say("the value nests deeper than {max_depth} levels", max_depth=MAX_DEPTH))
    kind = _type(value)
    if value is None or kind in (bool, int):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind is str:
        try:
            value.encode("utf-8")
            return value if not value.startswith("$") else {"$str": value}
        except UnicodeEncodeError:  # a lone surrogate: keep it, but out of the notebook's UTF-8
            return {"$str_bytes": base64.b64encode(value.encode("utf-8", "surrogatepass")).decode()}
    if kind is list:
        return [encode(v, _depth + 1) for v in value]
    if kind is tuple:
        return {"$tuple": [encode(v, _depth + 1) for v in value]}
    if kind in (dict, collections.OrderedDict):
        return {"$dict": [[encode(k, _depth + 1), encode(v, _depth + 1)] for k, v in value.items()],
                "ordered": kind is collections.OrderedDict}
    torch = sys.modules.get("torch")
    if torch is not None:
        if _isinstance(value, torch.Tensor):
            return _encode_tensor(torch, value)
        if kind is torch.dtype:
            return {"$dtype": str(value).removeprefix("torch.")}
        if kind is torch.device:
            return {"$device": str(value)}
        if kind is torch.Size:
            return {"$tuple": [encode(int(v)) for v in value]}
    return {"$other": f"{kind.__module__}.{kind.__qualname__}"}


def _encode_tensor(torch, value):
    t = value.detach().to("cpu").contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return {"$tensor": {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                        "device": value.device.type, "data": base64.b64encode(raw).decode()}}


def decode(data, _depth: int = 0):
    """The value `encode` gave `data` for (tensors on the CPU)."""
    if _depth > MAX_DEPTH + 1:
        raise ValueError("the data nests too deep")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v, _depth + 1) for v in data]
    if type(data) is not dict or not data:
        raise ValueError(f"not collected data: {type(data).__name__}")
    tag = next(iter(data))
    body = data[tag]
    if tag == "$float":
        return float({"inf": "inf", "-inf": "-inf", "nan": "nan"}[body])
    if tag == "$str":
        return str(body)
    if tag == "$str_bytes":
        return base64.b64decode(body).decode("utf-8", "surrogatepass")
    if tag == "$tuple":
        return tuple(decode(v, _depth + 1) for v in body)
    if tag == "$dict":
        pairs = [(decode(k, _depth + 1), decode(v, _depth + 1)) for k, v in body]
        return collections.OrderedDict(pairs) if data.get("ordered") else dict(pairs)
    if tag == "$other":
        return Other(str(body))
    import torch

    if tag == "$dtype":
        dtype = getattr(torch, str(body), None)
        if type(dtype) is not torch.dtype:
            raise ValueError(f"not a dtype: {body!r}")
        return dtype
    if tag == "$device":
        return torch.device(str(body))
    if tag == "$tensor":
        return _decode_tensor(torch, body)
    raise ValueError(f"unknown tag {tag!r}")


def _decode_tensor(torch, body):
    dtype = getattr(torch, str(body["dtype"]), None)
    if type(dtype) is not torch.dtype:
        raise ValueError(f"not a dtype: {body['dtype']!r}")
    shape = [int(s) for s in body["shape"]]
    raw = bytearray(base64.b64decode(body["data"]))
    if math.prod(shape) * dtype.itemsize != len(raw):
        raise ValueError("a tensor's data does not match its shape")
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape).clone()


def dumps(name: str, value) -> str:
    """The text of one collection (ASCII JSON)."""
    text = json.dumps({"name": name, "data": encode(value), "kernel": kernel_changes()}, ensure_ascii=True,
                      allow_nan=False)
    if len(text) > MAX_BYTES:
        raise ValueError(say("the collected results take {size} bytes, more than {max_bytes}", size=len(text),
                             max_bytes=MAX_BYTES))
    return text


def loads(text: str) -> dict:
    """{"name", "data" (decoded), "kernel" (list of str)} from the text of one collection."""
    if not isinstance(text, str) or len(text) > MAX_BYTES:
        raise ValueError("not a collection")
    raw = json.loads(text)
    if type(raw) is not dict or type(raw.get("name")) is not str:
        raise ValueError("not a collection")
    changes = raw.get("kernel", [])
    return {"name": raw["name"], "data": decode(raw.get("data")),
            "kernel": [str(c)[:300] for c in changes][:20] if type(changes) is list else ["unreadable"]}


def collect(name: str, value):
    """Publish `value` (the student's results for a hidden test) for the judge; return it as the judge will see it."""
    _name("name", name)
    text = dumps(name, value)
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    if shell is not None:  # in a kernel; a plain process (tests/test_answers.py) only round-trips the data
        from IPython.display import publish_display_data

        publish_display_data({MIME: text, "text/plain": f"[results of {name} collected for the grader]"})
    return loads(text)["data"]


def kernel_changes() -> list[str]:
    """The changes to how this kernel runs cells that came from a notebook's own code (hooks, transformers,
    exception handlers, wrapped execution): reported to the grader, which flags the submission."""
    try:
        from IPython import get_ipython
    except ImportError:
        return []
    shell = get_ipython()
    if shell is None:
        return []
    found = []

    def from_notebook(fn) -> bool:
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None) or getattr(getattr(fn, "__call__", None), "__code__", None)
        module = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", "")
        filename = getattr(code, "co_filename", "") if code else ""
        return module == "__main__" or filename.startswith("<ipython-input") or "/ipykernel_" in filename

    for attr in _SHELL_LISTS:
        if any(from_notebook(t) for t in getattr(shell, attr, [])):
            found.append(f"a notebook added to {attr}")
    for event, callbacks in getattr(getattr(shell, "events", None), "callbacks", {}).items():
        if any(from_notebook(cb) for cb in callbacks):
            found.append(f"a notebook registered a {event} hook" if event in _EVENTS else "a notebook registered a hook")
    if getattr(shell, "custom_exceptions", ()):
        found.append("a notebook set a custom exception handler")
    for attr in _SHELL_METHODS:
        if attr in vars(shell):
            found.append(f"a notebook replaced the shell's {attr}")
    kernel = getattr(shell, "kernel", None)
    for attr in _KERNEL_METHODS:
        if kernel is not None and attr in vars(kernel):
            found.append(f"a notebook replaced the kernel's {attr}")
    for attr in _SYS_HOOKS:
        if from_notebook(getattr(sys, attr)):
            found.append(f"a notebook replaced sys.{attr}")
    publisher = getattr(shell, "display_pub", None)
    if publisher is not None and ("publish" in vars(publisher) or not _type(publisher).__module__.startswith(_KERNEL_CODE)):
        found.append(PUBLISHER_CHANGED)
    functions = sys.modules.get("IPython.core.display_functions")
    if functions is not None and from_notebook(getattr(functions, "publish_display_data", None)):
        found.append(PUBLISHER_CHANGED)
    if any(from_notebook(finder) for finder in list(sys.meta_path) + list(sys.path_hooks)):
        found.append("a notebook added an import hook")
    ours = sys.modules.get(__name__)
    for name, code in _OWN_CODE.items():
        if getattr(getattr(ours, name, None), "__code__", None) is not code:
            found.append(f"a notebook replaced helpers.grading.{name}")
    return found


_SHELL_LISTS = ("input_transformers_cleanup", "input_transformers_post", "ast_transformers")
_EVENTS = ("pre_execute", "pre_run_cell", "post_execute", "post_run_cell", "shell_initialized")
_SHELL_METHODS = ("showtraceback", "showsyntaxerror", "run_cell", "run_ast_nodes", "run_code")
_KERNEL_METHODS = ("do_execute", "execute_request", "send_response")
_SYS_HOOKS = ("excepthook", "displayhook")
_OWN_FUNCTIONS = ("collect", "dumps", "encode", "kernel_changes")
_KERNEL_CODE = ("ipykernel.", "IPython.")
PUBLISHER_CHANGED = "a notebook replaced how the kernel publishes outputs"
# Every sentence kernel_changes can say. The grader reads these reports from the kernel, which a submission
# controls: it keeps the ones in this list and puts its own words in place of anything else.
KERNEL_CHANGES = frozenset(
    [f"a notebook added to {a}" for a in _SHELL_LISTS] + [f"a notebook registered a {e} hook" for e in _EVENTS]
    + ["a notebook registered a hook", "a notebook set a custom exception handler", "a notebook added an import hook"]
    + [f"a notebook replaced the shell's {a}" for a in _SHELL_METHODS]
    + [f"a notebook replaced the kernel's {a}" for a in _KERNEL_METHODS]
    + [f"a notebook replaced sys.{a}" for a in _SYS_HOOKS]
    + [f"a notebook replaced helpers.grading.{n}" for n in _OWN_FUNCTIONS] + [PUBLISHER_CHANGED])
UNKNOWN_CHANGE = "the kernel reported a change in words the grader does not use (its report was tampered with)"


def in_grader_words(reports) -> list[str]:
    """The kernel's reports of changed hooks as the grader words them: a known sentence, or UNKNOWN_CHANGE."""
    if type(reports) is not list:
        return [UNKNOWN_CHANGE]
    return list(dict.fromkeys(r if type(r) is str and r in KERNEL_CHANGES else UNKNOWN_CHANGE for r in reports[:50]))


# The seed of the hidden inputs. A grading draws one per submission (graders/hidden_runs.py) and hands it to the
# hidden run and to the judge, never to the kernel of the student's notebook; anywhere else (nbval on the solutions,
# tests/test_answers.py) it is this fixed one.
FIXED_SEED = 0
_hidden_seed = FIXED_SEED


def use_hidden_seed(seed: int) -> None:
    """Draw the hidden inputs from `seed` from now on (the grader's secret seed of one submission)."""
    global _hidden_seed
    if _type(seed) is not int or seed < 0:
        raise ValueError(say("seed must be a non-negative int, got {seed!r}", seed=seed))
    _hidden_seed = seed


def hidden_random():
    """A random.Random for a hidden test's setup part: the same draws in the hidden run and in the judge, new ones
    for every submission graded, so that a recorded case is worth nothing the next time."""
    import random

    return random.Random(_hidden_seed)


class ReferenceFailed(RuntimeError):
    """A judge part's reference could not be computed (its launch or XLA run failed, or ran out of its time): the
    grader's own failure, which says nothing of the submission. The judge then gives no verdict at all (the submission
    is not graded: graders/judge.py), instead of failing the test whose reference it is."""


def _computed(key: str, compute):
    try:
        return compute()
    except Exception as error:  # noqa: BLE001 - whatever it was, it is the grader's, not the student's
        raise ReferenceFailed(f"the reference {key!r} could not be computed: {type(error).__name__}: {error}") from error


def reference(key: str, compute):
    """compute(): a judge part's expensive reference (launched processes, an XLA run). The judge keeps it,
    keyed by `key` (which must name every input), in GRADER_JUDGE_MEMO for the other submissions of the
    same grading run; anywhere else it is simply computed. If compute() raises, ReferenceFailed."""
    import hashlib
    import os

    _name("key", key)
    if not callable(compute):
        raise ValueError(say("{name} must be callable, got {kind}", name="compute", kind=_type(compute).__name__))
    folder = os.environ.get("GRADER_JUDGE_MEMO")
    if not folder:
        return decode(encode(_computed(key, compute)))
    path = os.path.join(folder, hashlib.sha256(key.encode()).hexdigest() + ".json")
    try:
        with open(path) as f:
            return decode(json.load(f))
    except (OSError, ValueError):
        pass
    data = encode(_computed(key, compute))
    partial = f"{path}.{os.getpid()}"
    with open(partial, "w") as f:
        json.dump(data, f)
    os.replace(partial, path)
    return decode(data)


def outcome(fn, *args, **kwargs):
    """("returned", value) or ("raised", the exception's class name): for tests of what a function raises."""
    if not callable(fn):
        raise ValueError(say("{name} must be callable, got {kind}", name="fn", kind=_type(fn).__name__))
    try:
        return ("returned", fn(*args, **kwargs))
    except Exception as error:  # noqa: BLE001 - which exception it was is the result
        return ("raised", type(error).__name__)


# What this module's own functions were when the lesson imported it: a notebook that swaps them is reported.
_OWN_CODE = {name: globals()[name].__code__ for name in _OWN_FUNCTIONS}
