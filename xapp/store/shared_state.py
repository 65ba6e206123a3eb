"""What replicas share besides the cells' history: the recalibration offsets in force, the A1
policy instances, and which replica owns which E2 node. In one replica's memory (the single-node
default: it owns every node), or in the RIC's Redis (``RedisSharedState``), in the history's
namespace: ``{ns},shared:recalibration:<model>`` holds a model's offsets, the hash
``{ns},map:a1-policies`` the instances by id, ``{ns},e2-lease:<node>`` names the replica that
owns an E2 node for now, ``{ns},e2-subscribed:<node>`` the owner once it has subscribed to the
node, ``{ns},e2-replicas`` the replicas alive (``lease_round``), and the hash
``{ns},e2-subscriptions:<node>`` which replica made each of the node's subscriptions at the
subscription manager (by its id), so that a crashed replica's are deleted by the next owner.
Live scoring (``serving.scoring``) keeps per model version ``{ns},scores:<model>:<version>:<cell>``
(a cell's ``ScoreRecord``), ``{ns},accuracy:<model>:<version>`` (the last round's summary) and
``{ns},scoring-round:<model>:<version>`` (the origin of the last round a replica took on;
``publication-round`` the same for publication, ``xapp.publication``);
they expire unless rewritten, so a version no longer served leaves nothing behind. The
deployment's model decisions (``serving.lifecycle``) are ``{ns},model-decision:<model>``, and
what each replica serves the hash ``{ns},model-replicas`` (by replica) beside the sorted set
``{ns},model-replicas-alive`` (when each report expires)."""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import redis.asyncio as aioredis

from kpi_forecast.xapp.descriptor.controls import HistoryStore
from kpi_forecast.xapp.store.sdl import connect, errors

RECALIBRATION_KEY = "shared:recalibration"
Work = Literal["scoring", "publication"]  # taken on by one replica per origin
POLICIES_KEY = "map:a1-policies"


@dataclass(frozen=True)
class Leases:
    """A replica's E2 nodes after a lease round."""

    owned: list[str]
    # Nodes it is subscribed to but no longer owns, whose new owner has subscribed too.
    handed_over: list[str]


class SharedState:
    """The contract, kept in this process's memory: one replica, which owns every node."""

    def __init__(self) -> None:
        self._recalibration: dict[str, bytes] = {}
        self._policies: dict[str, bytes] = {}
        self._subscriptions: dict[str, dict[str, str]] = {}  # node -> id -> replica
        # (model, version) -> cell -> ScoreRecord bytes; -> summary; -> last round's origin
        self._scores: dict[tuple[str, str], dict[str, bytes]] = {}
        self._accuracy: dict[tuple[str, str], bytes] = {}
        self._rounds: dict[tuple[Work, str, str], int] = {}
        self._decisions: dict[str, bytes] = {}
        self._serving: dict[str, bytes] = {}

    async def recalibration(self, model: str) -> bytes | None:
        """The model's recalibration offsets last written (None: never)."""
        return self._recalibration.get(model)

    async def put_recalibration(self, model: str, value: bytes) -> None:
        self._recalibration[model] = value

    async def policies(self) -> dict[str, bytes]:
        """The A1 policy instances by id, as written."""
        return dict(self._policies)

    async def put_policy(self, instance_id: str, value: bytes) -> None:
        self._policies[instance_id] = value

    async def delete_policy(self, instance_id: str) -> None:
        self._policies.pop(instance_id, None)

    async def score_records(self, model: str, version: str, cells: Sequence[str]
                            ) -> list[bytes | None]:
        """The cells' score records for a model version (None: none kept)."""
        held = self._scores.get((model, version), {})
        return [held.get(cell) for cell in cells]

    async def put_score_records(self, model: str, version: str,
                                records: Sequence[tuple[str, bytes]], ttl_s: float) -> None:
        """Keep the cells' records (in Redis for ``ttl_s``); in memory, a model keeps the
        records of the two versions written last (the one served and its candidate)."""
        held = self._scores.pop((model, version), {})
        held.update(records)
        self._scores[(model, version)] = held  # the dict's order: the last written last
        versions = [key for key in self._scores if key[0] == model]
        for key in versions[:-2]:
            del self._scores[key]

    async def accuracy(self, model: str, version: str) -> bytes | None:
        """The summary of the model version's last scoring round (None: none yet)."""
        return self._accuracy.get((model, version))

    async def put_accuracy(self, model: str, version: str, summary: bytes, ttl_s: float) -> None:
        self._accuracy[(model, version)] = summary

    async def claim_round(self, work: Work, model: str, version: str, origin: int,
                          ttl_s: float) -> bool:
        """True for the one replica that takes on the round of ``work`` at ``origin`` (a
        slot), where no replica has taken on that round or a later one."""
        if self._rounds.get((work, model, version), -1) >= origin:
            return False
        self._rounds[(work, model, version)] = origin
        return True

    async def decision(self, model: str) -> bytes | None:
        """The deployment's last decision about the model (None: none made)."""
        return self._decisions.get(model)

    async def put_decision(self, model: str, sequence: int, decision: bytes) -> bool:
        """Keep ``decision``, the model's ``sequence``-th, where the one held is the one before
        it (none for the first); False, keeping nothing, where another was made meanwhile."""
        held = self._decisions.get(model)
        if (json.loads(held)["sequence"] if held else 0) != sequence - 1:
            return False
        self._decisions[model] = decision
        return True

    async def report_serving(self, replica: str, report: bytes, ttl_s: float) -> None:
        """What ``replica`` serves, for ``ttl_s`` unless reported again."""
        self._serving = {replica: report}

    async def serving_reports(self) -> dict[str, bytes]:
        """What each replica alive serves, by replica, as it last reported."""
        return dict(self._serving)

    async def lease_round(self, replica: str, nodes: Sequence[str], ttl_s: float,
                          subscribed: Collection[str] = ()) -> Leases:
        """One round of E2 node ownership for ``replica``: which of ``nodes`` it owns now,
        and which of those it is ``subscribed`` to it may now give up.

        A replica owns a node by a lease that lives ``ttl_s`` unless renewed; each round says
        the replica is alive for as long, renews its leases, gives up those beyond its share
        (the nodes over the replicas alive, rounded up: so that one that joined finds some
        free) and takes free ones up to its share. A replica that stops calling loses its
        nodes ``ttl_s`` later. An owner says in its rounds which of its nodes it has
        subscribed to; one that gave a node up keeps its subscription until the new owner
        has said so (make before break: the history keeps the overlap's reports once). In
        memory there is one replica: it owns them all.
        """
        return Leases(list(nodes), [])

    async def record_subscription(self, node: str, subscription_id: str,
                                  replica: str) -> None:
        """``replica`` made ``subscription_id`` to ``node``."""
        self._subscriptions.setdefault(node, {})[subscription_id] = replica

    async def forget_subscription(self, node: str, subscription_id: str) -> None:
        self._subscriptions.get(node, {}).pop(subscription_id, None)

    async def orphaned_subscriptions(self, node: str, replica: str) -> list[str]:
        """The subscriptions to ``node`` recorded by replicas other than ``replica`` that
        are no longer alive (in memory there is one replica: none)."""
        return []

    async def close(self) -> None:
        """Release connections; what is shared stays where it is."""


# KEYS: the sorted set of live replicas (member: replica id, score: when it expires, in ms of
# Redis's clock), then one lease key per node, then one "subscribed by" key per node. ARGV:
# the replica id, the lease's life in ms, the node names in the order of their keys, then per
# node "1" where the replica is subscribed to it. Returns the nodes the replica owns after
# the round, and those it is subscribed to but another owns and has subscribed to. Atomic, so
# two replicas never take one node; Redis's clock, so the replicas' clocks need not agree.
_LEASE_ROUND = """
local n = (#KEYS - 1) / 2
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local me, ttl = ARGV[1], tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, me)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local share = math.ceil(n / redis.call('ZCARD', KEYS[1]))
local mine, free = {}, {}
for i = 2, n + 1 do
  local holder = redis.call('GET', KEYS[i])
  if holder == me then table.insert(mine, i) elseif not holder then table.insert(free, i) end
end
while #mine > share do redis.call('DEL', KEYS[table.remove(mine)]) end
for _, i in ipairs(mine) do redis.call('PEXPIRE', KEYS[i], ttl) end
for _, i in ipairs(free) do
  if #mine >= share then break end
  redis.call('SET', KEYS[i], me, 'PX', ttl)
  table.insert(mine, i)
end
local owned, handed, is_mine = {}, {}, {}
for _, i in ipairs(mine) do
  is_mine[i] = true
  table.insert(owned, ARGV[i + 1])
end
for i = 2, n + 1 do
  if ARGV[n + 1 + i] == '1' then
    if is_mine[i] then
      redis.call('SET', KEYS[n + i], me, 'PX', ttl)
    else
      local by = redis.call('GET', KEYS[n + i])
      if by and by ~= me then table.insert(handed, ARGV[i + 1]) end
    end
  end
end
return {owned, handed}
"""

# KEYS: the sorted set of live replicas, the node's hash of subscriptions (id -> replica).
# ARGV: the asking replica. Returns the ids whose replica is not it and not alive by Redis's
# clock.
_ORPHANED = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local made = redis.call('HGETALL', KEYS[2])
local orphaned = {}
for i = 1, #made, 2 do
  local by = made[i + 1]
  local until_ms = redis.call('ZSCORE', KEYS[1], by)
  if by ~= ARGV[1] and (not until_ms or tonumber(until_ms) < now) then
    table.insert(orphaned, made[i])
  end
end
return orphaned
"""


# KEYS: the model version's round key. ARGV: the round's origin, the key's life in ms. Sets the
# key to the origin where it holds none or an earlier one: 1 then, else 0.
_CLAIM_ROUND = """
local held = redis.call('GET', KEYS[1])
if held and tonumber(held) >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""


# KEYS: the model's decision. ARGV: the decision's sequence, the decision (JSON). Sets it where
# the decision held is the one before (none: sequence 1): 1 then, else 0.
_PUT_DECISION = """
local held = redis.call('GET', KEYS[1])
local last = 0
if held then last = tonumber(cjson.decode(held)['sequence']) end
if last + 1 ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""

# KEYS: the sorted set of reports' expiry (ms of Redis's clock), the hash of reports. ARGV: the
# replica, its report, the report's life in ms (empty: only read). Drops expired reports, keeps
# the replica's, returns the hash.
_SERVING_REPORTS = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('HDEL', KEYS[2], gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  return {}
end
return redis.call('HGETALL', KEYS[2])
"""


class RedisSharedState(SharedState):
    """The same contract in Redis, for every replica of one namespace."""

    def __init__(self, client: aioredis.Redis, namespace: str) -> None:
        super().__init__()
        self._redis = client
        self._prefix = f"{{{namespace}}},"
        self._lease_round = client.register_script(_LEASE_ROUND)
        self._orphaned = client.register_script(_ORPHANED)
        self._claim_round = client.register_script(_CLAIM_ROUND)
        self._put_decision = client.register_script(_PUT_DECISION)
        self._serving_reports = client.register_script(_SERVING_REPORTS)

    @classmethod
    def open(cls, settings: HistoryStore, environ: Mapping[str, str] = os.environ
             ) -> RedisSharedState:
        return cls(connect(settings, environ), settings.namespace)

    async def recalibration(self, model: str) -> bytes | None:
        async with errors(f"reading the recalibration of {model}"):
            return await self._redis.get(f"{self._prefix}{RECALIBRATION_KEY}:{model}")

    async def put_recalibration(self, model: str, value: bytes) -> None:
        async with errors(f"writing the recalibration of {model}"):
            await self._redis.set(f"{self._prefix}{RECALIBRATION_KEY}:{model}", value)

    async def policies(self) -> dict[str, bytes]:
        async with errors("reading the A1 policy instances"):
            held = await self._redis.hgetall(self._prefix + POLICIES_KEY)
        return {key.decode(): value for key, value in held.items()}

    async def put_policy(self, instance_id: str, value: bytes) -> None:
        async with errors(f"writing A1 policy instance {instance_id}"):
            await self._redis.hset(self._prefix + POLICIES_KEY, instance_id, value)

    async def delete_policy(self, instance_id: str) -> None:
        async with errors(f"deleting A1 policy instance {instance_id}"):
            await self._redis.hdel(self._prefix + POLICIES_KEY, instance_id)

    async def score_records(self, model: str, version: str, cells: Sequence[str]
                            ) -> list[bytes | None]:
        if not cells:
            return []
        async with errors(f"reading the live scores of {model}"):
            return await self._redis.mget(
                [f"{self._prefix}scores:{model}:{version}:{cell}" for cell in cells])

    async def put_score_records(self, model: str, version: str,
                                records: Sequence[tuple[str, bytes]], ttl_s: float) -> None:
        async with (errors(f"writing the live scores of {model}"),
                    self._redis.pipeline(transaction=False) as pipe):
            for cell, record in records:
                pipe.set(f"{self._prefix}scores:{model}:{version}:{cell}", record,
                         px=round(ttl_s * 1000))
            await pipe.execute()

    async def accuracy(self, model: str, version: str) -> bytes | None:
        async with errors(f"reading the live accuracy of {model}"):
            return await self._redis.get(f"{self._prefix}accuracy:{model}:{version}")

    async def put_accuracy(self, model: str, version: str, summary: bytes, ttl_s: float) -> None:
        async with errors(f"writing the live accuracy of {model}"):
            await self._redis.set(f"{self._prefix}accuracy:{model}:{version}", summary,
                                  px=round(ttl_s * 1000))

    async def claim_round(self, work: Work, model: str, version: str, origin: int,
                          ttl_s: float) -> bool:
        async with errors(f"taking on a {work} round of {model}"):
            return bool(await self._claim_round(
                keys=[f"{self._prefix}{work}-round:{model}:{version}"],
                args=[origin, round(ttl_s * 1000)]))

    async def decision(self, model: str) -> bytes | None:
        async with errors(f"reading the deployment's decision about {model}"):
            return await self._redis.get(f"{self._prefix}model-decision:{model}")

    async def put_decision(self, model: str, sequence: int, decision: bytes) -> bool:
        async with errors(f"writing the deployment's decision about {model}"):
            return bool(await self._put_decision(
                keys=[f"{self._prefix}model-decision:{model}"], args=[sequence, decision]))

    def _reports_keys(self) -> list[str]:
        return [self._prefix + "model-replicas-alive", self._prefix + "model-replicas"]

    async def report_serving(self, replica: str, report: bytes, ttl_s: float) -> None:
        async with errors("reporting the models this replica serves"):
            await self._serving_reports(keys=self._reports_keys(),
                                        args=[replica, report, round(ttl_s * 1000)])

    async def serving_reports(self) -> dict[str, bytes]:
        async with errors("reading the models the replicas serve"):
            flat = await self._serving_reports(keys=self._reports_keys(), args=["", "", ""])
        return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}

    async def lease_round(self, replica: str, nodes: Sequence[str], ttl_s: float,
                          subscribed: Collection[str] = ()) -> Leases:
        ordered = sorted(nodes)
        keys = [self._prefix + "e2-replicas", *(f"{self._prefix}e2-lease:{n}" for n in ordered),
                *(f"{self._prefix}e2-subscribed:{n}" for n in ordered)]
        flags = ["1" if node in subscribed else "0" for node in ordered]
        async with errors("renewing the E2 node leases"):
            owned, handed = await self._lease_round(
                keys=keys, args=[replica, round(ttl_s * 1000), *ordered, *flags])
        return Leases([node.decode() for node in owned], [node.decode() for node in handed])

    async def record_subscription(self, node: str, subscription_id: str,
                                  replica: str) -> None:
        async with errors(f"recording subscription {subscription_id} of {node}"):
            await self._redis.hset(f"{self._prefix}e2-subscriptions:{node}", subscription_id,
                                   replica)

    async def forget_subscription(self, node: str, subscription_id: str) -> None:
        async with errors(f"forgetting subscription {subscription_id} of {node}"):
            await self._redis.hdel(f"{self._prefix}e2-subscriptions:{node}", subscription_id)

    async def orphaned_subscriptions(self, node: str, replica: str) -> list[str]:
        async with errors(f"reading the subscriptions of {node}"):
            found = await self._orphaned(keys=[
                self._prefix + "e2-replicas", f"{self._prefix}e2-subscriptions:{node}"],
                args=[replica])
        return [subscription_id.decode() for subscription_id in found]

    async def close(self) -> None:
        await self._redis.aclose()


def open_shared(settings: HistoryStore) -> SharedState:
    """What replicas share, where the history is kept (``controls.historyStore``)."""
    if settings.backend == "memory":
        return SharedState()
    return RedisSharedState.open(settings)
