"""The xApp's own settings, the "controls" of its O-RAN SC descriptor (config-file.json; the
envelope around them: ``envelope.py``), as pydantic models.

They are the one source of the descriptor's contract: `schema.json` (which the xApp and the
chart validate the file against) and the controls part of the chart's `values.schema.json` are
generated from them (`make schemas`, `cli/schema_files.py`); the models themselves validate
the controls and their overrides (CLI flags), which never pass through the schema. A field's
docstring is its description in the schemas.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from kpi_forecast.xapp.descriptor.accuracy import (
    Guard,
    Promotion,
    RecalibrationControls,
    ScoringControls,
)
from kpi_forecast.xapp.descriptor.fields import (
    MODEL_CONFIG,
    ON_RELOAD,
    ON_RESTART,
    ModelName,
    Quantile,
    unique_items,
)
from kpi_forecast.xapp.descriptor.publication import Publication

DEFAULT_APPMGR_URL = "http://service-ricplt-appmgr-http.ricplt:8080/ric/v1/register"
# The O-RAN SC convention for ClientEndpoint.Host: the xApp's HTTP Service, where submgr posts
# the subscriptions' outcomes; submgr makes the RMR endpoint of it by turning "http" into "rmr".
DEFAULT_CLIENT_HOST = "service-ricxapp-kpi-forecast-http.ricxapp"
DEFAULT_E2MGR_URL = "http://service-ricplt-e2mgr-http.ricplt:3800/v1"

class Batching(BaseModel):
    """How requests are gathered into one model call."""

    model_config = MODEL_CONFIG

    max_batch_size: int = Field(64, ge=1, le=4096)
    """Largest number of series in one model call."""
    max_queue_delay_ms: float = Field(2.0, ge=0, le=1000)
    """Longest a request waits for its batch to fill (ms)."""
    max_queue_size: int = Field(1024, ge=1, le=100_000)
    """Queued series beyond which requests are shed (503)."""
    admission: Literal["adaptive", "off"] = "adaptive"
    """adaptive: an in-flight limit that follows the queueing delay; off: admit every request
    up to maxQueueSize (a RIC that sheds load upstream)."""


class Registration(BaseModel):
    """Registration with the RIC platform's application manager."""

    model_config = MODEL_CONFIG

    enabled: bool | Literal["auto"] = "auto"
    """Register with the application manager at start-up. auto: when RMR takes its routes
    from the routing manager ($RMR_RTG_SVC set, and not -1), as the RIC's charts run an xApp:
    the routing manager routes only to the xApps registered there."""
    appmgr_url: str = Field(DEFAULT_APPMGR_URL, min_length=1, pattern=r"^https?://")
    """The application manager's registration endpoint."""
    retry_seconds: float = Field(10.0, gt=0)
    """Seconds between registration attempts."""


class Ratio(BaseModel):
    """A KPI computed per report from two measurements: ``scale`` x numerator / denominator
    (no value where either is missing or the denominator is 0)."""

    model_config = MODEL_CONFIG

    numerator: str = Field(min_length=1, max_length=150)
    """E2SM-KPM measurement name (3GPP TS 28.552)."""
    denominator: str = Field(min_length=1, max_length=150)
    """E2SM-KPM measurement name (3GPP TS 28.552)."""
    scale: float = Field(1.0, gt=0)
    """The ratio to the KPI's unit, e.g. 100 for a percentage."""


class KpiSource(BaseModel):
    """Which E2SM-KPM measurement feeds a KPI, in which unit, and how reports within one step
    combine."""

    model_config = MODEL_CONFIG

    measurement: str = Field(min_length=1, max_length=150)
    """E2SM-KPM measurement name (3GPP TS 28.552)."""
    unit: str = Field("", max_length=40)
    """The KPI's unit once scaled (as the training data has it), for the docs and the logs."""
    aggregate: Literal["mean", "sum"] = "mean"
    """How reports within one step combine: sum for volumes, mean for levels and rates."""
    scale: float = Field(1.0, gt=0)
    """Measurement unit to KPI unit, e.g. Mbit to MB = 0.125."""
    ratio: Ratio | None = None
    """Where a node does not report ``measurement``: the KPI computed from two it reports."""

    def options(self) -> tuple[tuple[str, ...], ...]:
        """The measurements a node may report for this KPI, in order of preference."""
        ratio = self.ratio
        return ((self.measurement,),) + (
            ((ratio.numerator, ratio.denominator),) if ratio is not None else ())


DEFAULT_KPIS = {
    # TS 28.552 5.1.1.2.1, "Total DL PRB Usage": a percentage; where a node reports only the
    # mean PRBs used (5.1.1.2.5, a count) and available, their ratio.
    "prb_util": KpiSource(measurement="RRU.PrbTotDl", unit="%", ratio=Ratio(
        numerator="RRU.PrbUsedDl", denominator="RRU.PrbAvailDl", scale=100.0)),
    "dl_throughput_mbps": KpiSource(measurement="DRB.UEThpDl", unit="Mbit/s",
                                    scale=0.001),  # kbit/s
    "active_ues": KpiSource(measurement="DRB.MeanActiveUeDl", unit="UEs"),
    "traffic_mb": KpiSource(measurement="DRB.PdcpSduVolumeDL", unit="MB", aggregate="sum",
                            scale=0.125),  # Mbit
}


class E2(BaseModel):
    """E2 ingestion: the rmr-data port and the E2SM-KPM measurement behind each KPI."""

    model_config = MODEL_CONFIG

    enabled: bool = Field(False, json_schema_extra=ON_RESTART)
    """Ingest E2SM-KPM indications on the rmr-data port."""
    port: int = Field(4560, ge=1, le=65535, json_schema_extra=ON_RESTART)
    """The rmr-data port RMR listens on, for E2 and A1 (librmr: librmr_si.so.4 on the library
    path)."""
    submgr_url: str | None = Field(None, min_length=1, pattern=r"^https?://.+",
                                   json_schema_extra=ON_RESTART)
    """The subscription manager's REST base, its API's base path included (on an O-RAN SC
    RIC http://service-ricplt-submgr-http.ricplt:8088/ric/v1); null: do not subscribe
    (frames may still arrive)."""
    e2mgr_url: str = Field(DEFAULT_E2MGR_URL, alias="e2mgrUrl", min_length=1,
                           pattern=r"^https?://.+", json_schema_extra=ON_RESTART)
    """The E2 Manager's REST base, its /v1 included: where the E2 nodes, their cells and RAN
    functions are listed."""
    client_host: str | None = Field(None, min_length=1, json_schema_extra=ON_RESTART)
    """The subscription's ClientEndpoint.Host: where the subscription manager posts each
    subscription's outcome (HTTP) and, with "http" in it turned into "rmr", where the E2 side
    sends this xApp's frames (the chart leaves it null and passes each pod's IP with
    --e2-client-host); null: 127.0.0.1 when the subscription manager is on loopback, else the
    HTTP Service (service-ricxapp-kpi-forecast-http.ricxapp, the O-RAN SC convention)."""
    reporting_period_ms: int | None = Field(None, ge=1)
    """E2SM-KPM reporting period; null: the model's step."""
    kpis: dict[str, KpiSource] = Field(DEFAULT_KPIS, min_length=1)
    """The E2SM-KPM measurement behind each KPI."""

    def endpoint_host(self) -> str:
        """The subscriptions' ClientEndpoint.Host: ``client_host`` when set; else loopback
        when the subscription manager is on loopback (the E2 side then runs on this machine,
        as ``kpi-forecast e2sim`` does), else the HTTP Service's in-cluster name."""
        if self.client_host:
            return self.client_host
        host = urllib.parse.urlsplit(self.submgr_url or "").hostname or ""
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:  # a name, not an address
            loopback = False
        return "127.0.0.1" if loopback else DEFAULT_CLIENT_HOST


class HistoryStore(BaseModel):
    """Where per-cell history lives: this replica's memory, or the RIC's shared Redis (the
    SDL), so that replicas are stateless."""

    model_config = MODEL_CONFIG

    backend: Literal["memory", "redis"] = "memory"
    """memory: this replica alone; redis: shared by every replica."""
    # The braces and comma delimit SDL keys ({namespace},key): not allowed inside a namespace.
    namespace: str = Field("kpi-forecast", min_length=1, max_length=100, pattern=r"^[^{},]+$")
    """SDL namespace: keys are {namespace},key."""
    host: str | None = Field(None, min_length=1)
    """Redis host (null: $DBAAS_SERVICE_HOST)."""
    port: int | None = Field(None, ge=1, le=65535)
    """Redis port (null: $DBAAS_SERVICE_PORT, else 6379)."""
    db: int = Field(0, ge=0, le=15)
    """Redis database number."""
    timeout_ms: float = Field(500.0, gt=0, le=60_000)
    """Longest wait for Redis before a request is answered 503."""
    max_cells: int = Field(100_000, ge=1, le=10_000_000)
    """Most cells first written by E2 ingestion; a report for one more is refused."""
    max_rest_cells: int = Field(10_000, ge=1, le=10_000_000)
    """Most cells first written over REST (POST /v1/cells/.../history): a room of their own,
    so that REST writes never take the room of the cells E2 reports."""
    seed_from: str | None = Field(None, min_length=1)
    """A KPI source each model's history is seeded from when its store is opened (at start): a
    file or Parquet dataset in the container, or the RIC's InfluxDB,
    influx://HOST:PORT/DATABASE?measurement=M&cell=C; each cell's last historyLength steps of
    the model's KPI, for cells the store does not hold yet. null: E2 and REST fill it."""


Access = Literal["open", "key", "off"]
API_KEY_ENV = "KPI_FORECAST_API_KEY"
API_KEY_HEADER = "X-Api-Key"


class Api(BaseModel):
    """Who may call the routes that change what the xApp forecasts. Reading forecasts, cells,
    the model and health stays open to whoever reaches the port (the chart's NetworkPolicy
    says who does). open: any caller; key: a caller whose X-Api-Key header holds the key in
    $KPI_FORECAST_API_KEY (the chart's from a Secret; unset: no caller); off: no caller."""

    model_config = MODEL_CONFIG

    model_control: Access = "key"
    """Model control: reload, a repository's models loaded and unloaded, candidates shadowed,
    promoted and rolled back (POST /v1/model/reload, /v1/models/{name}/load, .../unload,
    .../candidate, .../promote, .../rollback; DELETE .../candidate)."""
    history_writes: Access = "key"
    """History written over REST, of the default model's KPI or a named model's
    (POST /v1/cells/{cell_id}/history, /v1/cells/history, and the same under
    /v1/models/{name})."""


class A1(BaseModel):
    """A1 policies from the non-RT RIC (through the RIC's A1 mediator, over RMR on the
    rmr-data port): the forecasts of groups of cells steered by policy type 30001."""

    model_config = MODEL_CONFIG

    enabled: bool = False
    """Take A1 policy instances, and ask the A1 mediator for those that exist at start-up."""


class ModelControls(BaseModel):
    """One model's own serving settings, in place of the controls' (as Triton's per-model
    configuration); what is left out or null is the controls'."""

    model_config = MODEL_CONFIG

    latency_budget_ms: float | None = Field(None, gt=0, le=60_000)
    """Latency target of this model's forecasts (ms); null: the controls' latencyBudgetMs."""
    batching: Batching | None = None
    """The fields given replace those of the controls' batching for this model's batcher;
    admission is the server's, one for every model (controls.batching.admission)."""
    default_horizon: Annotated[int, Field(ge=1)] | None = None
    """Steps forecast when a request names none; null: the controls' defaultHorizon."""
    quantiles: list[Quantile] | None = Field(None, min_length=1, json_schema_extra={
        "uniqueItems": True})
    """Quantiles returned when a request names none; null: the controls' quantiles."""
    guard: Guard | None = None
    """This model's guard in place of the controls' (null: the controls' guard)."""
    promotion: Promotion | None = None
    """This model's promotion rule in place of the controls' (null: the controls')."""

    @field_validator("quantiles")
    @classmethod
    def _unique(cls, value: list | None) -> list | None:
        return unique_items(value)

    @field_validator("batching")
    @classmethod
    def _server_admission(cls, value: Batching | None) -> Batching | None:
        if value is not None and "admission" in value.model_fields_set:
            raise ValueError("admission is the server's, one for every model: set it in "
                             "controls.batching")
        return value


class Controls(BaseModel):
    """The xApp's own settings; one of modelDir and modelRepository is needed."""

    model_config = MODEL_CONFIG

    model_dir: str | None = Field(None, min_length=1, json_schema_extra=ON_RELOAD)
    """Directory holding model.onnx and metadata.json: the one model served, named by the
    directory's name; null: the models of modelRepository."""
    model_repository: str | None = Field(None, min_length=1, json_schema_extra=ON_RESTART)
    """Directory of models, one subdirectory each, named by it (kpi-forecast train --target
    a,b writes one); each model is loaded, reloaded and unloaded on its own; null: modelDir."""
    models: list[ModelName] | None = Field(None, min_length=1, json_schema_extra={
        "uniqueItems": True, **ON_RESTART})
    """The repository's models loaded at start; null: every subdirectory holding a model."""
    default_model: ModelName | None = Field(None, json_schema_extra=ON_RESTART)
    """The model the routes without a model name (/v1/forecast, /v1/cells/...) answer for;
    null: the first of models, else the first subdirectory by name."""
    model_url: str | None = Field(None, min_length=1, json_schema_extra=ON_RESTART)
    """Where the model comes from when the pod mounts none (as in the chart dms_cli builds): an
    http(s) URL or a file path of a .tar.gz of a model directory (kpi-forecast k8s package
    writes one), unpacked into modelDir at start unless the model there came from this URL;
    null: modelDir holds the model."""
    model_root: str | None = Field(None, min_length=1)
    """Directory every model a reload names must lie in, symlinks resolved (403 otherwise);
    null: modelRepository, else the directory holding modelDir."""
    latency_budget_ms: float = Field(100.0, gt=0, le=60_000)
    """Per-request latency target in milliseconds."""
    per_model: dict[ModelName, ModelControls] = Field(
        {}, json_schema_extra={"additionalProperties": False})
    """Settings of a model, by its name, in place of these (latencyBudgetMs, batching,
    defaultHorizon, quantiles, guard, promotion)."""
    default_horizon: Annotated[int, Field(ge=1)] | None = None
    """Steps forecast when a request names none; null: the model's horizon."""
    quantiles: list[Quantile] | None = Field(None, min_length=1, json_schema_extra={
        "uniqueItems": True})
    """Quantiles returned when a request names none; null: all the model has."""
    batching: Batching = Batching()
    history_length: int = Field(672, ge=1, le=1_000_000, json_schema_extra=ON_RESTART)
    """KPI samples kept per cell."""
    history_store: HistoryStore = Field(HistoryStore(), json_schema_extra=ON_RESTART)
    recalibration: RecalibrationControls = RecalibrationControls()
    scoring: ScoringControls = ScoringControls()
    guard: Guard = Guard()
    promotion: Promotion = Promotion()
    execution_provider: Literal["auto", "cuda", "cpu"] = Field(
        "auto", json_schema_extra=ON_RELOAD)
    """ONNX Runtime execution provider; auto: CUDA when available."""
    precision: Literal["auto", "float32", "float16", "int8"] = Field(
        "auto", json_schema_extra=ON_RELOAD)
    """Which of the model's graphs to serve; auto: the float16 one when CUDA is the active
    provider and the model has it (fused attention kernels take only 16-bit floats), else
    float32; int8: the quantised graph, on the CPU (executionProvider auto or cpu)."""
    intra_op_threads: int = Field(0, ge=0, le=256, json_schema_extra=ON_RELOAD)
    """ONNX Runtime intra-op threads per model call; 0: one per call, and a large batch split
    across the CPUs the process may use."""
    max_request_bytes: int = Field(4 * 2**20, ge=1024, le=2**30)
    """Largest REST request body."""
    registration: Registration = Field(Registration(), json_schema_extra=ON_RESTART)
    api: Api = Api()
    e2: E2 = E2()
    a1: A1 = Field(A1(), json_schema_extra=ON_RESTART)
    publication: Publication = Publication()

    @field_validator("quantiles", "models")
    @classmethod
    def _unique(cls, value: list | None) -> list | None:
        return unique_items(value)

    def for_model(self, model: str) -> Controls:
        """The controls a model is served under: these, with its perModel settings."""
        own = self.per_model.get(model)
        if own is None:
            return self
        update = {field: value for field, value in own if value is not None}
        if own.batching is not None:
            update["batching"] = self.batching.model_copy(update={
                field: getattr(own.batching, field) for field in own.batching.model_fields_set})
        return self.model_copy(update=update)

    def directory_of(self, model: str) -> Path:
        """Where the model named ``model`` is (it need not hold one yet)."""
        if self.model_dir is not None:
            return Path(self.model_dir)
        return Path(self.model_repository or "") / model

    @model_validator(mode="after")
    def _one_model_source(self) -> Controls:
        if (self.model_dir is None) == (self.model_repository is None):
            raise ValueError("name one of modelDir (one model) and modelRepository (a folder "
                             "of models)")
        if self.model_dir is not None and (self.models or self.default_model):
            raise ValueError("models and defaultModel name models of modelRepository")
        if self.model_url is not None and self.model_dir is None:
            raise ValueError("modelUrl fetches one model into modelDir")
        if self.models and self.default_model and self.default_model not in self.models:
            raise ValueError(f"defaultModel {self.default_model} is not among models "
                             f"{self.models}")
        return self

    @model_validator(mode="after")
    def _int8_on_cpu(self) -> Controls:
        if self.precision == "int8" and self.execution_provider == "cuda":
            raise ValueError("precision int8 is the CPU's graph: executionProvider must be "
                             "auto or cpu")
        return self
