"""What the scripts that import AI-Parrot share: finding an interpreter that has it, and
the scaffold its configuration layer needs.

AI-Parrot's configuration layer (navconfig) refuses to import without `env/dev/.env` and
`etc/config.ini` under $SITE_ROOT (in a venv it otherwise uses the venv's parent) and
creates folders there, so the scripts build that scaffold in a temporary directory,
point SITE_ROOT at it and chdir there before importing parrot.
"""

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_PYTHON = REPO / ".ci" / ".venv-parrot" / "bin" / "python"
INSTALL_HINT = (
    "ai-parrot is not importable. Install it:\n"
    f"  python3 -m venv {VENV_PYTHON.parent.parent}\n"
    f"  {VENV_PYTHON} -m pip install ai-parrot==1.2.4"
)


def ensure_parrot_python(script, on_missing=None):
    """Re-exec `script` with the venv python when this interpreter has no `parrot`;
    when that is not possible either, call `on_missing` (default: exit with the install
    hint)."""
    if importlib.util.find_spec("parrot") is not None:
        return
    if VENV_PYTHON.exists() and Path(sys.prefix).resolve() != VENV_PYTHON.parent.parent.resolve():
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(script).resolve()), *sys.argv[1:]])
    if on_missing is not None:
        on_missing()
    sys.exit(INSTALL_HINT)


def enter_parrot_scaffold():
    """Create env/dev/.env + etc/config.ini in a temp dir; SITE_ROOT + cwd point there."""
    root = Path(tempfile.mkdtemp(prefix="aiparrot-site-"))
    (root / "env" / "dev").mkdir(parents=True)
    (root / "env" / "dev" / ".env").write_text("")
    (root / "etc").mkdir()
    (root / "etc" / "config.ini").write_text("[general]\n")
    os.environ["SITE_ROOT"] = str(root)
    os.environ.setdefault("ENV", "dev")
    os.chdir(root)
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root
