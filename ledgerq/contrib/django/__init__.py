"""ledgerq as a Django app: add ``"ledgerq.contrib.django"`` to ``INSTALLED_APPS``.

- ``settings.LEDGERQ`` (a dict) holds ledgerq's settings by name (``AMQP_URL``,
  ``AMQP_PREFIX``, ``QUEUE_TYPE``, ... : each field of
  :class:`~ledgerq.core.config.Settings`, upper case) and ``DATABASE``, the
  alias of the Django database the ledger lives in (``"default"`` unless given).
  The ledger's URL is built from that ``DATABASES`` entry
  (:func:`~ledgerq.contrib.django.conf.database_url`).
- ``python manage.py ledgerq COMMAND ...`` runs the ``ledgerq`` command with
  those settings (:mod:`.management.commands.ledgerq`); its worker runs every
  installed app's ``tasks.py`` (:mod:`.discover`), so no ``--app`` is needed.
- ``enqueue(django.db.connection, ...)`` inside ``transaction.atomic()`` joins the
  block's transaction (see :mod:`ledgerq.ledger.executors`; nothing here is needed
  for that).
- The app has no models: ledgerq's tables stay out of Django's migrations and are
  created by ``manage.py ledgerq migrate``.

Django 4.2 or later on psycopg 3 (which ledgerq installs, and Django uses when
it is installed) with the PostgreSQL backend.
"""

from __future__ import annotations

from ledgerq.contrib.django.conf import database_url, environ, ledgerq_settings

__all__ = ["database_url", "environ", "ledgerq_settings"]
