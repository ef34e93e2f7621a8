"""A robust aio-pika connection over the nodes of a RabbitMQ cluster.

``LEDGERQ_AMQP_URL`` may name several nodes. aio-pika's robust connection
reconnects by itself, restoring channels, queues and consumers, but always to the
one URL it was made with, so a node that stays down would hold it forever.
:class:`FailoverConnection` keeps that recovery and changes only where it goes:
every (re)connect attempt after the first goes to the next node of the list,
round robin, so a lost node is left for the next one at once and a list of
nodes that are all down is tried in turn until one answers.

How it sees an attempt start (aio-pika 9 and 10, checked by the cluster fault
test): before each connect attempt aio-pika clears ``transport``, which is
already cleared when the previous attempt failed or the connection was lost;
a clear of a cleared transport is therefore a new attempt after the first. The
URL aio-pika reads for that attempt is :attr:`url`, which is the current node.

Races: none of its own. Everything runs on the event loop; the rotation happens
in the attribute write aio-pika makes right before it reads :attr:`url`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import aio_pika
from yarl import URL

from ledgerq.core.masking import mask_url

log = logging.getLogger("ledgerq.broker")

#: Seconds between reconnect attempts (aio-pika's default is 5): with several
#: nodes the next one is tried this soon after the last failed.
RECONNECT_INTERVAL_S = 1.0


class FailoverConnection(aio_pika.RobustConnection):
    """A robust connection that moves to the next of ``urls`` on every reconnect
    attempt, starting at ``urls[first]``."""

    def __init__(self, urls: Sequence[str], first: int = 0, **kwargs: Any) -> None:
        if not urls:
            raise ValueError("FailoverConnection needs at least one URL")
        self._first = URL(urls[first % len(urls)])
        kwargs.setdefault("reconnect_interval", RECONNECT_INTERVAL_S)
        super().__init__(self._first, **kwargs)
        self._nodes = tuple(URL(u) for u in urls)
        # aio-pika's first attempt clears the (already clear) transport once more,
        # which moves one step: start one step before ``first``.
        self._at = first - 1

    @property
    def url(self) -> URL:
        nodes = self.__dict__.get("_nodes")
        return nodes[self._at % len(nodes)] if nodes else self._first

    @url.setter
    def url(self, value: URL) -> None:
        """aio-pika sets the URL it was made with; the node list decides instead."""

    @property
    def transport(self) -> Any:
        return self.__dict__.get("_transport")

    @transport.setter
    def transport(self, value: Any) -> None:
        if value is None and self.__dict__.get("_transport") is None and "_nodes" in self.__dict__:
            self._at += 1
            if len(self._nodes) > 1:
                log.info("connecting to RabbitMQ at %s", mask_url(str(self.url)))
        self.__dict__["_transport"] = value
