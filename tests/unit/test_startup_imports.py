"""What a process imports at start: a producer's ``import ledgerq``, the
``ledgerq`` command's ``--help``, and the schema check every command makes.

Each case runs in a fresh interpreter and reads its ``sys.modules``, so a module
imported by any path at all is seen; each also imports, at the end, something
that does load the modules checked for, to show the check would see them.
The ``--help`` listing built from the summaries of :data:`ledgerq.cli.COMMANDS`
is compared with the one the loaded commands print."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from ledgerq.cli import COMMANDS, cli
from ledgerq.cli.lazy import LazyGroup
from ledgerq.ledger.mysql import migrate as my_migrate
from ledgerq.ledger.pg import migrate as pg_migrate
from ledgerq.ledger.revisions import _chain_head

ROOT = Path(__file__).resolve().parents[2]

#: What a command needs only when it runs or migrates, never at start.
HEAVY = (
    "alembic",
    "aio_pika",
    "aiormq",
    "pika",
    "ledgerq.bench",
    "ledgerq.demo",
    "ledgerq.dashboard",
    "ledgerq.compose",
)
#: Besides, a producer loads neither the CLI, the operator's API, nor a driver.
PRODUCER_FREE = (*HEAVY, "ledgerq.admin", "ledgerq.cli", "click", "rich", "psycopg", "pymysql")

SNAPSHOT = (
    "import json, sys\n"
    "def loaded(): return sorted(sys.modules)\n"
    "snapshots = []\n"
    "{body}\n"
    "sys.stdout.write('\\n' + json.dumps(snapshots))\n"
)
#: Run ``ledgerq ARGS`` in this process as ``python -m ledgerq`` does.
RUN_CLI = (
    "sys.argv = ['ledgerq', *{args!r}]\n"
    "from ledgerq.cli import main\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as stop:\n"
    "    assert stop.code in (0, None), stop.code\n"
)


def snapshots(body: str) -> list[set[str]]:
    """The module names loaded at each ``snapshots.append(loaded())`` of ``body``."""
    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT.format(body=body)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return [set(names) for names in json.loads(done.stdout.splitlines()[-1])]


def found(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The ``names`` (packages included with their submodules) among ``modules``."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


def test_a_producer_imports_neither_the_cli_nor_admin_nor_alembic_nor_a_broker() -> None:
    plain, producer, admin = snapshots(
        "import ledgerq\n"
        "snapshots.append(loaded())\n"
        "from ledgerq import Registry, TaskSpec, aenqueue, enqueue, enqueue_many, task\n"
        "snapshots.append(loaded())\n"
        "ledgerq.admin.stats\n"
        "snapshots.append(loaded())\n"
    )
    assert found(plain, PRODUCER_FREE) == []
    assert found(producer, PRODUCER_FREE) == []
    assert "ledgerq.admin" in admin  # the check sees a module once something imports it


def test_ledgerq_help_imports_no_command_module() -> None:
    help_only, bench = snapshots(
        RUN_CLI.format(args=["--help"]) + "snapshots.append(loaded())\n"
        "import click\n"
        "from ledgerq.cli import cli\n"
        "cli.get_command(click.Context(cli), 'bench')\n"
        "snapshots.append(loaded())\n"
    )
    assert found(help_only, (*HEAVY, "ledgerq.admin", "psycopg", "rich")) == []
    assert sorted(m for m in help_only if m.startswith("ledgerq.cli.")) == [
        "ledgerq.cli.group",
        "ledgerq.cli.lazy",
    ]
    assert found(bench, ("ledgerq.bench", "ledgerq.cli.bench")) == [
        "ledgerq.bench",
        "ledgerq.cli.bench",
    ]


def test_a_command_imports_its_own_module_only() -> None:
    (stats_help,) = snapshots(
        RUN_CLI.format(args=["stats", "--help"]) + "snapshots.append(loaded())"
    )
    assert found(stats_help, HEAVY) == []
    assert sorted(m for m in stats_help if m.startswith("ledgerq.cli.")) == [
        "ledgerq.cli.group",
        "ledgerq.cli.inspect",
        "ledgerq.cli.lazy",
    ]


def test_the_start_check_reads_the_heads_without_alembic() -> None:
    heads, migrating = snapshots(
        "from ledgerq.compose import ledgers\n"
        "from ledgerq.ledger.mysql import migrate as my\n"
        "from ledgerq.ledger.pg import migrate as pg\n"
        "print(pg.head_revision(), my.head_revision())\n"
        "snapshots.append(loaded())\n"
        "pg.check_revision('head')\n"
        "snapshots.append(loaded())\n"
    )
    assert found(heads, ("alembic", "mako", "aio_pika", "pika")) == []
    assert "alembic" in migrating


def test_the_heads_read_from_the_scripts_are_alembics() -> None:
    for history in (pg_migrate.HISTORY, my_migrate.HISTORY):
        assert _chain_head(history.package) is not None  # read, not asked of Alembic
        assert history.head() == history.scripts().get_current_head()


def _history(root: Path, package: str, scripts: dict[str, str | None]) -> None:
    versions = root / package / "migrations" / "versions"
    versions.mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    for revision, down in scripts.items():
        parent = "None" if down is None else f'"{down}"'
        (versions / f"{revision}_step.py").write_text(
            f'"""A step."""\nrevision = "{revision}"\ndown_revision = {parent}\n'
        )


@pytest.mark.parametrize(
    ("scripts", "head"),
    [
        ({"a": None, "b": "a", "c": "b"}, "c"),
        ({"a": None, "b": "a", "c": "a"}, None),  # two heads
        ({"b": "x", "c": "b"}, None),  # a parent no script is
        ({"a": None, "b": "c", "c": "b", "d": "a"}, None),  # a cycle beside the chain
        ({"a": "b", "b": "a"}, None),  # no root
    ],
)
def test_a_history_that_is_not_one_chain_is_left_to_alembic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripts: dict[str, str | None], head: str
) -> None:
    package = f"lq_history_{tmp_path.name}"
    _history(tmp_path, package, scripts)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _chain_head(package) == head


def test_the_help_listing_is_the_loaded_commands() -> None:
    assert isinstance(cli, LazyGroup)
    assert {c.name for c in COMMANDS} == set(cli.list_commands(click.Context(cli)))
    for lazy in COMMANDS:
        summary = lazy.placeholder().get_short_help_str(10**6)
        assert summary == lazy.load().get_short_help_str(10**6), lazy.name
    # A group never loaded (the one of `ledgerq` may have been, by another test)
    # against one with every command loaded, at several widths.
    fresh = LazyGroup(name="ledgerq", params=cli.params, help=cli.help)
    fresh.add_lazy(COMMANDS)
    loaded = click.Group(
        name="ledgerq", params=cli.params, help=cli.help, commands=[c.load() for c in COMMANDS]
    )
    for width in (40, 60, 80, 120):
        lazy_help = fresh.get_help(click.Context(fresh, info_name="ledgerq", terminal_width=width))
        assert not fresh.commands  # listed without importing any
        loaded_help = loaded.get_help(
            click.Context(loaded, info_name="ledgerq", terminal_width=width)
        )
        assert lazy_help == loaded_help


def test_a_mistyped_command_is_matched_against_every_command() -> None:
    fresh = LazyGroup(name="ledgerq")
    fresh.add_lazy(COMMANDS)
    with pytest.raises(click.exceptions.NoSuchCommand) as raised:
        fresh.resolve_command(click.Context(fresh), ["stat"])
    assert raised.value.format_message() == "No such command 'stat'. Did you mean 'stats'?"
    assert not fresh.commands
