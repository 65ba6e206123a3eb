"""A1 policy instances over RMR: what the A1 mediator sends, what the xApp answers, and the
instances shared by every replica of one shared state.

The RIC routes each A1_POLICY_REQ to one replica (the RMR Service's): that replica checks the
instance (the type's schema, the served model, no cell steered twice), writes it to the
shared state, puts it in force and answers A1_POLICY_RESP by route. The other replicas read
the shared state every second and put in force what they find, so every replica steers alike and a
restarted one steers at once. Once a model is served (the instances are checked against it),
the xApp sends A1_POLICY_QUERY, and the mediator sends every instance that exists again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time

from pydantic import ValidationError

from kpi_forecast.model.runtime import OnnxForecaster
from kpi_forecast.xapp.failures import describe
from kpi_forecast.xapp.metrics import Metrics
from kpi_forecast.xapp.ric.a1.policies import Policies, misfit
from kpi_forecast.xapp.ric.a1.policy_type import (
    A1_POLICY_QUERY,
    A1_POLICY_RESP,
    POLICY_TYPE_ID,
    ForecastPolicy,
    PolicyQuery,
    PolicyRequest,
    PolicyResponse,
)
from kpi_forecast.xapp.ric.transport import Frame, Transport
from kpi_forecast.xapp.serving.state import ServingState
from kpi_forecast.xapp.store.cell_history import HistoryUnavailable
from kpi_forecast.xapp.store.shared_state import SharedState

log = logging.getLogger(__name__)

TICK_S = 1.0  # how soon a replica puts in force what another wrote
QUERY_RETRY_S = 5.0  # between A1_POLICY_QUERY attempts while no route takes it


def first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else error["msg"]


def stored_form(policy: ForecastPolicy) -> bytes:
    """An instance as the store keeps it: the payload's own form."""
    return policy.model_dump_json(by_alias=True).encode()


class PolicyHandler:
    """A1 requests put in force on ``policies`` for the models ``state`` serves, and kept in
    its shared state."""

    def __init__(self, policies: Policies, transport: Transport, state: ServingState,
                 metrics: Metrics, handler_id: str | None = None) -> None:
        self.policies = policies
        self._transport = transport
        self._state = state
        self._metrics = metrics
        self.handler_id = handler_id or socket.gethostname()  # the pod's name in Kubernetes
        self._stored: dict[str, bytes] = {}  # the shared instances as last put in force
        self._lock = asyncio.Lock()
        self._last_logged: dict[str, float] = {}

    async def handle(self, frame: Frame) -> None:
        """Take an A1_POLICY_REQ (the handler of that message type)."""
        try:
            raw = json.loads(frame.payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._refused("malformed", f"an A1 policy request that is not JSON: {exc}")
            return
        try:
            request = PolicyRequest.model_validate(raw)
        except ValidationError as exc:
            self._refused("malformed", f"an A1 policy request the mediator's contract does "
                          f"not allow: {first_error(exc)}")
            ids = raw if isinstance(raw, dict) else {}
            type_id, instance_id = ids.get("policy_type_id"), ids.get("policy_instance_id")
            if isinstance(type_id, str) and type_id.isascii() and type_id.isdigit():
                type_id = int(type_id)
            if isinstance(type_id, int) and isinstance(instance_id, str):
                await self._answer(type_id, instance_id, "ERROR", first_error(exc))
            return
        async with self._lock:  # a request and the store's reading change instances in turn
            status, reason = await self._apply(request)
        self._metrics.a1_requests.labels(operation=request.operation, status=status).inc()
        if reason:
            log.warning("a1: %s of instance %r refused: %s", request.operation,
                        request.policy_instance_id, reason)
        await self._answer(request.policy_type_id, request.policy_instance_id, status, reason)

    async def _apply(self, request: PolicyRequest) -> tuple[str, str | None]:
        """The status to answer, and the reason of an ERROR."""
        if request.policy_type_id != POLICY_TYPE_ID:
            return "ERROR", (f"policy type {request.policy_type_id} is not handled here "
                             f"(kpi-forecast takes {POLICY_TYPE_ID})")
        served, instance_id = self._state.now, request.policy_instance_id
        shared = served.shared
        if shared is None:
            return "ERROR", ("no model is served yet: the xApp asks for this instance again "
                             "once one is")
        try:
            if request.operation == "DELETE":
                await shared.delete_policy(instance_id)
                instances = dict(self.policies.instances)
                instances.pop(instance_id, None)
                self._put_in_force(instances)
                return "DELETED", None
            try:
                policy = ForecastPolicy.model_validate(request.payload)
            except ValidationError as exc:
                return "ERROR", f"the payload does not fit the policy type: {first_error(exc)}"
            reason = misfit(policy, self._served()) or self.policies.conflict(instance_id,
                                                                              policy)
            if reason:
                return "ERROR", reason
            await shared.put_policy(instance_id, stored_form(policy))
        except HistoryUnavailable as exc:
            return "ERROR", f"the shared state (controls.historyStore) cannot keep it now: {exc}"
        self._put_in_force({**self.policies.instances, instance_id: policy})
        return "OK", None

    def _served(self) -> dict[str, OnnxForecaster]:
        """The models loaded now, by name: what the instances are checked against."""
        return {name: served.model for name, served in self._state.models.items()
                if served.model is not None}

    def _put_in_force(self, instances: dict[str, ForecastPolicy]) -> None:
        self.policies.replace(instances, self._served())
        self._stored = {key: stored_form(value) for key, value in instances.items()}
        self.show()

    async def _answer(self, type_id: int, instance_id: str, status: str,
                      reason: str | None) -> None:
        response = PolicyResponse(policy_type_id=type_id, policy_instance_id=instance_id,
                                  handler_id=self.handler_id, status=status, reason=reason)
        payload = response.model_dump_json(exclude_none=True).encode()
        try:
            await self._transport.route(Frame(A1_POLICY_RESP, -1, payload))
        except (OSError, RuntimeError) as exc:
            self._metrics.a1_unanswered.inc()
            self._log_once("answer", f"a1: the answer to instance {instance_id!r} could not "
                           f"be sent: {describe(exc)}")

    def _refused(self, reason: str, detail: str) -> None:
        self._metrics.a1_requests.labels(operation="unknown", status="ERROR").inc()
        self._log_once(reason, f"a1: {detail}")

    def _log_once(self, key: str, message: str) -> None:
        """At most once a minute per kind: a misbehaving peer cannot flood the log."""
        now = time.monotonic()
        if now - self._last_logged.get(key, -1e9) >= 60.0:
            self._last_logged[key] = now
            log.warning(message)

    def models_changed(self) -> None:
        """A model loaded, reloaded or unloaded: it may serve instances the old one could not,
        or not serve some."""
        self.policies.replace(self.policies.instances, self._served())
        self.show()

    async def run(self) -> None:
        """Once a model is served: ask the mediator for the instances that exist, then keep
        in force what the store holds."""
        queried = False
        while True:
            shared = self._state.now.shared
            if shared is not None:
                if not queried:
                    queried = await self._query()
                try:
                    await self.take_stored(shared)
                except HistoryUnavailable as exc:
                    self._log_once("store", f"a1: the instances cannot be read: {exc}")
            await asyncio.sleep(TICK_S if queried or shared is None else QUERY_RETRY_S)

    async def _query(self) -> bool:
        payload = PolicyQuery(policy_type_id=POLICY_TYPE_ID).model_dump_json().encode()
        try:
            await self._transport.route(Frame(A1_POLICY_QUERY, -1, payload))
        except (OSError, RuntimeError) as exc:
            self._log_once("query", f"a1: cannot ask the A1 mediator for the instances "
                           f"(retried every {QUERY_RETRY_S:.0f} s): {describe(exc)}")
            return False
        log.info("a1: asked the A1 mediator for the instances of policy type %d",
                 POLICY_TYPE_ID)
        return True

    async def take_stored(self, shared: SharedState) -> None:
        """Put in force the instances ``shared`` holds, when they differ from those in force
        (another replica took a request)."""
        async with self._lock:
            stored = await shared.policies()
            if stored == self._stored:
                return
            instances = {}
            for instance_id, blob in stored.items():
                try:
                    instances[instance_id] = ForecastPolicy.model_validate_json(blob)
                except ValidationError as exc:
                    self._log_once(f"stored {instance_id}", f"a1: the stored instance "
                                   f"{instance_id!r} is unreadable: {first_error(exc)}")
            self.policies.replace(instances, self._served())
            self._stored = stored
            self.show()

    def show(self) -> None:
        """The instances on their gauges: one series per instance, as it is now."""
        m, policies = self._metrics, self.policies
        for gauge in (m.a1_instance_cells, m.a1_instance_in_force, m.a1_instance_horizon,
                      m.a1_instance_budget, m.a1_instance_excluded):
            gauge.clear()
        for instance_id, policy in policies.instances.items():
            m.a1_instance_cells.labels(policy_instance=instance_id).set(len(policy.cells))
            m.a1_instance_in_force.labels(policy_instance=instance_id).set(
                instance_id not in policies.held)
            m.a1_instance_excluded.labels(policy_instance=instance_id).set(policy.excluded)
            if policy.horizon is not None:
                m.a1_instance_horizon.labels(policy_instance=instance_id).set(policy.horizon)
            if policy.latency_budget_ms is not None:
                m.a1_instance_budget.labels(policy_instance=instance_id).set(
                    policy.latency_budget_ms / 1000.0)
