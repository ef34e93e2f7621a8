"""Typed exceptions. A caller can catch :class:`LedgerqError` for all of them."""

from __future__ import annotations


class LedgerqError(Exception):
    """Base class of every error ledgerq raises on purpose."""


class InvalidTaskError(LedgerqError, ValueError):
    """A task was refused before anything was written (bad kind, payload or option)."""


class PayloadTooLargeError(InvalidTaskError):
    """The JSON-encoded payload is larger than :data:`ledgerq.MAX_PAYLOAD_BYTES`."""


class InvalidRetryPolicyError(InvalidTaskError):
    """A retry policy could not be understood."""


class ServiceUnavailableError(LedgerqError):
    """PostgreSQL or RabbitMQ could not be reached; ``service`` names which."""

    def __init__(self, service: str, url: str, reason: str) -> None:
        self.service = service
        self.url = url
        self.reason = reason
        super().__init__(f"cannot reach {service} at {url}: {reason}")


class TaskNotFoundError(LedgerqError, LookupError):
    """No task with that id is in the ledger (live or history)."""


class StorageError(LedgerqError):
    """A ledger operation failed in the database driver; the original error is the
    ``__cause__``. Raised by the storage seam, never a driver's own exception type."""


class TransientStorageError(StorageError):
    """The connection failed, not the data: the same operation may succeed if tried
    again (a dropped connection, a server restart, a terminated backend)."""
