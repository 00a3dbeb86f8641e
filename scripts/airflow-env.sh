# Source me: environment for running Airflow on the embedded defaults (SQLite, local store, no broker).
# Everything lives under ./var so a fresh clone needs nothing else.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$_root/var/airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$_root/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$_root/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__UNIT_TEST_MODE=False
export AIRFLOW__LOGGING__BASE_LOG_FOLDER="$AIRFLOW_HOME/logs"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True
export AIRFLOW__API_AUTH__JWT_SECRET="${AIRFLOW__API_AUTH__JWT_SECRET:-embedded-demo-secret-not-for-production}"
export PYTHONPATH="$_root/include:$_root/plugins${PYTHONPATH:+:$PYTHONPATH}"
export SCICODEPILE_VAR_DIR="${SCICODEPILE_VAR_DIR:-$_root/var}"
export PATH="$_root/.venv/bin:$PATH"
mkdir -p "$AIRFLOW_HOME"
unset _root
