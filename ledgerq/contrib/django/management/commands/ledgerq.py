"""``python manage.py ledgerq COMMAND [OPTIONS]``: the ``ledgerq`` command under Django.

Every ledgerq command and option works as it does on its own (``manage.py
ledgerq migrate``, ``manage.py ledgerq worker --concurrency 20``, ``manage.py
ledgerq stats --json``), with three differences:

- the settings come from ``settings.LEDGERQ`` and the Django database
  (:mod:`ledgerq.contrib.django.conf`), put into this process's environment as
  the ``LEDGERQ_*`` variables before the command runs; the global options
  (``--amqp-prefix``, ``-v``, ...) still win over them;
- ``worker`` runs the handlers of every installed app's ``tasks.py``
  (:mod:`ledgerq.contrib.django.discover`) unless ``--app`` names a module;
- Django's own ``--settings`` and ``--pythonpath`` (which ``manage.py`` applied
  before this command started) are taken out of the arguments.

The output, the errors (one ``ledgerq:`` line each) and the exit codes are
ledgerq's (docs/reference.md#exit-codes); a bad ``settings.LEDGERQ`` is one line
naming its key and exit 78 before anything connects.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandParser

from ledgerq.cli import cli
from ledgerq.cli.group import EX_CONFIG, fail, run_cli
from ledgerq.contrib.django.conf import environ, named
from ledgerq.core.config import ConfigError, Settings
from ledgerq.processes import without_options

#: ``manage.py ledgerq worker`` without ``--app``: every installed app's tasks.py.
DISCOVER = "ledgerq.contrib.django.discover"
#: Options ``manage.py`` itself reads (before the command runs), with a value each.
DJANGO_OPTIONS = ("--settings", "--pythonpath")


def without_django_options(args: Sequence[str]) -> list[str]:
    """``args`` less Django's ``--settings X`` / ``--pythonpath=X``."""
    return without_options(args, DJANGO_OPTIONS)


def run(args: Sequence[str], prog_name: str) -> None:
    """Run ``ledgerq ARGS`` with this Django project's settings."""
    try:
        ours = environ()
        Settings.from_env({**os.environ, **ours})  # a bad setting: named as its key
    except ImproperlyConfigured as exc:
        fail(str(exc), EX_CONFIG)
    except ConfigError as exc:
        fail(named(str(exc), ours), EX_CONFIG)
    os.environ.update(ours)
    run_cli(cli, list(args), prog_name, default_map={"worker": {"app": DISCOVER}})


class Command(BaseCommand):
    help = (
        "Run a ledgerq command (migrate, worker, relay, reconcile, stats, tasks, ...) with "
        "settings.LEDGERQ and the Django database; `manage.py ledgerq --help` lists them."
    )
    requires_system_checks: ClassVar[list[str]] = []  # the worker checks what it needs itself

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER, metavar="COMMAND [OPTIONS]")

    def run_from_argv(self, argv: list[str]) -> None:
        # The arguments go to ledgerq's own parser as they are (Django's would take
        # ledgerq's -v for its --verbosity).
        run(without_django_options(argv[2:]), f"{os.path.basename(argv[0])} {argv[1]}")

    def handle(self, *args: Any, **options: Any) -> None:
        """``call_command("ledgerq", "stats", "--json")``."""
        run(args, "ledgerq")
