"""What both end-to-end drivers share: the stdout protocol and AI-Parrot's import
scaffold.

Importing this module takes over stdout: the real stdout carries only the JSON protocol
lines written by `emit`, and anything else the process prints (libraries' loggers) goes
to stderr.
"""

import atexit
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

_PROTO = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr


def emit(obj):
    _PROTO.write(json.dumps(obj, default=str) + "\n")
    _PROTO.flush()


def enter_parrot_scaffold():
    """AI-Parrot (navconfig) needs env/dev/.env and etc/config.ini under SITE_ROOT."""
    root = Path(tempfile.mkdtemp(prefix="aiparrot-site-"))
    (root / "env" / "dev").mkdir(parents=True)
    (root / "env" / "dev" / ".env").write_text("")
    (root / "etc").mkdir()
    (root / "etc" / "config.ini").write_text("[general]\n")
    os.environ["SITE_ROOT"] = str(root)
    os.environ.setdefault("ENV", "dev")
    os.chdir(root)
    atexit.register(shutil.rmtree, root, ignore_errors=True)
