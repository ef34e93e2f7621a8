"""The web dashboard (``ledgerq dashboard``, the ``dashboard`` extra).

An ASGI application (Starlette, Jinja2 templates with autoescaping, served by
uvicorn) over the ledger: the overview (:mod:`.overview`), the task list and
task pages (:mod:`.tasks`), and the operator actions (:mod:`.actions`), which
run :meth:`~ledgerq.ledger.protocol.OperationsLedger.act` like ``ledgerq
tasks`` does and are audited with the signed-in user as actor. Authentication
(:mod:`.auth`), CSRF (:mod:`.csrf`) and settings (:mod:`.settings`) are each a
module; :mod:`.app` puts them together and :mod:`.serve` runs them.

Nothing here is imported by ``import ledgerq``; the web libraries are imported
only inside this package (an import-linter contract).
"""
