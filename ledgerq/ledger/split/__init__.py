"""The ledger split across databases (ledger shards): ``LEDGERQ_DATABASE_URL``
listing several. :mod:`.ids` says which database holds a task (its id's high
bits); :mod:`.router` is the producer's side (enqueue on the database of the
task's shard); :mod:`.ledger` is the services' and the operator's side (one
ledger over every database), whose calls :mod:`.spread` spreads. Not to be
confused with the *routing* shard (:mod:`ledgerq.ledger.sharding`), a number on
each task that splits a queue's work among workers (``--shards``).
"""
