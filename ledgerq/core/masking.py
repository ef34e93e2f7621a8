"""Secrets out of everything ledgerq prints: URLs, error lines and log records.

:func:`mask_url` is the one function that shows a URL (the database's, the
broker's, a webhook's). It does not need the URL to parse: a malformed URL is
exactly when a person needs to see it, and exactly when a parser cannot say
where the password ends. So it works on the text:

- the password in the user-info part (``scheme://user:PASSWORD@host``) becomes
  ``***``. The user-info ends at the last ``@`` of the authority; when an ``@``
  also appears after the authority (a password with an unescaped ``/``, ``?`` or
  ``#`` in it), it ends at the last ``@`` of the whole string. When unsure it
  hides more, never less;
- the value of every query parameter whose name says secret (``password``,
  ``sslpassword``, ``token``, ``secret``, ``api_key``, ...) becomes ``***``, and
  so does ``password=...`` in a libpq keyword/value string.

:func:`mask_text` applies the same to free text (a driver's error message, a log
line): credentials of any ``scheme://user:password@`` inside it, and the known
secrets it is given (the passwords of the configured URLs, as
:func:`secrets_of` finds them). :class:`SecretFilter` applies :func:`mask_text`
to every log record a handler emits, traceback included.

Secrets shorter than :data:`MIN_SCRUBBED` characters are hidden inside URLs but
not searched for in free text (a one-letter password would blank every such
letter of a log line).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote

MASK = "***"
#: Known secrets shorter than this are not searched for in free text.
MIN_SCRUBBED = 4

_SECRET_NAME = re.compile(
    r"pass|pwd|secret|token|credential|api_?key|access_?key|auth", re.IGNORECASE
)
#: ``?name=value`` / ``&name=value`` / ``;name=value`` in a query string.
_QUERY_PAIR = re.compile(r"(?P<lead>[?&;](?P<name>[^=&;#\s]*)=)(?P<value>[^&;#\s]*)")
#: ``password=value`` in a libpq keyword/value string (value quoted or bare).
_DSN_PAIR = re.compile(
    r"(?P<lead>\b(?P<name>\w*pass\w*)\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|[^\s&;]+)",
    re.IGNORECASE,
)
#: ``scheme://user:password@`` anywhere in free text.
_URL_CREDENTIALS = re.compile(
    r"(?P<lead>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)(?P<value>\S+)(?=@)"
)


def _password_span(url: str) -> tuple[int, int] | None:
    """Where the user-info password of ``url`` is, best effort; None if it has none."""
    scheme_end = url.find("://")
    start = scheme_end + 3 if scheme_end >= 0 else 0
    rest = url[start:]
    delimiters = [i for i in (rest.find(c) for c in "/?#") if i >= 0]
    authority_end = min(delimiters) if delimiters else len(rest)
    if "@" in rest[authority_end:]:
        at = rest.rfind("@")  # malformed: the password ran past a delimiter
    elif "@" in rest[:authority_end]:
        at = rest.rfind("@", 0, authority_end)
    else:
        return None
    colon = rest.find(":", 0, at)
    if colon < 0 or colon + 1 == at:
        return None
    return start + colon + 1, start + at


def _secret_pairs(text: str) -> list[tuple[int, int]]:
    """Spans of the values of secret-named query parameters and ``password=`` pairs."""
    spans = []
    for pattern in (_QUERY_PAIR, _DSN_PAIR):
        for match in pattern.finditer(text):
            if _SECRET_NAME.search(match["name"]) and match["value"] not in ("", MASK):
                spans.append(match.span("value"))
    return spans


def _spans(url: str) -> list[tuple[int, int]]:
    password = _password_span(url)
    spans = [password] if password else []
    for begin, end in _secret_pairs(url):
        if not password or end <= password[0] or begin >= password[1]:
            spans.append((begin, end))
    return sorted(spans)


def _replace(text: str, spans: Iterable[tuple[int, int]]) -> str:
    out, last = [], 0
    for begin, end in sorted(spans):
        if begin < last:
            continue
        out.append(text[last:begin])
        out.append(MASK)
        last = end
    out.append(text[last:])
    return "".join(out)


#: Where one URL of a comma-separated list ends: before ``,scheme://``.
_NEXT_URL = re.compile(r",(?=\s*[a-zA-Z][a-zA-Z0-9+.-]*://)")


def split_urls(text: str) -> list[str]:
    """The URLs of a comma-separated list (``LEDGERQ_AMQP_URL`` may name several
    nodes); a single URL is a list of one. A comma inside a URL stays in it."""
    return [part.strip() for part in _NEXT_URL.split(text)]


def mask_url(url: str) -> str:
    """``url`` with its password and secret query values replaced by ``***`` (each
    URL of a comma-separated list on its own)."""
    return ",".join(_replace(part, _spans(part)) for part in split_urls(url))


def secrets_of(*urls: str) -> set[str]:
    """The secrets :func:`mask_url` would hide in ``urls``, as written and decoded."""
    found: set[str] = set()
    for url in (part for listed in urls for part in split_urls(listed)):
        for begin, end in _spans(url):
            raw = url[begin:end].strip("'")
            plain = unquote(raw)
            found.update(s for s in (raw, plain, quote(plain, safe=""), quote_plus(plain)) if s)
    return found


def mask_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Free text with URL credentials, secret pairs and each of ``secrets`` hidden."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_SCRUBBED:
            text = text.replace(secret, MASK)
    text = _URL_CREDENTIALS.sub(lambda m: m["lead"] + MASK, text)
    return _replace(text, _secret_pairs(text))


class SecretFilter(logging.Filter):
    """Masks every record a handler emits: its message and its traceback text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = set(secrets)
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = mask_text(record.getMessage(), self.secrets)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_text(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = mask_text(record.stack_info, self.secrets)
        return True
