"""ledgerq's relay (due rows to RabbitMQ, with confirms), the reconciler (the
safety net under the broker), and the broker seam (:mod:`.broker`) both use."""
