"""One masking function for every URL ledgerq shows, robust to URLs that do not parse,
and the log filter that applies it to every record."""

from __future__ import annotations

import logging
import sys

import pytest

from ledgerq.core.config import Settings
from ledgerq.core.errors import CredentialsRefusedError, ServiceUnavailableError
from ledgerq.core.masking import SecretFilter, mask_text, mask_url, secrets_of, split_urls

SECRET = "s3cr3t-Pw"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # well-formed
        (f"amqp://guest:{SECRET}@127.0.0.1:5672/", "amqp://guest:***@127.0.0.1:5672/"),
        (
            f"postgresql+psycopg://app:{SECRET}@db:5432/ledger",
            "postgresql+psycopg://app:***@db:5432/ledger",
        ),
        ("amqp://guest@127.0.0.1:5672/", "amqp://guest@127.0.0.1:5672/"),  # no password
        ("http://hooks.example:8080/dead", "http://hooks.example:8080/dead"),
        (f"amqp://u:{SECRET}@[::1]:5672/v", "amqp://u:***@[::1]:5672/v"),
        # secrets in the query string, and in a libpq keyword/value string
        (
            f"postgresql+psycopg://app@db/x?sslmode=require&password={SECRET}",
            "postgresql+psycopg://app@db/x?sslmode=require&password=***",
        ),
        (
            f"amqps://u@mq/v?token={SECRET}&heartbeat=30&sslpassword={SECRET}",
            "amqps://u@mq/v?token=***&heartbeat=30&sslpassword=***",
        ),
        (f"host=db password='{SECRET} x' dbname=y", "host=db password=*** dbname=y"),
        # malformed: the password holds a character that ends the authority
        (f"amqp://guest:pa/{SECRET}@host/", "amqp://guest:***@host/"),
        (f"amqp://guest:pa?{SECRET}@host/", "amqp://guest:***@host/"),
        (f"amqp://guest:pa@{SECRET}@host/", "amqp://guest:***@host/"),
        (f"postgresql://app:{SECRET}@db:5432:x/", "postgresql://app:***@db:5432:x/"),
        # malformed: no scheme, or a single slash
        (f"app:{SECRET}@db:5432/x", "app:***@db:5432/x"),
        (f"postgresql:/app:{SECRET}@db/x", "postgresql:***@db/x"),
        ("notaurl", "notaurl"),
        ("", ""),
    ],
)
def test_mask_url_hides_every_password(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert SECRET not in mask_url(url)


def test_secrets_of_finds_each_password_as_written_and_decoded() -> None:
    found = secrets_of("amqp://u:p%40ss-word@h/", f"postgresql://a@b/c?password={SECRET}")
    assert {"p%40ss-word", "p@ss-word", SECRET} <= found
    assert secrets_of("amqp://guest@h/", "notaurl") == set()


def test_mask_text_hides_known_secrets_and_urls_in_free_text() -> None:
    text = (
        f"connect to amqp://guest:{SECRET}@h/ failed; the server said {SECRET!r}; "
        "retrying amqps://x:other-one@mq/"
    )
    masked = mask_text(text, {SECRET, "ab"})
    assert SECRET not in masked and "other-one" not in masked
    assert "amqp://guest:***@h/" in masked and "amqps://x:***@mq/" in masked
    assert "ab" in mask_text("about", {"ab"})  # too short to search for in free text


def test_the_log_filter_masks_messages_arguments_and_tracebacks() -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    handler.addFilter(SecretFilter({SECRET}))
    log = logging.getLogger("ledgerq.test.masking")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("Connection attempt to %s failed", f"amqp://guest:{SECRET}@h/")
        try:
            raise ValueError(f"bad password {SECRET}")
        except ValueError:
            log.exception("boom %s", SECRET, stack_info=True)
            assert sys.exc_info()[0] is ValueError
    finally:
        log.removeHandler(handler)
    assert len(records) == 2
    assert records[0] == "Connection attempt to amqp://guest:***@h/ failed"
    assert "ValueError: bad password ***" in records[1]
    assert all(SECRET not in r for r in records)


def test_errors_and_settings_never_show_a_password() -> None:
    url = f"amqp://guest:{SECRET}@127.0.0.1:1/"
    assert SECRET not in str(ServiceUnavailableError("RabbitMQ", url, "refused"))
    refused = CredentialsRefusedError("RabbitMQ", url, "ACCESS_REFUSED")
    assert str(refused) == (
        "RabbitMQ at amqp://guest:***@127.0.0.1:1/ refused the credentials: ACCESS_REFUSED "
        "(fix the user or password in LEDGERQ_AMQP_URL / --amqp-url)"
    )
    assert isinstance(refused, ServiceUnavailableError)
    settings = Settings(database_url=f"postgresql://app:{SECRET}@db/x", amqp_url=url)
    assert SECRET not in repr(settings)
    assert settings.masked()["database_url"] == "postgresql+psycopg://app:***@db/x"


def test_each_url_of_a_node_list_is_masked_on_its_own() -> None:
    listed = "amqp://app:pw-one@mq-0:5672/,amqp://app:pw-two@mq-1:5672/,amqps://app:pw-3x@mq-2/"
    assert split_urls(listed) == [
        "amqp://app:pw-one@mq-0:5672/",
        "amqp://app:pw-two@mq-1:5672/",
        "amqps://app:pw-3x@mq-2/",
    ]
    assert mask_url(listed) == (
        "amqp://app:***@mq-0:5672/,amqp://app:***@mq-1:5672/,amqps://app:***@mq-2/"
    )
    assert {"pw-one", "pw-two", "pw-3x"} <= secrets_of(listed)
    # A comma that does not start another URL stays inside its URL (and its password).
    assert split_urls("postgresql://u:a,b@db/x") == ["postgresql://u:a,b@db/x"]
    assert mask_url("postgresql://u:a,b@db/x") == "postgresql://u:***@db/x"
