"""ledgerq's core, below everything else: settings (the table, their parsing and
checks, :class:`~ledgerq.core.config.Settings`), the error types, secret masking,
logging, the AMQP TLS context (Settings loads its files at start, so a bad file
is a one-line error before anything connects) and the limits and names that
both the ledger and the broker take. It imports no other ledgerq package.
"""
