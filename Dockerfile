# SciCodePile's Airflow image: Airflow 3 + the library, for every Airflow component and Celery worker.
FROM python:3.11-slim-bookworm

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/scicodepile/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/scicodepile/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    PYTHONPATH=/opt/scicodepile/include:/opt/scicodepile/plugins

RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap git util-linux ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/scicodepile
COPY requirements.txt constraints.txt pyproject.toml README.md ./
RUN pip install -r requirements.txt -c constraints.txt
COPY include ./include
COPY plugins ./plugins
COPY dags ./dags
COPY alembic.ini ./
# The last step fails the build, not the deployment, when the library or the plugin does not import.
RUN pip install --no-deps -e . && useradd --create-home --uid 50000 airflow \
 && mkdir -p /opt/airflow/logs && chown -R airflow /opt/airflow \
 && AIRFLOW_HOME=/tmp/airflow-check python -c "import scicodepile.report, scicodepile_airflow.context, \
scicodepile_airflow.ui.app" && rm -rf /tmp/airflow-check
USER airflow
WORKDIR /opt/airflow
EXPOSE 8080 5555
