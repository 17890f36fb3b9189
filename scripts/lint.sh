#!/usr/bin/env bash
# Static checks, run by `make lint` and so by `make test`: ruff (ruff.toml) over the code, DAGs,
# benchmarks and tests, then mypy (mypy.ini) over the installed namespace `solaris`.
# RUFF / MYPY override the tools (default: this clone's .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUFF=${RUFF:-$ROOT/.venv/bin/ruff}
MYPY=${MYPY:-$ROOT/.venv/bin/mypy}

"$RUFF" check .

# mypy cannot follow the editable install's import hook (solaris.jobs -> jobs/, solaris.udfs -> udfs/),
# so it checks the package through a tree of symlinks with the installed layout: .venv/typecheck/solaris
# (inside this clone's own .venv, so the checkout gets no build/ folder: the wheel test checks that).
tree=.venv/typecheck
rm -rf "$tree/solaris"
mkdir -p "$tree/solaris"
for entry in solaris/*; do
  case "$entry" in */__pycache__) continue ;; esac
  ln -s "$ROOT/$entry" "$tree/solaris/"
done
ln -s "$ROOT/jobs" "$tree/solaris/jobs"
ln -s "$ROOT/udfs" "$tree/solaris/udfs"
cd "$tree"
"$MYPY" --config-file "$ROOT/mypy.ini" -p solaris
