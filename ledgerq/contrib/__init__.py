"""Integrations with web frameworks, each imported only by the applications that use it.

- :mod:`ledgerq.contrib.django`: a Django app (``INSTALLED_APPS``) with
  ``manage.py ledgerq``, settings from ``settings.LEDGERQ`` and the Django
  database, and the worker's discovery of each app's ``tasks.py``.
- :mod:`ledgerq.contrib.starlette`: a Starlette / FastAPI lifespan that opens the
  application's async engine on the ledger's database and disposes it.

``import ledgerq`` imports neither, and neither framework is a dependency of
ledgerq (see docs/howto.md#use-ledgerq-from-django). This package sits above the
command line in the import-linter layers: the core (``ledger``, ``relay``,
``consumers``) never imports it.
"""
