"""ledgerq's consumers: the handler registry and the worker, made of parts.

Applications import ``task`` and the contexts from :mod:`ledgerq`; the worker
is built by the composition root (:mod:`ledgerq.compose`).
"""
