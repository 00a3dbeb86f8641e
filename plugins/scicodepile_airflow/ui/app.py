"""The FastAPI app behind the SciCodePile page, mounted by the Airflow API server at /scicodepile.

Plugin endpoints are not protected by Airflow automatically: every route depends on Airflow's own
``requires_access_view`` check, so the page is visible to exactly those who can see the Airflow UI
(the browser's Airflow session cookie, or a bearer token, authenticates).
"""

from __future__ import annotations

import logging

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse, JSONResponse

log = logging.getLogger(__name__)


def _access() -> list:
    try:
        from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
        from airflow.api_fastapi.core_api.security import requires_access_view

        return [Depends(requires_access_view(AccessView.WEBSITE))]
    except ImportError:  # pragma: no cover - only outside an Airflow API server
        return []


def _report():
    from scicodepile.report import corpus_report
    from scicodepile_airflow.hooks import library_settings

    return corpus_report(library_settings())


def create_app() -> FastAPI:
    """The app: ``/`` renders the page, ``/api/report`` returns the same numbers as JSON."""
    app = FastAPI(title="SciCodePile", dependencies=_access())

    @app.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        from scicodepile.errors import ConfigError
        from scicodepile_airflow.ui.page import render_error, render_page

        try:
            return HTMLResponse(render_page(_report()))
        except ConfigError as exc:  # e.g. the application database is not migrated yet
            log.warning("SciCodePile page: %s", exc)
            return HTMLResponse(render_error(str(exc)), status_code=503)

    @app.get("/api/report")
    def report() -> JSONResponse:
        return JSONResponse(_report().to_dict())

    return app


app = create_app()
