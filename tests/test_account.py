"""A running jail keeps its own account files (graders/jail_etc.py) while the machine changes its own: a hub or an
instructor adding a user (useradd renames a new /etc/passwd in) while a submission runs must not take the kernel's
account away. Before, torch_xla's import in such a kernel ended in "getpwuid(): uid not found" and lost the points
of every XLA-backed hidden test."""

import fcntl
import os
import shutil
import subprocess

import pytest

from graders import jail_etc, sandbox
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


def test_a_jail_starts_though_an_etc_entry_it_listed_is_gone():
    """useradd and vipw write /etc/group.PID, /etc/passwd.PID... for a moment (tests/test_exchange.py adds users while
    other tests grade): a jail that listed /etc while one was there must start once it is gone, without it. Before,
    bwrap stopped ("Can't find source path /etc/group.15019") and the submission was not graded (make test,
    2026-12-06)."""
    transient = f"/etc/group.course-test-{os.getpid()}"
    with open(transient, "w"):
        pass
    try:
        mounts = jail_etc.own_etc({})
    finally:
        os.unlink(transient)
    assert transient in mounts
    jail = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", *mounts, "ls", "/etc"],
                          capture_output=True, text=True, timeout=60)
    assert jail.returncode == 0, jail.stderr
    assert "passwd" in jail.stdout.split() and os.path.basename(transient) not in jail.stdout.split()
