"""One of ledgerq's Alembic revision histories, whichever server it is for: where
its scripts live, its head, and the check of a revision a person typed.
PostgreSQL's history is ``ledger/migrations`` (:mod:`ledgerq.ledger.pg.migrate`),
MySQL's ``ledger/mysql/migrations`` (:mod:`ledgerq.ledger.mysql.migrate`); each
module holds one :class:`History` and runs its own upgrades (what differs: shards,
poolers, how a database is created)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError


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
        config = Config()
        config.set_main_option("script_location", str(resources.files(self.package) / "migrations"))
        # Alembic's config uses ConfigParser interpolation, so '%' must be doubled.
        config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
        return config

    def scripts(self) -> ScriptDirectory:
        return _scripts(self)

    def head(self) -> str:
        """The revision this ledgerq's history ends at."""
        head = self.scripts().get_current_head()
        assert head is not None, f"ledgerq ships at least one {self.label}migration"
        return head

    def known(self) -> set[str]:
        """Every revision of the history."""
        return {script.revision for script in self.scripts().walk_revisions()}

    def check(self, revision: str) -> None:
        """Raise ValueError unless ``revision`` names one of the history's migrations
        (or head)."""
        try:
            found = self.scripts().get_revisions(revision)
        except CommandError:
            found = ()
        if not found:
            known = ", ".join(sorted(self.known()))
            raise ValueError(
                f"no ledgerq {self.label}migration is called {revision!r} (known: {known}, head)"
            )


@cache
def _scripts(history: History) -> ScriptDirectory:
    return ScriptDirectory.from_config(history.config(history.dialect_url))
