#!/usr/bin/env bash
# `make demo`: run the pipeline, stage after stage, on the embedded defaults through real Airflow DAG
# runs (`airflow dags test`: in-process, SQLite metadata, no broker), then say what each stage
# produced and where.  Embedded defaults: SQLite application database and a local object store
# under ./var, the "sample" source (a few PyPI source distributions), no LLM (labelled fallbacks).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/airflow-env.sh
LOGS="$SCICODEPILE_VAR_DIR/logs"
mkdir -p "$LOGS"

echo "==> migrating Airflow's metadata database (SQLite under $AIRFLOW_HOME)"
airflow db migrate >"$LOGS/airflow-db-migrate.log" 2>&1 || { tail -20 "$LOGS/airflow-db-migrate.log"; exit 1; }
python -m scicodepile_airflow.pools
echo "==> migrating the application database"
scicodepile -q db upgrade

DAGS=${DEMO_DAGS:-$(python -m scicodepile_airflow.demo_dags)}
declare -A SECONDS_OF
for dag in $DAGS; do
  echo "==> airflow dags test $dag"
  log="$LOGS/demo-$dag.log"
  start=$(date +%s)
  if ! airflow dags test "$dag" >"$log" 2>&1; then
    tail -40 "$log"; echo "DAG $dag failed; full log: $log"; exit 1
  fi
  state=$(python -m scicodepile_airflow.last_run_state "$dag")
  SECONDS_OF[$dag]=$(( $(date +%s) - start ))
  echo "    $dag: $state in ${SECONDS_OF[$dag]}s (log: $log)"
  [ "$state" = "success" ] || { tail -40 "$log"; exit 1; }
done

echo
echo "==> what each stage produced"
python -m scicodepile.report
echo
python -m scicodepile.summary
echo
echo "Airflow home (metadata, task logs): $AIRFLOW_HOME"
echo "SciCodePile page: run 'source scripts/airflow-env.sh && airflow api-server --port 8080', open"
echo "  http://127.0.0.1:8080/plugin/scicodepile (or http://127.0.0.1:8080/scicodepile/)"
