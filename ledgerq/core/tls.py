"""TLS for RabbitMQ, built once for both AMQP clients.

aio-pika and pika each have their own URL syntax for TLS files, and each refuses
or ignores the other's, so ledgerq takes the files from settings
(``LEDGERQ_AMQP_CA_FILE``, ``LEDGERQ_AMQP_CERT_FILE``, ``LEDGERQ_AMQP_KEY_FILE``)
and builds one :class:`ssl.SSLContext` that both adapters are handed. The
context always checks the broker's certificate chain and host name; there is no
switch to turn that off. PostgreSQL's TLS stays in its URL, as libpq parameters.
"""

from __future__ import annotations

import os
import ssl
from urllib.parse import urlsplit

#: TLS parameters of aio-pika's or pika's URL syntax: the other client refuses or
#: ignores them, so ledgerq takes TLS files from the LEDGERQ_AMQP_*_FILE settings.
AMQP_TLS_URL_PARAMETERS = (
    *("cafile", "capath", "cadata", "certfile", "keyfile", "no_verify_ssl"),  # aio-pika
    "ssl_options",  # pika
)

#: The setting a certificate problem names.
CA_FILE_SETTING = "LEDGERQ_AMQP_CA_FILE"


class TLSFileError(ValueError):
    """A TLS file could not be used; ``fields`` are the settings that named it, and
    the message's ``{setting}`` is where the caller names them."""

    def __init__(self, message: str, *fields: str) -> None:
        super().__init__(message)
        self.fields = fields


def amqp_context(
    url: str, ca_file: str | None, cert_file: str | None, key_file: str | None
) -> ssl.SSLContext | None:
    """None for an ``amqp://`` URL; for ``amqps://`` a context that checks the broker's
    certificate chain (against ``ca_file``, else the system's CAs) and that it names the
    URL's host, and presents ``cert_file`` (with ``key_file``) if set."""
    if urlsplit(url).scheme != "amqps":
        return None
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise TLSFileError(
            "{setting} holds no CA certificate ledgerq can load: "
            f"{ca_file!r} "
            f"({_ssl_reason(exc)}; expected PEM)",
            "amqp_ca_file",
        ) from None
    if cert_file:
        try:
            context.load_cert_chain(cert_file, key_file, _no_passphrase)
        except (OSError, ValueError) as exc:
            files = ", ".join(repr(f) for f in (cert_file, key_file) if f)
            raise TLSFileError(
                "{setting}: no client certificate and matching key could be loaded from "
                f"{files} "
                f"({_ssl_reason(exc)}; expected PEM)",
                "amqp_cert_file",
                "amqp_key_file",
            ) from None
    return context


def parse_tls_file(value: object) -> str | None:
    """A readable file, or None (not set)."""
    if value is None or value == "":
        return None
    path = str(value)
    if not os.path.isfile(path):
        raise ValueError(f"(a PEM file) does not exist or is not a file: {path!r}")
    if not os.access(path, os.R_OK):
        raise ValueError(f"(a PEM file) cannot be read by this user: {path!r}")
    return path


def amqp_certificate_problem(exc: BaseException) -> str | None:
    """The line to show when ``exc`` (from either AMQP client) means the broker's TLS
    certificate was not accepted; None for any other failure. Retrying cannot help."""
    seen: set[int] = set()
    pending: list[object] = [exc]
    while pending:
        current = pending.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            why = current.verify_message or current.reason or str(current)
            return (
                f"TLS: the broker's certificate was not accepted (certificate verify failed: "
                f"{why}); "
                f"{CA_FILE_SETTING} must name the CA that signed it, and the "
                "URL's host must be a name the certificate holds (not retried)"
            )
        pending.extend([current.__cause__, current.__context__, *current.args])
    return None


def _no_passphrase() -> str:
    raise ValueError("the private key is encrypted; ledgerq needs it unencrypted")


def _ssl_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
