"""The prerequisite audit's hook (tests/prerequisite_audit.py), in every Python process the tests
start: they inherit PYTHONPATH with this folder, so Python imports this file at start-up.

A program of a prerequisite started by this process (or by one it starts in turn) is written to
$FEDLAB_AUDIT_LOG as "test id<TAB>marker", under the test that was running when the chain of
processes began ($FEDLAB_AUDIT_TEST, inherited like PYTHONPATH).
"""

import os
import sys

PROGRAMS = {"spark-submit": "spark", "gcs_server": "ray", "raylet": "ray", "initdb": "postgres",
            "pg_ctl": "postgres", "postgres": "postgres", "helm": "helm", "kubectl": "helm", "weed": "objectstore"}


def _hook(event, args):
    if event != "subprocess.Popen":
        return
    log, test = os.environ.get("FEDLAB_AUDIT_LOG"), os.environ.get("FEDLAB_AUDIT_TEST")
    if not (log and test):
        return
    executable, argv = args[0], args[1]
    program = executable or (argv if isinstance(argv, (str, bytes, os.PathLike)) else (argv or [""])[0])
    marker = PROGRAMS.get(os.path.basename(os.fsdecode(program)))
    if marker:
        with open(log, "a") as out:   # one short append: whole lines, even from several processes
            out.write(f"{test}\t{marker}\t{os.fsdecode(program)}\n")


def install():
    sys.addaudithook(_hook)


if os.environ.get("FEDLAB_AUDIT_LOG"):
    install()
