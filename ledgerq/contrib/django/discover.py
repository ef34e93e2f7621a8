"""The worker's ``--app`` under ``manage.py ledgerq worker``: each installed app's ``tasks.py``.

Importing this module imports the ``tasks`` module of every app in
``INSTALLED_APPS`` that has one (Django's own ``autodiscover_modules``, as the
admin finds ``admin.py``), so their ``@task`` handlers register. An app without
``tasks.py`` is skipped; an error inside one is raised, not hidden. Django is set
up first if it is not yet (a process started as ``python -m ledgerq worker --app
ledgerq.contrib.django.discover`` with ``DJANGO_SETTINGS_MODULE`` set).
"""

from __future__ import annotations

import django
from django.apps import apps
from django.utils.module_loading import autodiscover_modules

#: The module each installed app keeps its handlers in.
TASKS_MODULE = "tasks"

if not apps.ready:
    django.setup()
autodiscover_modules(TASKS_MODULE)
