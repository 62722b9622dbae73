"""Every piece of Python a cell makes IPython run, as syntax trees for graders/audit.py to read.

IPython runs more than a cell's Python: its own transformer turns magics and shell escapes into calls first, and
those calls run code held in strings. A cell magic's body (`%%time`, `%%capture`, `%%timeit`, `%%debug`) is a cell
of its own; the line of `%time`, `%timeit`, `%debug` is a statement after its options; `%config`'s line is run as
`cfg.` + line; and every `{...}` or `$name` in the line of a magic or a shell escape is evaluated before the line
is used (InteractiveShell.var_expand). String annotations are code too (typing evaluates them), and so is the text
a program start hands a child interpreter (`python -c TEXT`, read by the audit). A piece nested deeper than
DEPTH is not read: UNREADABLE stands for it, and the audit flags it.
"""

from __future__ import annotations

import ast
import re

DEPTH = 8
# Magics that run their cell, or their line after the options, as Python.
CODE_MAGICS = {"time", "timeit", "capture", "debug", "prun", "pdb"}
MAGIC_CALLS = {"run_line_magic", "run_cell_magic", "system", "getoutput"}
UNREADABLE = ast.Module(body=[ast.Expr(ast.Name("__unreadable_code__", ast.Load()))], type_ignores=[])


def trees(source: str, depth: int = 0) -> list[ast.Module]:
    """The cell and every piece of Python IPython would run for it, parsed (none if it does not compile)."""
    if depth > DEPTH:
        return [UNREADABLE]
    tree = parse(transform(source))
    if tree is None:  # a cell that does not compile runs nothing
        return []
    found = [tree]
    for node in ast.walk(tree):
        found += [piece for text in strings_run(node) for piece in trees(text, depth + 1)]
        found += [piece for text in annotations(node) for piece in expressions(text)]
    return found


def transform(source: str) -> str:
    """The Python IPython runs for a cell: its own transformer turns magics and shell escapes into calls."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - without IPython (or on input it refuses) the cell is read as written
        return source


def parse(source: str):
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def expressions(text: str) -> list[ast.Module]:
    """`text` as an expression IPython would evaluate, as a one-statement module (none if it does not parse)."""
    try:
        expression = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return [ast.Module(body=[ast.Expr(expression.body)], type_ignores=[])]


def magic_call(node) -> tuple[str, str, str | None] | None:
    """(what, line, body) of a call as IPython writes a magic or shell escape, its arguments literal: what is the
    magic's name, or "!" for a shell escape; body is a cell magic's cell. None for any other call."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MAGIC_CALLS):
        return None
    receiver = node.func.value
    if not (isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "get_ipython"):
        return None
    args = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in node.args]
    if node.func.attr in ("system", "getoutput"):
        return ("!", args[0], None) if len(args) == 1 and args[0] is not None else None
    wanted = 3 if node.func.attr == "run_cell_magic" else 2
    if len(args) != wanted or None in args or node.keywords:
        return None
    return args[0], args[1], args[2] if wanted == 3 else None


def strings_run(node) -> list[str]:
    """The texts a magic or shell-escape call runs as Python: the fields its line expands, its code."""
    magic = magic_call(node)
    if magic is None:
        return []
    what, line, body = magic
    texts = expanded_fields(line)
    if what == "config":
        texts.append("cfg." + line)
    elif what in CODE_MAGICS:
        texts += statements_after_options(line)
        if body is not None:
            texts.append(body)
    return texts


def expanded_fields(line: str) -> list[str]:
    """What IPython's DollarFormatter evaluates in a line: each `{field}` and `$name`, read as far as the line
    parses (the fields before a malformed one are evaluated before it fails)."""
    try:
        from IPython.utils.text import DollarFormatter
    except ImportError:
        return []
    fields = []
    try:
        for _, name, spec, _ in DollarFormatter().parse(line):
            if name:
                fields.append(f"{name}:{spec}" if spec else name)
    except (ValueError, IndexError):
        pass
    return fields


def statements_after_options(line: str) -> list[str]:
    """The line of a code magic from each word on: whatever its options take, the statement it runs is one of them."""
    starts = [word.start() for word in re.finditer(r"\S+", line)]
    return [line[start:] for start in starts if parse(line[start:]) is not None]


def annotations(node) -> list[str]:
    """String annotations, which typing.get_type_hints evaluates as code."""
    found = []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        found = [node.returns] + [a.annotation for a in (*node.args.posonlyargs, *node.args.args,
                                                         *node.args.kwonlyargs, node.args.vararg, node.args.kwarg) if a]
    elif isinstance(node, ast.AnnAssign):
        found = [node.annotation]
    return [a.value for a in found if isinstance(a, ast.Constant) and isinstance(a.value, str)]
