"""ledgerq's ledger: schema and migrations, the state machine, the producer's
outbox helper, and the storage seam (:mod:`ledgerq.ledger.protocol`).

Producers import from :mod:`ledgerq`, not from here. This package imports no
broker client; only :mod:`ledgerq.ledger.pg` imports the database driver.
"""
