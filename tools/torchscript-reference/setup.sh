#!/usr/bin/env bash
# Creates, once, the virtual environment that runs generate.py: inkan 0.5.2 and numpy. It
# installs no torch of its own: a .pth file puts the site-packages of the project's torch virtual
# environment (tools/setup.sh; ~5 GB with its CUDA libraries) on its path, and nothing is ever
# installed into that one. A second run checks and installs nothing.
# Prints the environment's python on stdout (the rest goes to stderr), so:
#
#   "$(tools/torchscript-reference/setup.sh)" tools/torchscript-reference/generate.py --check
#
#   KANBENCH_TORCHSCRIPT_VENV  where it lives (default: ~/.cache/kanbench/venv-torchscript-ref)
#   KANBENCH_VENV              the torch virtual environment (default: tools/setup.sh's)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../setup.sh
source "$here/../setup.sh" # KANBENCH_VENV, kanbench_log, kanbench_install_torch

INKAN_VERSION=0.5.2
NUMPY_VERSION=2.4.6
TORCHSCRIPT_VENV=${KANBENCH_TORCHSCRIPT_VENV:-${HOME:-/root}/.cache/kanbench/venv-torchscript-ref}

# inkan 0.5.2 requires only torch>=2.0 (numpy and matplotlib belong to its "viz" extra, which the
# generator does not use), so it goes in with --no-deps: pip must not resolve torch itself.
# numpy: torch warns on import without it; pinned to the pykan environment's.
inkan_ok() {
  "$TORCHSCRIPT_VENV/bin/python" - "$INKAN_VERSION" "$NUMPY_VERSION" 2>/dev/null <<'PY'
import importlib.metadata, sys
import inkan, numpy, torch
sys.exit(0 if importlib.metadata.version("inkan") == sys.argv[1]
         and numpy.__version__ == sys.argv[2] else 1)
PY
}

site_packages() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

if ! inkan_ok; then
  kanbench_install_torch # does nothing where it is installed
  kanbench_log "creating $TORCHSCRIPT_VENV (inkan $INKAN_VERSION, torch from $KANBENCH_VENV)"
  # Made by the torch environment's own Python, so torch's compiled modules fit this one.
  "$KANBENCH_VENV/bin/python" -m venv "$TORCHSCRIPT_VENV"
  site_packages "$KANBENCH_VENV" > "$(site_packages "$TORCHSCRIPT_VENV")/kanbench-torch.pth"
  pip=("$TORCHSCRIPT_VENV/bin/python" -m pip install -q --disable-pip-version-check)
  "${pip[@]}" --no-deps "inkan==$INKAN_VERSION"
  "${pip[@]}" "numpy==$NUMPY_VERSION"
  inkan_ok || { kanbench_log "inkan $INKAN_VERSION is not importable from $TORCHSCRIPT_VENV"; exit 1; }
fi
echo "$TORCHSCRIPT_VENV/bin/python"
