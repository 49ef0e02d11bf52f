#!/usr/bin/env bash
# Creates, once, the virtual environment that runs generate.py: pykan 0.2.8 and what `import kan`
# needs. It installs no torch of its own: a .pth file puts the site-packages of the project's
# torch virtual environment (tools/setup.sh; ~5 GB with its CUDA libraries) on its path, and
# nothing is ever installed into that one. A second run checks and installs nothing.
# Prints the environment's python on stdout (the rest goes to stderr), so:
#
#   "$(tools/pykan-reference/setup.sh)" tools/pykan-reference/generate.py --check
#
#   KANBENCH_PYKAN_VENV  where it lives (default: ~/.cache/kanbench/venv-pykan-0.2.8)
#   KANBENCH_VENV        the torch virtual environment (default: tools/setup.sh's)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../setup.sh
source "$here/../setup.sh" # KANBENCH_VENV, kanbench_log, kanbench_install_torch

PYKAN_VERSION=0.2.8
PYKAN_VENV=${KANBENCH_PYKAN_VENV:-${HOME:-/root}/.cache/kanbench/venv-pykan-$PYKAN_VERSION}
# kan/__init__.py imports all of pykan (plots, tables, symbolic regression), so `import kan`
# needs these although the fixtures use only KANLayer and the spline functions. Pinned to the
# versions the generator was checked with; sympy comes from the torch environment.
PACKAGES=("pykan==$PYKAN_VERSION" numpy==2.4.6 scikit-learn==1.9.1 matplotlib==3.11.2
          pandas==3.1.1 tqdm==4.70.1 pyyaml==6.0.4)

pykan_ok() {
  "$PYKAN_VENV/bin/python" - "$PYKAN_VERSION" 2>/dev/null <<'PY'
import importlib.metadata, sys
import kan
sys.exit(0 if importlib.metadata.version("pykan") == sys.argv[1] else 1)
PY
}

site_packages() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

if ! pykan_ok; then
  kanbench_install_torch # does nothing where it is installed
  kanbench_log "creating $PYKAN_VENV (pykan $PYKAN_VERSION, torch from $KANBENCH_VENV)"
  # Made by the torch environment's own Python, so torch's compiled modules fit this one.
  "$KANBENCH_VENV/bin/python" -m venv "$PYKAN_VENV"
  site_packages "$KANBENCH_VENV" > "$(site_packages "$PYKAN_VENV")/kanbench-torch.pth"
  # pip sees torch and sympy through the .pth file and leaves them where they are.
  "$PYKAN_VENV/bin/python" -m pip install -q --disable-pip-version-check "${PACKAGES[@]}"
  pykan_ok || { kanbench_log "pykan $PYKAN_VERSION is not importable from $PYKAN_VENV"; exit 1; }
fi
echo "$PYKAN_VENV/bin/python"
