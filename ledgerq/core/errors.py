"""Typed exceptions. A caller can catch :class:`LedgerqError` for all of them.

The ``ledgerq`` command maps them onto exit codes (see ``ledgerq.cli.group``):
:class:`ConfigError` and :class:`SchemaError` mean "fix the configuration",
:class:`ServiceUnavailableError` "a service is down or refuses us", the rest
"this failed". Every message that shows a URL shows it masked
(:func:`~ledgerq.core.masking.mask_url`).
"""

from __future__ import annotations

from ledgerq.core.masking import mask_url


def first_line(exc: BaseException) -> str:
    """An error's message in one line (its first), or its type's name if it has none."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class LedgerqError(Exception):
    """Base class of every error ledgerq raises on purpose."""


class InvalidTaskError(LedgerqError, ValueError):
    """A task was refused before anything was written (bad kind, payload or option)."""


class WrongShardError(InvalidTaskError):
    """A task with a ledger shard key was enqueued in a transaction on another ledger
    shard's database than the key's (:mod:`ledgerq.ledger.split.ids`). Raised inside
    the caller's transaction, after the INSERT: the transaction must roll back."""


class PayloadTooLargeError(InvalidTaskError):
    """The JSON-encoded payload is larger than :data:`ledgerq.MAX_PAYLOAD_BYTES`."""


class InvalidRetryPolicyError(InvalidTaskError):
    """A retry policy could not be understood."""


class UnknownParentError(InvalidTaskError):
    """``parent_id`` names no task, live or in history (the ledger refused the insert:
    SQLSTATE ``LQF01``). The caller's transaction is aborted: roll it back."""


class FamilyCompletedError(InvalidTaskError):
    """``parent_id`` names a task whose family already completed (its
    ``on_children_done`` callback was enqueued, SQLSTATE ``LQF02``): a late child
    would never be counted. The caller's transaction is aborted: roll it back."""


class ConfigError(LedgerqError, ValueError):
    """A setting (an environment variable, a CLI option, a :class:`Settings` field)
    holds a value ledgerq cannot use. Each line of the message names one setting
    and says what it expects."""


class UnsupportedServerError(ConfigError):
    """The ledger's database server is older than ledgerq needs (MariaDB before 10.6,
    MySQL before 8.0: no ``FOR UPDATE SKIP LOCKED``, no ``JSON_TABLE``). Exit 78."""


class NotBuiltOnMySQLError(ConfigError):
    """What was asked is not built on the MySQL / MariaDB ledger yet (issue 29;
    docs/guarantees.md, "On MySQL and MariaDB" lists what is). Refused before it
    writes anything, rather than done without the guarantee PostgreSQL gives. Exit 78."""


class SchemaError(LedgerqError):
    """The ledger's schema is missing, or not at the revision this ledgerq needs.
    The message ends with what to do (``run `ledgerq migrate```)."""


#: The settings that name each service, for messages that say what to fix.
SERVICE_SETTINGS = {
    "PostgreSQL": "LEDGERQ_DATABASE_URL / --database-url",
    "MySQL": "LEDGERQ_DATABASE_URL / --database-url",
    "RabbitMQ": "LEDGERQ_AMQP_URL / --amqp-url",
}


class ServiceUnavailableError(LedgerqError):
    """PostgreSQL or RabbitMQ could not be reached; ``service`` names which, ``url``
    is the masked URL and ``reason`` the client's one-line error."""

    def __init__(self, service: str, url: str, reason: str) -> None:
        self.service = service
        self.url = mask_url(url)
        self.reason = reason
        super().__init__(self.describe())

    @property
    def setting(self) -> str:
        return SERVICE_SETTINGS.get(self.service, "its URL")

    def describe(self) -> str:
        return (
            f"cannot reach {self.service} at {self.url}: {self.reason} "
            f"(check that {self.service} is running and reachable, and {self.setting})"
        )


class CredentialsRefusedError(ServiceUnavailableError):
    """The service answered and refused the user or password. Never retried: the
    same credentials are refused again."""

    def describe(self) -> str:
        return (
            f"{self.service} at {self.url} refused the credentials: {self.reason} "
            f"(fix the user or password in {self.setting})"
        )


class TaskNotFoundError(LedgerqError, LookupError):
    """No task with that id is in the ledger (live or history)."""


class StorageError(LedgerqError):
    """A ledger operation failed in the database driver; the original error is the
    ``__cause__``. Raised by the storage seam, never a driver's own exception type."""


class SchemaMissingError(StorageError, SchemaError):
    """A statement found one of the ledger's tables or columns missing: the schema
    was never migrated, was dropped, or is older than this ledgerq. Not transient:
    a service that meets it stops (run `ledgerq migrate`)."""


class PrivilegeMissingError(SchemaMissingError):
    """The database login lacks a privilege the ledger needs (SQLSTATE 42501). Like a
    missing schema, no retry can help: a service that meets it stops. The grants
    each role needs are in docs/security.md, 'Database roles' (``grant_objects``)."""


class TransientStorageError(StorageError):
    """The connection failed, not the data: the same operation may succeed if tried
    again (a dropped connection, a server restart, a terminated backend)."""


class InvalidFilterError(LedgerqError, ValueError):
    """A task filter or an operator action's argument could not be understood: an
    unknown status, a time that is neither ISO 8601 nor ``30m``/``2h``/``7d``, a
    limit out of range, an action with no tasks named. The message is one line
    that says what is accepted; nothing was read or changed."""

    exit_code = 64
