"""An order, and the receipt its task writes."""

from django.db import models


class Order(models.Model):
    email = models.TextField()


class Receipt(models.Model):
    order = models.OneToOneField(Order, on_delete=models.CASCADE)
    task_id = models.BigIntegerField()
