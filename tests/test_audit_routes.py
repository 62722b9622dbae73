"""The audit reads values, not spellings (graders/audit.py, audit_values.py, audit_source.py): a forbidden route
is flagged however it is written — through any binding, by a name spelled as a string, in code IPython runs from
a string, or by starting a program — and what students honestly write is not."""

import pytest

from graders import audit

# (exercise, source): each reaches what the exercise forbids, a reference, the machinery or a program.
ROUTES = [
    # getattr and its kin with a literal public name, checked against the lists
    ("split_sizes", "f = getattr(torch, 'chunk')"),
    ("split_sizes", "f = getattr(torch.Tensor, 'chunk')"),
    ("average", "f = getattr(ddp, 'reference_train')"),
    ("average", "import helpers\nf = getattr(getattr(helpers, 'ddp'), 'reference_train')"),
    ("quiz", "import sys\nm = getattr(sys, 'modules')"),
    ("split_sizes", "import operator\nf = operator.attrgetter('chunk')"),
    ("quiz", "import operator\nf = operator.attrgetter('_C')(torch)"),
    ("split_sizes", "from operator import methodcaller\nf = methodcaller('chunk', 2)"),
    ("average", "from operator import attrgetter as a\nf = a('reference' + '_train')"),
    # aliases through any binding
    ("average", "def f(m):\n    return m.reference_train\nf(ddp)"),
    ("average", "def f(m=ddp):\n    return m.reference_train"),
    ("average", "def f(ddp=ddp):\n    return ddp.reference_train()"),
    ("average", "m = (n := ddp)\nn.reference_train"),
    ("average", "if (m := ddp):\n    m.reference_train"),
    ("average", "modules = [ddp]\nmodules[0].reference_train"),
    ("average", "table = {'m': ddp}\ntable['m'].reference_train"),
    ("average", "for m in (ddp,):\n    m.reference_train"),
    ("average", "a, b = ddp, 1\na.reference_train"),
    ("average", "m = 0 or ddp\nm.reference_train"),
    ("average", "m = ddp if True else None\nm.reference_train"),
    ("average", "x = vars(ddp)['reference_train']"),
    ("average", "from functools import partial\nf = partial(getattr, ddp)('reference_train')"),
    ("average", "import functools\nf = functools.reduce(getattr, ['reference_train'], ddp)"),
    ("average", "def later():\n    return m.reference_train\n"),  # bound in a later cell (below)
    # builtins under any alias
    ("quiz", "e = eval\ne('1')"),
    ("quiz", "g = getattr\ng(torch, '_C')"),
    ("quiz", "run = [exec][0]\nrun('1')"),
    ("quiz", "i = __import__\ni('subprocess')"),
    ("quiz", "o = open\no('helpers.py', 'w')"),
    # strings IPython runs
    ("average", "%%time\nddp.reference_train()"),
    ("average", "%%capture out\nddp.reference_train()"),
    ("average", "%%timeit -n1 -r1\nddp.reference_train()"),
    ("average", "%time ddp.reference_train()"),
    ("average", "%timeit -n 1 -r 1 ddp.reference_train()"),
    ("quiz", "%%time\n%%capture\nimport subprocess"),
    ("quiz", "%config InlineBackend.figure_format = __import__('subprocess')"),
    ("quiz", "%config InlineBackend.figure_format = 'retina'; import subprocess"),
    ("average", "!pip install {ddp.reference_train()}"),
    ("average", "%pip install $ddp.reference_train"),
    ("quiz", "%matplotlib {__import__('sys').modules}"),
    ("average", "def f(x: 'ddp.reference_train()'):\n    pass"),
    # every way of starting a program, and the text handed to a child interpreter
    ("quiz", "import os\nos.posix_spawn('/bin/sh', ['sh'], {})"),
    ("quiz", "import os\nos.posix_spawnp('sh', ['sh'], {})"),
    ("quiz", "import os\nos.execv('/bin/sh', ['sh'])"),
    ("quiz", "import os\nos.execlp('sh', 'sh')"),
    ("quiz", "import os\nos.spawnv(os.P_WAIT, '/bin/sh', ['sh'])"),
    ("quiz", "from os import execv as run\nrun('/bin/sh', ['sh'])"),
    ("quiz", "import os\nrun = os.system\nrun('ls')"),
    ("quiz", "import pty\npty.spawn('sh')"),
    ("quiz", "import multiprocessing as m\nm.set_executable('/bin/sh')"),
    ("quiz", "import asyncio\nasyncio.create_subprocess_exec('ls')"),
    ("quiz", "import ctypes"),
    ("average", "import os, sys\nos.system(sys.executable + \" -c 'x'\")\n"
                "os.execv(sys.executable, [sys.executable, '-c', 'import helpers.ddp as d; d.reference_train()'])"),
    ("average", "!python -c 'from helpers.ddp import reference_train'"),
    # a module reached through another module's attributes, by what it is (graders/audit.py real_path)
    ("quiz", "import numpy as np\napi = np.ctypeslib.ctypes.pythonapi"),
    ("quiz", "torch.serialization.pickle.loads(b'')"),
    ("quiz", "import traceback\nsource = traceback.linecache.cache"),
    ("quiz", "import shutil\nshutil.os.system('ls')"),
    ("quiz", "modules = os.sys.modules"),
    ("average", "import helpers.launch\nf = helpers.launch.os.sys.modules['helpers.ddp']"),
    # native code and pickles, which run code the audit cannot read
    ("quiz", "import numpy as np\nlib = np.ctypeslib.load_library('libc', '/lib')"),
    ("quiz", "torch.ops.load_library('/tmp/x.so')"),
    ("quiz", "from torch.utils import cpp_extension"),
    ("quiz", "torch.load('x.pt', weights_only=False)"),
    ("quiz", "options = {'weights_only': False}\ntorch.load('x.pt', **options)"),
    ("quiz", "import numpy as np\nnp.load('x.npy', allow_pickle=True)"),
    ("quiz", "import copyreg"),
    # what a new program or interpreter runs before its first line
    ("quiz", "os.environ['LD_PRELOAD'] = '/tmp/x.so'"),
    ("quiz", "os.environ.update({'PYTHONSTARTUP': 'x.py'})"),
    ("quiz", "key = 'LD_' + 'PRELOAD'\nos.environ[key] = 'x'"),
    ("quiz", "os.environ.pop('COURSE_REFUSAL', None)"),
    ("quiz", "os.putenv('PYTHONPATH', '/tmp')"),
    ("quiz", "sys.path.insert(0, '/tmp')"),
    ("quiz", "import sys as s\ns.path.append('/tmp')"),
    ("quiz", "import pathlib\npathlib.Path('/tmp/x.pth').write_text('import os')"),
    ("quiz", "torch.save({}, 'sitecustomize.py')"),
]
LATER_CELL = "m = ddp"


@pytest.mark.parametrize("exercise, source", ROUTES, ids=[f"{e}-{i}" for i, (e, _) in enumerate(ROUTES)])
def test_a_route_spelled_any_way_is_flagged(exercise, source):
    cells = [("the answer", source, audit.FORBIDDEN_IN.get(exercise, set())), ("code cell 9", LATER_CELL, set())]
    assert any(f.startswith("the answer: ") for f in audit.audit(cells)), source


def test_a_childs_code_is_read_for_what_it_reaches_not_only_flagged_as_a_program():
    source = "import os, sys\nos.execv(sys.executable, [sys.executable, '-c', 'import helpers.ddp as d; d.reference_train()'])"
    flags = audit.audit([("c", source, set())])
    assert any("reference implementations" in f for f in flags), flags


def test_code_nested_in_strings_past_any_depth_is_flagged_not_skipped():
    source = "x = 1\n"
    for _ in range(12):
        source = "%%time\n" + source
    assert any("too deep" in f for f in audit.audit([("c", source, set())]))


HONEST = [
    "%time result = my_split_sizes(10, 3)",
    "%%time\nresult = my_split_sizes(10, 3)",
    "%%capture\nimport warnings",
    "%timeit -n 10 sorted({3, 1, 2})",
    "!pip install -q tqdm",
    "%config InlineBackend.figure_format = 'retina'",
    "def average_gradients(model, data=None):\n    for p in model.parameters():\n        pass\n    return data",
    "def f(torch_module):\n    return 1\nf(torch.float32)",
    "print(torch, type(torch).__name__, isinstance(torch, object))",
    "sizes = [len(piece) for piece in torch.arange(10).split(4)]",
    "m = getattr(model, 'module', model)\nfor name in ('weight', 'bias'):\n    getattr(m, 'fc')",
    "import numpy as np\nrng = np.random\nx = rng.default_rng(0)",
    "def f(x: 'torch.Tensor') -> 'torch.Tensor':\n    return x",
    "os.environ['MASTER_PORT'] = '29500'\nos.environ.setdefault('OMP_NUM_THREADS', '1')",
    "state = torch.load(path)\nstate = torch.load(path, weights_only=True, map_location='cpu')",
    "torch.save(model.state_dict(), 'checkpoint.pt')\nprint(os.path.join('a', 'b'))",
    "import numpy as np\nx = np.load('x.npy')\ny = np.random.default_rng(0).normal(size=3)",
    "from torch.distributed.fsdp import fully_shard\nimport torch.distributed.checkpoint as dcp",
]


@pytest.mark.parametrize("source", HONEST)
def test_honest_uses_of_magics_bindings_and_getattr_are_not_flagged(source):
    assert audit.audit([("c", source, audit.FORBIDDEN_IN["split_sizes"])]) == []


@pytest.mark.parametrize("lesson", ["01-dataparallel", "02-ddp", "03-amp", "04-accelerate-tpu"])
def test_the_turkish_edition_is_not_flagged(lesson):
    import nbformat

    from conftest import REPO
    from graders import judge

    solution = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    released = nbformat.read(REPO / "notebooks" / "tr" / lesson / f"{lesson}.ipynb", as_version=4)
    assert audit.audit(judge.student_cells(solution, released), audit.course_modules(solution)) == []
