"""Registers the SciCodePile page with Airflow (the only plugins/ file Airflow loads itself;
see plugins/scicodepile_airflow/.airflowignore)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from scicodepile_airflow.ui.app import app

URL_PREFIX = "/scicodepile"


class SciCodePilePlugin(AirflowPlugin):
    """The SciCodePile corpus page: a FastAPI app, embedded in the UI's navigation."""

    name = "scicodepile"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "SciCodePile corpus"}]
    external_views = [
        {
            "name": "SciCodePile",
            "href": "scicodepile/",  # relative: works behind a reverse proxy with a base URL
            "url_route": "scicodepile",
            "destination": "nav",
            "category": "browse",
        }
    ]
