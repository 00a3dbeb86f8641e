#!/usr/bin/env bash
# `make demo`: run the pipeline on the embedded defaults through real Airflow DAG runs
# (`airflow dags test`: in-process, SQLite metadata, no broker), then say where the outputs are.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/airflow-env.sh
mkdir -p var/logs

echo "==> migrating Airflow's metadata database (SQLite under var/airflow)"
airflow db migrate >var/logs/airflow-db-migrate.log 2>&1 || { tail -20 var/logs/airflow-db-migrate.log; exit 1; }
python -m scicodepile_airflow.pools
echo "==> migrating the application database"
scicodepile -q db upgrade

DAGS=${DEMO_DAGS:-$(python -m scicodepile_airflow.demo_dags)}
for dag in $DAGS; do
  echo "==> airflow dags test $dag"
  log=var/logs/demo-$dag.log
  if ! airflow dags test "$dag" >"$log" 2>&1; then
    tail -40 "$log"; echo "DAG $dag failed; full log: $log"; exit 1
  fi
  state=$(python -m scicodepile_airflow.last_run_state "$dag")
  echo "    $dag: last run state = $state (log: $log)"
  [ "$state" = "success" ] || { tail -40 "$log"; exit 1; }
done
echo
python -m scicodepile.summary
