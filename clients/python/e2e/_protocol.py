"""What the end-to-end drivers share: the stdout protocol, AI-Parrot's import
scaffold, the Redis check and the way a driver runs.

Importing this module takes over stdout: the real stdout carries only the JSON protocol
lines written by `emit`, and anything else the process prints (libraries' loggers) goes
to stderr.
"""

import asyncio
import atexit
import json
import logging
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

_PROTO = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr


def emit(obj):
    _PROTO.write(json.dumps(obj, default=str) + "\n")
    _PROTO.flush()


def start(**required):
    """Starts a driver: ``fatal`` (exit 3) naming the environment variables it needs
    that are empty (``required``: each name and its value), then AI-Parrot's scaffold,
    and the libraries' logs to stderr. Call before anything imports ``parrot``."""
    missing = [name for name, value in required.items() if not value]
    if missing:
        names = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
        verb = "is" if len(missing) == 1 else "are"
        emit({"event": "fatal", "error": f"{names} {verb} required"})
        sys.exit(3)
    enter_parrot_scaffold()
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="driver %(asctime)s %(levelname)s %(name)s: %(message)s",
    )


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


async def skip_without_redis(url):
    """Says ``skip`` and exits 4 when Redis at ``url`` does not answer: the test decides
    whether that is allowed (``HITL_REQUIRE_AIPARROT``)."""
    import redis.asyncio as aioredis

    r = aioredis.from_url(url)
    try:
        await asyncio.wait_for(r.ping(), 5)
    except Exception as exc:  # noqa: BLE001
        emit({"event": "skip", "reason": f"Redis at {url} is not reachable: {exc!r}"})
        sys.exit(4)
    finally:
        await r.aclose()


def run(main):
    """Runs a driver's ``main()``; whatever it raises (but a deliberate exit) is said as
    ``fatal`` and exits 3, so the test shows the driver's own failure."""
    try:
        asyncio.run(main())
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001
        traceback.print_exc()
        emit({"event": "fatal", "error": f"{type(exc).__name__}: {exc}"})
        sys.exit(3)
