"""What the service commands share: ``--app`` (the user's module of handlers),
``--tracing``, ``--metrics-port``, and the usage errors of ``--app``,
``--tracing`` and ``--processes``.

Its own module, so that ``ledgerq worker`` and ``ledgerq dashboard`` do not
import the relay and the reconciler with :mod:`.services`.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from ledgerq.cli.group import EX_USAGE
from ledgerq.consumers.registry import Registry, default_registry
from ledgerq.core.errors import LedgerqError

metrics_port_option = click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus /metrics, /healthz and /readyz on this port "
    "(env LEDGERQ_METRICS_PORT; default: none).",
)


class AppImportError(LedgerqError):
    """``--app`` names a module that cannot be imported (a usage error: exit 64)."""

    exit_code = EX_USAGE


def load_app(module: str) -> Registry:
    """Import the user's module so its ``@task`` decorators run."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise AppImportError(f"cannot import --app {module!r}: {exc}") from exc
    if not len(default_registry):
        raise AppImportError(f'--app {module!r} registered no handlers (use @task("kind"))')
    return default_registry


class ProcessesError(LedgerqError):
    """``--processes`` out of range (a usage error: one line, exit 64)."""

    exit_code = EX_USAGE


class TracingSetupError(LedgerqError):
    """``--tracing`` names a module or function that cannot be loaded (exit 64)."""

    exit_code = EX_USAGE


def load_tracing(path: str) -> None:
    """Import ``module`` (and call ``module:function`` with no arguments) so that it
    configures OpenTelemetry, typically ``trace.set_tracer_provider(...)`` with an
    exporter: the relay's ``publish`` spans go to the provider it sets, as a
    worker's ``process`` spans go to the one its ``--app`` module sets."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module_name, _, function = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raised as it ran
        raise TracingSetupError(
            f"cannot import --tracing {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    if not function:
        return
    setup = getattr(module, function, None)
    if not callable(setup):
        raise TracingSetupError(f"--tracing {path!r}: {module_name} has no function {function!r}")
    try:
        setup()
    except Exception as exc:
        raise TracingSetupError(f"--tracing {path!r} failed: {type(exc).__name__}: {exc}") from None
