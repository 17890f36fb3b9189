#!/usr/bin/env bash
# The hourly precompute + enrichment on a real Spark standalone cluster, compared with local[*].
#
# Starts a standalone master and two workers on 127.0.0.1 from the installed pyspark
# (spark-class ...deploy.master.Master / ...deploy.worker.Worker), prepares one small synthetic
# warehouse (ingest + FM + verifier), copies it twice, runs the seven stages with spark-submit
# once with --master spark://127.0.0.1:PORT and once with --master local[2], and compares every
# table written (row count + content hash, read with deltalake, no Spark). Stops the daemons it
# started, by PID, whatever happens.
#
# Shipping, as a real cluster needs it: the package goes to executors as an archive (--archives
# solaris.zip#solaris_pkg, unpacked in each executor's working directory and put on its workers'
# PYTHONPATH) and their Python is the dependency venv *without* our package installed, so an
# executor can only import `solaris` from what spark-submit shipped; the Delta JARs go with --jars.
# (--py-files would also put the zip first on the *driver's* path, where the package must be the
# checkout: it reads conf/ and sql/ next to it.)
#
#   bash bench/cluster.sh                 # needs `make setup` first
#   WORK=/tmp/x PORT=7177 bash bench/cluster.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/solaris-cluster}
PORT=${PORT:-7177}
DRIVER_PY=$ROOT/.venv/bin/python
SPARK_HOME=$("$DRIVER_PY" -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))")
export SPARK_HOME
# The dependency venv that ./.venv layers on: has torch/faiss/pyarrow, not our package.
DEPS_SITE=$(sed -n "s/.*addsitedir('\(.*\)').*/\1/p" "$ROOT"/.venv/lib/python3.11/site-packages/_solaris_deps.pth)
EXECUTOR_PY=$(cd "$DEPS_SITE/../../.." && pwd)/bin/python
JARS=$(ls "$ROOT"/jars/*.jar | paste -sd, -)
AS_OF=2026-01-09T23:00:00Z
SETTINGS=(
  --set synthetic.n_events=200000 --set synthetic.n_users=2000 --set synthetic.n_items=1000
  --set synthetic.days=10 --set synthetic.chunks=4 --set model.embedding_dim=32 --set model.history_length=16
  --set model.fm.d_model=32 --set "model.fm.tower=[64]" --set model.fm.id_buckets=8192
  --set model.training.max_epochs=1 --set precompute.candidates.lookback_hours=24
  --set precompute.candidates.per_user=20 --set spark.shuffle_partitions=4
)
# the hourly stages, in order, from the one pipeline definition (solaris.pipeline)
read -r -a STAGES <<< "$("$DRIVER_PY" -c 'from solaris.pipeline import STAGE_NAMES; print(" ".join(STAGE_NAMES))')"

rm -rf "$WORK" && mkdir -p "$WORK/logs"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  echo "stopped daemons: ${pids[*]:-none}"
}
trap cleanup EXIT

if (cd / && "$EXECUTOR_PY" -c "import solaris" 2>/dev/null); then
  echo "executor python $EXECUTOR_PY can already import solaris; the shipping check would prove nothing" >&2
  exit 2
fi

echo "== package for executors: $WORK/solaris.zip"
"$DRIVER_PY" - "$ROOT" "$WORK/solaris.zip" <<'EOF'
import sys, zipfile, pathlib
root, out = pathlib.Path(sys.argv[1]), sys.argv[2]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
    for source, target in (("solaris", "solaris"), ("jobs", "solaris/jobs"), ("udfs", "solaris/udfs")):
        for path in sorted((root / source).rglob("*.py")):
            archive.write(path, f"{target}/{path.relative_to(root / source)}")
print(f"{len(zipfile.ZipFile(out).namelist())} modules")
EOF

echo "== standalone master + 2 workers on 127.0.0.1:$PORT"
"$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$PORT" \
  --webui-port $((PORT + 1)) >"$WORK/logs/master.log" 2>&1 &
pids+=($!)
for n in 1 2; do
  SPARK_WORKER_DIR=$WORK/worker$n "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
    --host 127.0.0.1 --cores 1 --memory 3g --webui-port $((PORT + 1 + n)) --work-dir "$WORK/worker$n" \
    "spark://127.0.0.1:$PORT" >"$WORK/logs/worker$n.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 60); do
  [ "$(grep -c 'Registering worker' "$WORK/logs/master.log" 2>/dev/null || true)" -ge 2 ] && break
  sleep 1
done
grep -c 'Registering worker' "$WORK/logs/master.log" | grep -q 2 || { echo "workers did not register" >&2; exit 1; }
echo "master pid ${pids[0]}, worker pids ${pids[1]} ${pids[2]}"

echo "== prepare one warehouse (local): synthetic events, FM, verifier"
base=$WORK/base
"$DRIVER_PY" -m solaris.cli ingest --input synthetic --warehouse "$base" "${SETTINGS[@]}" --log-level WARNING
for role in fm vm; do
  "$DRIVER_PY" -m solaris.cli train-$role --as-of "$AS_OF" --warehouse "$base" "${SETTINGS[@]}" --log-level WARNING
done
cp -r "$base" "$WORK/local" && cp -r "$base" "$WORK/cluster"

submit() {  # submit <master> <warehouse> <stage>
  local master=$1 warehouse=$2 stage=$3 started workers_py=$DRIVER_PY shipping=()
  started=$(date +%s.%N)
  if [[ $master == spark://* ]]; then  # cluster executors: bare dependency venv + the shipped package
    workers_py=$EXECUTOR_PY
    shipping=(--archives "$WORK/solaris.zip#solaris_pkg" --conf spark.executorEnv.PYTHONPATH=solaris_pkg)
  fi
  PYSPARK_PYTHON=$workers_py PYSPARK_DRIVER_PYTHON=$DRIVER_PY "$ROOT/.venv/bin/spark-submit" \
    --master "$master" --jars "$JARS" "${shipping[@]}" \
    --conf spark.executor.memory=2g --conf spark.executorEnv.TZ=UTC \
    "$ROOT/jobs/$stage.py" --as-of "$AS_OF" --warehouse "$warehouse" "${SETTINGS[@]}" \
    >"$WORK/logs/$(basename "$warehouse")-$stage.log" 2>&1 \
    || { echo "$stage on $master failed, log:" >&2; tail -40 "$WORK/logs/$(basename "$warehouse")-$stage.log" >&2; exit 1; }
  printf "  %-16s %6.1fs  %s\n" "$stage" "$(awk -v a="$started" -v b="$(date +%s.%N)" "BEGIN{print b-a}")" "$master"
}

echo "== hourly cycle on the cluster (spark://127.0.0.1:$PORT)"
for stage in "${STAGES[@]}"; do submit "spark://127.0.0.1:$PORT" "$WORK/cluster" "$stage"; done
executors=$(grep -c "Launching executor" "$WORK/logs/master.log" || true)
echo "executors launched by the master over the run: $executors (2 per job, one per worker)"
echo "== the same cycle on local[2]"
for stage in "${STAGES[@]}"; do submit "local[2]" "$WORK/local" "$stage"; done

echo "== compare tables (deltalake, no Spark)"
"$DRIVER_PY" - "$WORK/local" "$WORK/cluster" <<'EOF'
import sys
import pandas as pd
from deltalake import DeltaTable

tables = ["candidates", "pair_embeddings", "pair_embeddings_log", "quarantine", "user_embeddings",
          "user_neighbors", "imputed_embeddings"]

def fingerprint(path):
    frame = DeltaTable(path).to_pandas()
    frame = frame.map(lambda v: v.hex() if isinstance(v, bytes) else v.tolist() if hasattr(v, "tolist") else v).astype(str)
    return len(frame), int(pd.util.hash_pandas_object(frame, index=False).sum() % (1 << 63))

local, cluster = sys.argv[1], sys.argv[2]
failed = False
for name in tables:
    a, b = fingerprint(f"{local}/{name}"), fingerprint(f"{cluster}/{name}")
    status = "equal" if a == b else "DIFFERENT"
    failed |= a != b
    print(f"  {name:<20} local rows={a[0]:>7} hash={a[1]:>20}  cluster rows={b[0]:>7} hash={b[1]:>20}  {status}")
print("cluster run equals local run" if not failed else "cluster run DIFFERS from local run")
sys.exit(1 if failed else 0)
EOF
