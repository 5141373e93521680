"""Run commands against a throwaway OpenSearch node (own folder, free port), stopped and removed at the end.

Run from the repository root::

    python -m experiments.with_opensearch -- semdup eval semeval --set dev --method bundle:artifacts/learn/semeval

Each argument after ``--`` that is ``;`` separates commands; every command gets ``SEMDUP_OPENSEARCH_URL`` of the
node. For service-path figures without touching the shared default node (other sessions' tests reuse it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    from semdup.devstack.local_opensearch import LocalOpenSearch
    from semdup.devstack.local_process import any_free_port

    argv = sys.argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    commands, current = [], []
    for a in argv:
        if a == ";":
            commands.append(current)
            current = []
        else:
            current.append(a)
    if current:
        commands.append(current)
    state = Path(tempfile.mkdtemp(prefix="learn-research-os-"))
    node = LocalOpenSearch(state_dir=state, port=any_free_port())
    rc = 0
    try:
        url = node.start(timeout=300)
        env = {**os.environ, "SEMDUP_OPENSEARCH_URL": url}
        for cmd in commands:
            print("$ " + " ".join(cmd), flush=True)
            rc = subprocess.call(cmd, env=env) or rc
    finally:
        node.stop()
        shutil.rmtree(state, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
