"""The broker seam: the topology as data (:mod:`.topology`), the contract
(:mod:`.base`), and two adapters that read it: aio-pika (:mod:`.aio`, for the
relay and the worker) and pika (:mod:`.blocking`, for the reconciler). Only the
adapters import a broker client."""
