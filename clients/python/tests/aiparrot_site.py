"""AI-Parrot's import scaffold for the unit tests that import ``parrot``: its
configuration layer (navconfig) needs ``env/<ENV>/.env`` and ``etc/config.ini`` under
``SITE_ROOT`` before anything of ``parrot`` is imported."""

import os
import tempfile
from pathlib import Path


def enter():
    """Creates a throwaway ``SITE_ROOT`` and moves there, unless one is set already."""
    if "SITE_ROOT" in os.environ:
        return
    root = Path(tempfile.mkdtemp(prefix="aiparrot-site-"))
    (root / "env" / "dev").mkdir(parents=True)
    (root / "env" / "dev" / ".env").write_text("")
    (root / "etc").mkdir()
    (root / "etc" / "config.ini").write_text("[general]\n")
    os.environ["SITE_ROOT"] = str(root)
    os.environ.setdefault("ENV", "dev")
    os.chdir(root)
