"""The SciCodePile page in the Airflow UI: a real API server loads the plugin, headless Chromium
(Debian's ``chromium``) renders the page, and the page shows the counts seeded into a fresh
application database."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cluster import AirflowCluster, start_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
]


def _seed(settings) -> None:
    """A small corpus with known numbers: 3 domains, 2 languages, 3 rejection reasons."""
    from scicodepile.db import record_rejection, session_scope, upsert
    from scicodepile.db.models import Artifact, File, Repository, Snapshot

    repos = [
        ("astro/a", "astronomy", "kept"),
        ("astro/b", "astronomy", "kept"),
        ("astro/c", "astronomy", "rejected"),
        ("chem/a", "chemistry", "kept"),
        ("bio/a", "biology", "rejected"),
    ]
    with session_scope(settings) as s:
        ids = upsert(
            s,
            Repository,
            [
                {
                    "source": "local",
                    "source_id": name,
                    "full_name": name,
                    "domain": domain,
                    "status": status,
                    "stage_status": {"crawl": "done", "curate": status},
                }
                for name, domain, status in repos
            ],
            keys=["source", "source_id"],
            returning=["id"],
        )
        snap = upsert(
            s,
            Snapshot,
            [{"repository_id": ids[0][0], "commit": "c0ffee", "archive_key": "snapshots/1/c0ffee.tar.zst"}],
            keys=["repository_id", "commit"],
            returning=["id"],
        )[0][0]
        files = (
            [("a.py", "Python", True)] * 4 + [("b.f90", "Fortran", True)] * 2 + [("c.py", "Python", False)]
        )
        upsert(
            s,
            File,
            [
                {
                    "snapshot_id": snap,
                    "repository_id": ids[0][0],
                    "path": f"{i}/{path}",
                    "sha256": f"{i:064x}",
                    "language": lang,
                    "bytes": 100 + i,
                    "kept": kept,
                }
                for i, (path, lang, kept) in enumerate(files)
            ],
            keys=["snapshot_id", "path"],
        )
        for key, reason in [
            ("astro/c", "license:gpl-3.0"),
            ("bio/a", "license:gpl-3.0"),
            ("bio/a", "docs_only"),
        ]:
            record_rejection(s, "curate", "repository", key, reason)
        record_rejection(s, "curate", "file", "x.min.js", "max_line_length")
        upsert(
            s,
            Artifact,
            [
                {
                    "key": "f1/x/part-00000.parquet",
                    "stage": "curate",
                    "sha256": "0" * 64,
                    "bytes": 2048,
                    "rows": 6,
                }
            ],
            keys=["key"],
        )


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> AirflowCluster:
    from scicodepile.db import migrate
    from scicodepile.settings import load_settings

    settings = load_settings(database_url=pg_url, var_dir=tmp_path_factory.mktemp("var"))
    migrate(settings)
    _seed(settings)
    home = tmp_path_factory.mktemp("airflow-ui")
    cluster = start_cluster(
        home,
        metadata_url=f"sqlite:///{home}/airflow.db",
        broker_url=None,
        app_env={"SCICODEPILE_DATABASE_URL": pg_url, "SCICODEPILE_VAR_DIR": str(home / "var")},
        components=("api-server",),
        executor="LocalExecutor",
    )
    try:
        yield cluster
    finally:
        cluster.close()


def _chromium(*args: str, tmp: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or "/usr/bin/chromium"
    assert Path(exe).exists(), "chromium is missing: run scripts/sysdeps.sh (Debian package chromium)"
    return subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_airflow_lists_the_page_in_its_navigation(api_server: AirflowCluster) -> None:
    plugins = api_server.request("GET", "/api/v2/plugins")["plugins"]
    ours = next(p for p in plugins if p["name"] == "scicodepile")
    assert ours["fastapi_apps"][0]["url_prefix"] == "/scicodepile"
    view = ours["external_views"][0]
    assert view["href"] == "scicodepile/" and view["destination"] == "nav"


def test_the_page_requires_an_airflow_login(tmp_path: Path, api_server: AirflowCluster) -> None:
    """Plugin routes are not protected by Airflow on their own: ours check the Airflow session."""
    import urllib.error
    import urllib.request

    from tests.support.services import free_port

    home = tmp_path / "strict"
    home.mkdir()
    port = free_port()
    env = dict(
        api_server.env,
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",  # a real login is needed now
    )
    strict = AirflowCluster(home=home, env=env, api_port=port)
    try:
        strict.start("api-server", "api-server", "--port", str(port), "--host", "127.0.0.1")
        strict.wait_api()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{strict.base_url}/scicodepile/", timeout=30)
        assert err.value.code in (401, 403)
    finally:
        strict.close()


def test_screenshot_shows_the_seeded_counts(tmp_path: Path, api_server: AirflowCluster) -> None:
    url = f"{api_server.base_url}/scicodepile/"
    dom = _chromium("--dump-dom", url, tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "SciCodePile corpus" in html
    # headline cards: 5 repositories found, 3 kept, 6 kept files, 6 F1 rows, 4 rejections
    for metric, value in [
        ("repositories found", 5),
        ("repositories kept", 3),
        ("files kept", 6),
        ("F1 rows", 6),
        ("rejections", 4),
    ]:
        assert f'data-metric="{metric}"><b>{value}</b>' in html, metric
    # by domain, language and rejection reason
    assert '<td>astronomy</td><td class="n">3</td>' in html
    assert '<td>Python</td><td class="n">4</td>' in html
    assert '<td>Fortran</td><td class="n">2</td>' in html
    assert '<td>curate</td><td>license:gpl-3.0</td><td class="n">2</td>' in html
    assert "No evaluation has finished yet." in html

    png = tmp_path / "scicodepile-page.png"
    shot = _chromium(f"--screenshot={png}", url, tmp=tmp_path)
    assert shot.returncode == 0 and png.exists() and png.stat().st_size > 10_000, shot.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\nscreenshot of the SciCodePile page: {png}")

    # the same page embedded in Airflow's own UI (nav entry -> iframe)
    embedded = tmp_path / "airflow-ui-scicodepile.png"
    shot = _chromium(
        f"--screenshot={embedded}",
        "--virtual-time-budget=15000",
        f"{api_server.base_url}/plugin/scicodepile",
        tmp=tmp_path,
    )
    assert shot.returncode == 0 and embedded.exists(), shot.stderr[-2000:]
    print(f"screenshot of the page inside the Airflow UI: {embedded}")
