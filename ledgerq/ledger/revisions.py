"""One of ledgerq's Alembic revision histories, whichever server it is for: where
its scripts live, its head, and the check of a revision a person typed.
PostgreSQL's history is ``ledger/migrations`` (:mod:`ledgerq.ledger.pg.migrate`),
MySQL's ``ledger/mysql/migrations`` (:mod:`ledgerq.ledger.mysql.migrate`); each
module holds one :class:`History` and runs its own upgrades (what differs: shards,
poolers, how a database is created).
The start check's verdict on a database's revision and tables
(:meth:`History.verdict`) and its walk over the ledger shards (:func:`check_shards`)
are both servers'; each reads its database its own way.

Alembic is imported by what runs or lists migrations only (``ledgerq migrate``, a
revision a person typed, the message about a schema at an unknown revision):
every other command's start check needs the head alone, and :meth:`History.head`
reads it from the scripts' own ``revision = "..."`` / ``down_revision = ...``
lines when they form one chain (the way ledgerq writes them), which is what
Alembic computes (tests/unit/test_startup_imports.py compares the two); anything
else is left to Alembic."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

from ledgerq.core.errors import SchemaError
from ledgerq.core.masking import mask_url
from ledgerq.ledger.migrations import VERSION_TABLE

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from ledgerq.core.config import Settings

#: What a database's start check tells to do when its schema is missing or behind.
MIGRATE = "run `ledgerq migrate`"

#: A script's own ``revision = "id"`` and ``down_revision = "id"`` (or ``None``) lines.
_REVISION = re.compile(r'^revision = "([^"]+)"$', re.MULTILINE)
_DOWN_REVISION = re.compile(r'^down_revision = (?:"([^"]+)"|None)$', re.MULTILINE)


@dataclass(frozen=True)
class History:
    """``package``'s ``migrations`` folder; ``dialect_url`` a URL of its dialect
    (no server: the scripts are read, never run, through it); ``label`` names it
    in messages ("" or "MySQL ")."""

    package: str
    dialect_url: str
    label: str = ""

    def config(self, database_url: str) -> Config:
        """Alembic's configuration for this history on ``database_url``."""
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(resources.files(self.package) / "migrations"))
        # Alembic's config uses ConfigParser interpolation, so '%' must be doubled.
        config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
        return config

    def scripts(self) -> ScriptDirectory:
        return _scripts(self)

    def head(self) -> str:
        """The revision this ledgerq's history ends at (Alembic asked only when the
        scripts do not form one chain)."""
        head = _chain_head(self.package) or self.scripts().get_current_head()
        assert head is not None, f"ledgerq ships at least one {self.label}migration"
        return head

    def known(self) -> set[str]:
        """Every revision of the history."""
        return {script.revision for script in self.scripts().walk_revisions()}

    def check(self, revision: str) -> None:
        """Raise ValueError unless ``revision`` names one of the history's migrations
        (or head)."""
        from alembic.util import CommandError

        try:
            found = self.scripts().get_revisions(revision)
        except CommandError:
            found = ()
        if not found:
            known = ", ".join(sorted(self.known()))
            raise ValueError(
                f"no ledgerq {self.label}migration is called {revision!r} (known: {known}, head)"
            )

    def verdict(
        self,
        database_url: str,
        current: str | None,
        missing: list[str],
        unknown: str = "a newer ledgerq migrated it?",
    ) -> str:
        """The start check of one database: ``current`` (its recorded revision, None if
        never migrated) when it is this history's head and none of the ledger tables is
        ``missing``; else :class:`~ledgerq.core.errors.SchemaError` saying what to do
        (``unknown``: what a revision the history does not know may be)."""
        head = self.head()
        where = mask_url(database_url)
        if current is None:
            raise SchemaError(
                f"the ledger schema is missing in {where} (never migrated): {MIGRATE}"
            )
        if current != head:
            if current in self.known():
                raise SchemaError(
                    f"the ledger schema in {where} is at revision {current}, this ledgerq "
                    f"needs {head}: {MIGRATE}"
                )
            raise SchemaError(
                f"the ledger schema in {where} is at revision {current}, which this ledgerq "
                f"does not know ({unknown}): upgrade ledgerq, or fix "
                "LEDGERQ_DATABASE_URL / --database-url"
            )
        if missing:
            raise SchemaError(
                f"the ledger schema in {where} is at {current} but its tables "
                f"{', '.join(missing)} are gone: drop the table {VERSION_TABLE}, then {MIGRATE}"
            )
        return current


def check_shards(settings: Settings, check_one: Callable[[Settings, int, int], str]) -> str:
    """The start check of every ledger shard's database, in the URL list's order
    (``check_one``: one shard's settings, its position, how many; its revision):
    the first one's revision."""
    count = settings.ledger_shard_count
    revisions = [
        check_one(shard, index, count) for index, shard in enumerate(settings.ledger_shards())
    ]
    return revisions[0]


@cache
def _scripts(history: History) -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(history.config(history.dialect_url))


@cache
def _chain_head(package: str) -> str | None:
    """The last revision of ``package``'s scripts if each names its revision and its
    parent on lines of their own and, followed parent by parent from the one
    revision no script names as its parent, they form one chain through every
    script down to a root; None otherwise (Alembic decides then)."""
    parents: dict[str, str | None] = {}
    for script in (resources.files(package) / "migrations" / "versions").iterdir():
        if not script.name.endswith(".py") or script.name == "__init__.py":
            continue
        text = script.read_text(encoding="utf-8")
        revision, down = _REVISION.findall(text), _DOWN_REVISION.findall(text)
        if len(revision) != 1 or len(down) != 1 or revision[0] in parents:
            return None
        parents[revision[0]] = down[0] or None
    heads = set(parents) - set(parents.values())
    if len(heads) != 1:
        return None
    head = heads.pop()
    at: str | None = head
    for _ in parents:
        if at not in parents:
            return None
        at = parents[at]
    return head if at is None else None
