"""Onboarding as a near-RT RIC operator does it: O-RAN SC's own onboarder (`dms_cli`, from
../shared/oran, in its own venv with its pinned requirements) takes the shipped descriptor and
schema, builds the xApp's chart from its generic template with the real helm and uploads it to
a stand-in chart repository; the chart it built is then linted, rendered and validated as this
project's own chart is, and the descriptor as that chart mounts it is read by the xApp's loader.
Installing it (`dms_cli install`) needs a cluster, which these machines do not have.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.ports import free_port
from kpi_forecast.xapp.descriptor import schema as descriptor_schema
from kpi_forecast.xapp.descriptor.config_file import descriptor_path, load_descriptor
from kpi_forecast.xapp.ric import registration
from tests.chart_repository import chart_repository
from tests.oran_onboarder import answer, dms_cli, run_dms_cli

kubernetes_validate = pytest.importorskip("kubernetes_validate")
from kubernetes_validate import utils as kv_utils  # noqa: E402  (only once it is known present)

ROOT = Path(__file__).resolve().parents[1]
DESCRIPTOR = ROOT / "xapp" / "descriptor"
NAME, VERSION = "kpi-forecast", "0.1.0"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def onboarded(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The shipped pair onboarded, the chart listed and downloaded as an operator would."""
    cli = dms_cli()
    work = tmp_path_factory.mktemp("onboarding")
    port = free_port()
    with chart_repository(port):
        url = f"http://127.0.0.1:{port}"

        def run(*args: str) -> Any:
            return answer(run_dms_cli(cli, helm, url, work, *args, cwd=work))

        created = run("onboard", f"--config_file_path={DESCRIPTOR / 'config-file.json'}",
                      f"--shcema_file_path={DESCRIPTOR / 'schema.json'}")  # the tool's spelling
        # The schema of a whole descriptor, as this xApp shipped it before: refused, with the
        # onboarder's complaint about its own required fields inside controls.
        whole = work / "whole-descriptor-schema.json"
        whole.write_text(json.dumps(descriptor_schema.descriptor_schema()))
        refused = run("onboard", f"--config_file_path={DESCRIPTOR / 'config-file.json'}",
                      f"--shcema_file_path={whole}")
        listed = run("get_charts_list")
        downloaded = run("download_helm_chart", f"--xapp_chart_name={NAME}",
                         f"--version={VERSION}", "--output_path=downloaded")
    package = work / "downloaded" / f"{NAME}-{VERSION}.tgz"
    with tarfile.open(package) as archive:
        archive.extractall(work / "chart", filter="data")
    return {"created": created, "refused": refused, "listed": listed,
            "downloaded": downloaded, "package": package, "chart": work / "chart" / NAME}


def test_dms_cli_onboards_the_shipped_descriptor_and_schema(onboarded: dict) -> None:
    assert onboarded["created"] == {"status": "Created"}
    assert [c["version"] for c in onboarded["listed"][NAME]] == [VERSION]
    assert onboarded["downloaded"] == {"status": "OK"}
    assert onboarded["package"].stat().st_size > 0


def test_a_schema_of_the_whole_descriptor_is_refused(onboarded: dict) -> None:
    # Guards the test above: the onboarder does validate, and the shipped file is the kind it
    # takes (the schema of controls), not the kind it refused.
    refused = onboarded["refused"]
    assert refused["status"] == "Input payload validation failed", refused
    assert refused["error_message"] == "'name' is a required property"


def render(helm: Path, chart: Path) -> list[dict[str, Any]]:
    done = subprocess.run([str(helm), "template", "kpi", str(chart), "--namespace", "ricxapp"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def test_the_chart_it_builds_lints_renders_and_validates(onboarded: dict, helm: Path) -> None:
    lint = subprocess.run([str(helm), "lint", "--strict", str(onboarded["chart"])],
                          capture_output=True, text=True, timeout=120, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "[WARNING]" not in lint.stdout and "[ERROR]" not in lint.stdout, lint.stdout
    docs = render(helm, onboarded["chart"])
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "ConfigMap", "Deployment",
                                               "Service", "Service"]
    newest = kv_utils.major_minor(kv_utils.latest_version())
    for doc in docs:
        kubernetes_validate.validate(doc, newest, strict=True)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"docker.io/{NAME}:{VERSION}"
    assert container["readinessProbe"]["httpGet"] == {"path": "ric/v1/health/ready",
                                                      "port": 8080}
    assert [p["name"] for p in container["ports"]] == ["http", "rmr-data", "rmr-route"]
    # What docs/deploy.md says this chart leaves out beside the project's own, and what it
    # takes from the RIC.
    assert "NetworkPolicy" not in {d["kind"] for d in docs}
    assert "securityContext" not in container and "resources" not in container
    assert "securityContext" not in deployment["spec"]["template"]["spec"]
    assert "startupProbe" not in container
    assert {"configMapRef": {"name": "dbaas-appconfig"}} in container["envFrom"]
    assert not any(v.get("persistentVolumeClaim") or v.get("emptyDir")
                   for v in deployment["spec"]["template"]["spec"]["volumes"])


def test_the_xapp_reads_the_descriptor_as_that_chart_mounts_it(
        onboarded: dict, helm: Path, tmp_path: Path) -> None:
    docs = render(helm, onboarded["chart"])
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    environment = configmaps[f"configmap-ricxapp-{NAME}-appenv"]["data"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (mount,) = container["volumeMounts"]
    # The xApp looks where the chart says the descriptor is: the mounted directory.
    assert environment["XAPP_DESCRIPTOR_PATH"] == mount["mountPath"] == "/opt/ric/config"
    mounted = tmp_path / "config"
    mounted.mkdir()
    appconfig = configmaps[f"configmap-ricxapp-{NAME}-appconfig"]["data"]
    for name, text in appconfig.items():
        (mounted / name).write_text(text)
    # What sits beside it is the onboarder's schema of the whole descriptor, ours inside.
    schema = json.loads(appconfig["schema.json"])
    assert schema["properties"]["controls"] == json.loads((DESCRIPTOR / "schema.json")
                                                          .read_text())
    path = descriptor_path(environ={"XAPP_DESCRIPTOR_PATH": str(mounted)})
    loaded = load_descriptor(path)
    shipped = load_descriptor(DESCRIPTOR / "config-file.json")
    assert (loaded.name, loaded.version) == (NAME, VERSION)
    assert loaded.controls == shipped.controls
    # The chart has RMR ask the routing manager for routes, which it gives only to xApps
    # registered with appmgr: the xApp registers there.
    assert environment["RMR_RTG_SVC"] == "4561"
    assert registration.wanted(loaded.controls.registration, environ=environment)
