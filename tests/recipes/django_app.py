# mypy: disable-error-code="import-untyped, import-not-found, misc"
"""Django: a view saves a model and enqueues its receipt in one ``transaction.atomic()``.

A one-file project (``settings.configure()``, no manage.py). Django's PostgreSQL
backend runs on psycopg 3 when it is installed; ``enqueue`` takes Django's
``connection`` and runs on its psycopg connection, in the ``atomic()`` block's transaction.
"""

from __future__ import annotations

import os

import django
from django.conf import settings
from django.db import connection, models, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path

from ledgerq import enqueue

settings.configure(
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["testserver", "localhost"],
    MIDDLEWARE=[],
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.postgresql",  # on psycopg 3
            "NAME": os.environ.get("SHOP_DB_NAME", "shop"),  # the ledger's database
            "HOST": os.environ.get("SHOP_DB_HOST", "127.0.0.1"),
            "PORT": os.environ.get("SHOP_DB_PORT", "5432"),
            "USER": os.environ.get("SHOP_DB_USER", "postgres"),
            "PASSWORD": os.environ.get("SHOP_DB_PASSWORD", ""),
        }
    },
)
django.setup()  # before the first model class


class Order(models.Model):
    email = models.TextField()

    class Meta:
        app_label = "shop"
        db_table = "shop_orders"


def place_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():  # commits the order and its task together, or neither
        order = Order.objects.create(email=request.POST["email"])
        task_id = enqueue(connection, "send_receipt", {"order_id": order.pk})
    return JsonResponse({"order_id": order.pk, "task_id": task_id}, status=201)


urlpatterns = [path("orders", place_order)]
