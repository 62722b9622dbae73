"""A running jail keeps its own account files (graders/jail_etc.py) while the machine changes its own: a hub or an
instructor adding a user (useradd renames a new /etc/passwd in) while a submission runs must not take the kernel's
account away. Before, torch_xla's import in such a kernel ended in "getpwuid(): uid not found" and lost the points
of every XLA-backed hidden test."""

import fcntl
import os
import shutil

import pytest

from graders import sandbox
from tests.test_jail import ACCOUNT, UID, _kernel, server  # noqa: F401  (server: the fixture)

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=f"no sandbox here: {sandbox.available()}")

HOSTS = r'''
import json
print(json.dumps(open("/etc/hosts").read()))
'''


def _replace_as_useradd_does(path: str) -> None:
    """A new file with the same content renamed over `path`, as shadow-utils' useradd and vipw write it, under
    their lock (lckpwdf's: tests/test_exchange.py adds users meanwhile)."""
    fresh = f"{path}.course-test"
    with open("/etc/.pwd.lock", "a") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        shutil.copy2(path, fresh)
        os.replace(fresh, path)


def test_the_machine_replacing_its_account_files_leaves_the_jails_alone(tmp_path_factory, server):  # noqa: F811
    with _kernel(tmp_path_factory.mktemp("account"), *server, uid=UID - 1) as jail:
        before = {"account": jail.run(ACCOUNT), "hosts": jail.run(HOSTS)}
        for name in ("passwd", "group", "hosts"):
            _replace_as_useradd_does(f"/etc/{name}")
        assert {"account": jail.run(ACCOUNT), "hosts": jail.run(HOSTS)} == before
    assert before["account"] == {"uid": UID - 1, "user": "grader", "group": "grader", "getuser": "grader"}
    assert "localhost" in before["hosts"]
