"""``ledgerq dashboard``: the web dashboard (the ``dashboard`` extra).

Without the extra installed it says so in one line (exit 78). It binds
127.0.0.1 by default; on any other address it refuses to start unless a
password or token is configured (:mod:`ledgerq.dashboard.settings`). SIGTERM
stops it gracefully.
"""

from __future__ import annotations

import importlib.util

import click

from ledgerq.cli.group import EX_CONFIG, SECRETS, fail, pass_settings
from ledgerq.cli.options import metrics_port_option
from ledgerq.core.config import Settings
from ledgerq.runtime import run_service

#: The distributions of the ``dashboard`` extra, by import name.
EXTRA = ("starlette", "jinja2", "uvicorn", "itsdangerous", "multipart")


def missing_extra() -> list[str]:
    return [name for name in EXTRA if importlib.util.find_spec(name) is None]


@click.command("dashboard")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8270, show_default=True, type=click.IntRange(1, 65535))
@metrics_port_option
@pass_settings
def dashboard(settings: Settings, host: str, port: int, metrics_port: int | None) -> None:
    """Serve the web dashboard: overview, tasks and actions (runs until SIGTERM)."""
    missing = missing_extra()
    if missing:
        fail(
            f"the dashboard needs the dashboard extra ({', '.join(missing)} missing): "
            "pip install 'ledgerq[dashboard]'",
            EX_CONFIG,
        )
    from ledgerq.dashboard.serve import serve_dashboard
    from ledgerq.dashboard.settings import DashboardSettings, check_bind

    dashboard_settings = DashboardSettings.from_env()
    check_bind(host, dashboard_settings)
    SECRETS.secrets.update(dashboard_settings.secrets())
    run_service(
        serve_dashboard(
            settings,
            dashboard_settings,
            host,
            port,
            metrics_port or 0,
            sorted(SECRETS.secrets),
            # Said once the ledger answered (a database that is down or unmigrated
            # stops the command first, with its one line).
            on_ready=lambda: click.echo(f"ledgerq dashboard on http://{host}:{port}/", err=True),
        ),
        settings.event_loop,
    )
