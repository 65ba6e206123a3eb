"""Which E2 nodes this replica subscribes to: with the shared history (Redis), each node is
owned by one live replica at a time, by a lease in the same Redis (``SharedState.lease_round``);
with the memory store the one replica owns them all.

Every ``ROUND_S`` a replica says it is alive, renews its leases, gives up the nodes beyond its
share (the nodes over the live replicas, rounded up) and takes free ones up to it. So a
replica that joins gets its share within two rounds, and the nodes of one that dies (or can
no longer reach Redis) are free ``LEASE_TTL_S`` after its last round and taken at the next
round of another: within ``TAKEOVER_BOUND_S``. A node given up stays subscribed to until
its new owner says, in a round of its own, that it has subscribed: for that overlap both
receive its reports and the history keeps them once, instead of a gap in which nobody does.
A replica that cannot reach Redis keeps the
subscriptions it has: its reports could not be written anyway, and the leases say nothing
while nobody can read them.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Collection, Sequence

from kpi_forecast.xapp.failures import describe
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable

log = logging.getLogger(__name__)

LEASE_TTL_S = 6.0
ROUND_S = 2.0  # a third of a lease: two rounds may fail before one runs out
TAKEOVER_BOUND_S = LEASE_TTL_S + ROUND_S


def replica_name() -> str:
    """This process among the replicas: its pod's host name, pid and a random part (a
    restarted container keeps its host name and may get the same pid)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Ownership:
    """This replica's nodes, by lease rounds in the shared state of ``state.now``."""

    def __init__(self, state: ServingState, replica: str | None = None) -> None:
        self._state = state
        self.replica = replica or replica_name()
        self.owned: set[str] = set()
        # Subscribed to here, owned and subscribed to by another replica: to be given up.
        self.handed_over: set[str] = set()
        self._failing = False

    async def round(self, nodes: Sequence[str], subscribed: Collection[str] = ()) -> set[str]:
        """The nodes this replica owns after one round (those it had while the store is
        away, or before one is open); ``handed_over`` is updated too."""
        store = self._state.now.shared
        if store is None:
            return self.owned
        try:
            leases = await store.lease_round(self.replica, nodes, LEASE_TTL_S, subscribed)
            self.owned, self.handed_over = set(leases.owned), set(leases.handed_over)
            self._failing = False
        except HistoryUnavailable as exc:
            if not self._failing:
                log.warning("e2: node leases not renewed (%s); keeping the %d node(s) held",
                            describe(exc), len(self.owned))
            self._failing = True
            self.handed_over = set()
        return self.owned
