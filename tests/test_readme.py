"""The README and the documentation pages are executable: every command block runs as printed,
in order (the README, then the pages in the site's order), in a working directory holding the
files it names (``kpis.csv.gz``: three cells and five weeks of the sample; ``recent.csv``: their
last three weeks). Servers (``kpi-forecast serve``, ``e2sim``) start in the background; the
commands after them run once each, when the servers are ready and what they do in the
background has happened (a mock E2 node's replay taken in by the xApp: a condition, with a
bound from the replay's length); each server must exit 0 within seconds of SIGTERM at the end
of its block.

A block marked ``<!-- not run here: ... -->`` is checked as far as these machines allow: its
commands are parsed by the CLI, the chart rendered with the same flags and validated, the
Dockerfile read for the build's arguments and target, the routes it asks for looked up. A block
marked ``<!-- run by tests/... -->`` is run by that test, with what it needs around it (the
images' builds, the RIC's onboarder). ``text`` blocks that start with a command are synopses:
each is parsed by the CLI's parser.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import jsonschema
import pandas as pd
import pytest
import yaml

from kpi_forecast.cli.main import build_parser
from tests.processes import BIN, ROOT, Server, answers
from tests.readme import PLACEHOLDER, Block, blocks, pages, synopses
from tests.rmr_library import RMR
from tests.system_tools import system_tool

SAMPLE = ROOT / "data/sample/cells_hourly.csv.gz"
BLOCKS = [block for page in pages() for block in blocks(page)]
COMMANDS = [b for b in BLOCKS if b.language == "bash" and not b.run_by]
SYNOPSES = [b for b in BLOCKS if b.language == "text" and synopses(b)]
SERVERS = {("kpi-forecast", "serve"), ("kpi-forecast", "e2sim")}
WAIT_FOR_SERVERS_S = 60.0
REPOSITORY_TOOLS = ("promtool",)  # system tools a page runs on the repository's files


@dataclass
class Ran:
    command: str
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readme")
    frame = pd.read_csv(SAMPLE)
    frame = frame[frame["cell_id"].isin(sorted(frame["cell_id"].unique())[:3])]
    stamps = pd.to_datetime(frame["timestamp"], utc=True)
    frame = frame[stamps < stamps.min() + pd.Timedelta(days=35)]
    frame.to_csv(root / "kpis.csv.gz", index=False)
    (root / "data" / "sample").mkdir(parents=True)  # the sample, where the repository has it
    shutil.copy2(SAMPLE, root / "data" / "sample" / SAMPLE.name)
    recent = frame[stamps[frame.index] >= stamps.min() + pd.Timedelta(days=14)]
    recent.to_csv(root / "recent.csv", index=False)
    return root


def environment() -> dict[str, str]:
    # As after `. .venv/bin/activate`: kpi-forecast, python and torchrun are the venv's; and
    # after the README's `export LD_LIBRARY_PATH=$PWD/../shared/rmr/lib` (librmr, for E2).
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [
                str(RMR / "lib"), os.environ.get("LD_LIBRARY_PATH")]))}


def words(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def ready_check(argv: list[str]) -> Callable[[], bool]:
    """When a server of the README answers: the xApp's readiness, the mock's node list."""
    def option(name: str, default: str) -> str:
        return argv[argv.index(name) + 1] if name in argv else default

    if argv[1] == "serve":
        return answers(f"http://127.0.0.1:{option('--port', '8080')}/ric/v1/health/ready")
    return answers(f"http://{option('--listen', '127.0.0.1:8090')}/v1/nodeb/states")


def run(command: str, cwd: Path) -> Ran:
    """``command`` through bash, once: a command that fails fails the block."""
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd,
                          env=environment(), capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise AssertionError(f"`{command}` exited {done.returncode}:\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return Ran(command, done.stdout, done.stderr)


def replayed(node: list[str], xapp: list[str], cwd: Path) -> tuple[Callable[[], bool], float]:
    """The mock E2 node has replayed its file to every subscription and the xApp has taken
    every report it sent; the bound is the replay's own length at its speed (with room for a
    busy machine) plus the xApp's first rounds of finding and subscribing to the nodes."""
    from kpi_forecast.data.ingest import load_panel
    from kpi_forecast.xapp.ric.e2.ownership import ROUND_S

    def option(argv: list[str], name: str, default: str) -> str:
        return argv[argv.index(name) + 1] if name in argv else default

    node_url = f"http://{option(node, '--listen', '127.0.0.1:8090')}"
    xapp_url = f"http://127.0.0.1:{option(xapp, '--port', '8080')}"
    column = option(node, "--kpi", "").split("=", 1)[0]
    panel = load_panel(cwd / option(node, "--data", ""), column)
    speed = float(option(node, "--speed", "1"))
    replay_s = panel.n_steps * panel.step.total_seconds() / speed if speed else 0.0

    def done() -> bool:
        try:
            stats = httpx.get(f"{node_url}/stats", timeout=5).json()
            metrics = httpx.get(f"{xapp_url}/ric/v1/metrics", timeout=5).text.splitlines()
        except httpx.TransportError:
            return False
        subscriptions = sum(len(ends) for ends in stats["subscribers"].values())
        taken = next(float(line.split()[1]) for line in metrics
                     if line.startswith("kpi_forecast_e2_indications_total "))
        return (subscriptions > 0 and stats.get("replays_done", 0) == subscriptions
                and taken == stats.get("indications", 0))

    return done, 3 * replay_s + 5 * ROUND_S


def settled(servers: list[tuple[list[str], Server]], cwd: Path) -> None:
    """Wait, before the block's next command, for what its servers do in the background: a
    mock E2 node's replay into the xApp. Readiness was waited for as each started."""
    kinds = {argv[1]: argv for argv, _ in servers}
    if "e2sim" in kinds and "serve" in kinds:
        condition, bound = replayed(kinds["e2sim"], kinds["serve"], cwd)
        servers[-1][1].wait_until(condition, bound)


def run_block(block: Block, cwd: Path, logs: Path) -> list[Ran]:
    started: list[tuple[list[str], Server]] = []
    servers: list[Server] = []
    ran: list[Ran] = []
    try:
        for command in block.commands:
            argv = words(command)
            if tuple(argv[:2]) in SERVERS:
                server = Server(["bash", "-c", f"exec {command}"], logs / f"{argv[1]}.log",
                                cwd, environment())
                servers.append(server)
                server.wait_until(ready_check(argv), WAIT_FOR_SERVERS_S)
                started.append((argv, server))
                continue
            if started:
                settled(started, cwd)
                started = []
            if argv == ["make", "test"]:
                # The suite cannot run itself: its recipe must exist, and CI runs it.
                ran.append(run("make -n test", ROOT))
                assert "make test" in (ROOT / ".ci/run").read_text()
            else:
                if argv[0] in REPOSITORY_TOOLS:
                    system_tool(argv[0])
                # make and promtool read the repository's own files
                where = ROOT if argv[0] in ("make", *REPOSITORY_TOOLS) else cwd
                ran.append(run(command, where))
    except BaseException:
        for server in servers:
            if server.process.poll() is None:
                server.process.kill()
        raise
    for server in reversed(servers):
        server.stop()  # exit 0 within seconds of SIGTERM, or the block fails
    return ran


# --- what each runnable block must have produced -------------------------------------------


def demo(ran: list[Ran], cwd: Path) -> None:
    out = ran[0].stdout
    assert "artifacts: artifacts/demo/" in out
    # Two KPIs, a model each in one repository, served together: each answers from its model.
    for kpi in ("traffic_mb", "prb_util"):
        assert (ROOT / "artifacts/demo" / kpi / "model.onnx").is_file()
        assert f"/v1/models/{kpi}/forecast" in out
    assert out.count('"source": "model"') == 2
    forecasts = pd.read_csv(ROOT / "artifacts/demo/forecast.csv")
    assert forecasts.groupby("kpi").size().to_dict() == {"prb_util": 24 * 24,
                                                         "traffic_mb": 24 * 24}


def quick_start(ran: list[Ran], cwd: Path) -> None:
    """Trained on the sample, served, asked: the answer has the shape the README shows."""
    assert "model: models/sample/model.onnx" in ran[0].stdout
    assert (cwd / "models/sample/report.md").is_file()
    answer = json.loads(ran[-1].stdout)
    assert set(answer) == {"cell_id", "forecasts", "model_version", "source", "reason",
                           "latency_ms"}
    assert answer["cell_id"] == "c1" and answer["source"] == "model"
    assert answer["model_version"].startswith("prb_util-")
    assert len(answer["forecasts"]) == 24
    first = answer["forecasts"][0]
    assert set(first) == {"timestamp", "p10", "p50", "p90"}
    assert first["timestamp"] == "2024-04-02T00:00:00+02:00"
    assert first["p10"] <= first["p50"] <= first["p90"]


def trained(ran: list[Ran], cwd: Path) -> None:
    meta = json.loads((cwd / "models/prb/metadata.json").read_text())
    assert meta["target"] == "prb_util" and meta["training"]["ranks"] == 1
    assert "model: models/prb/model.onnx" in ran[0].stdout
    # No --context: the report says which one the data allowed, and why.
    assert "median cell spans" in meta["training"]["context_choice"]
    assert meta["training"]["context_choice"] in (cwd / "models/prb/report.md").read_text()


def trained_repository(ran: list[Ran], cwd: Path) -> None:
    for kpi in ("prb_util", "traffic_mb"):
        assert json.loads((cwd / "models/kpis" / kpi / "metadata.json").read_text())[
            "target"] == kpi
    assert "kpi-forecast serve --models models/kpis" in ran[0].stdout
    forecast = pd.read_csv(cwd / "kpis-forecast.csv")
    assert forecast.groupby("kpi").size().to_dict() == {"prb_util": 3 * 24, "traffic_mb": 3 * 24}


def served_repository(ran: list[Ran], cwd: Path) -> None:
    models = json.loads(ran[0].stdout)["models"]
    assert [(m["name"], m["state"]) for m in models] == [("prb_util", "READY"),
                                                         ("traffic_mb", "READY")]
    answer = json.loads(ran[1].stdout)
    assert answer["model_version"].startswith("traffic_mb-") and answer["source"] == "model"
    kserve = json.loads(ran[2].stdout)
    [content] = kserve["outputs"][0]["content"]
    assert kserve["model"] == "prb_util" and len(content["mean_forecast"]) == 24


def trained_at_scale(ran: list[Ran], cwd: Path) -> None:
    assert len(list((cwd / "kpis").rglob("*.parquet"))) == 8
    meta = json.loads((cwd / "models/t/metadata.json").read_text())
    assert meta["training"]["ranks"] == 2 and meta["target"] == "traffic_mb"


def train_job(ran: list[Ran], cwd: Path) -> None:
    import kubernetes_validate

    from tests.test_helm import KUBE_VERSIONS

    documents = [d for d in yaml.safe_load_all(ran[0].stdout) if d]
    assert {d["kind"] for d in documents} == {"Job", "Service"}
    for document in documents:
        kubernetes_validate.validate(document, KUBE_VERSIONS[1], strict=True)
    assert "--max-minutes" in json.dumps(documents)


def evaluated(ran: list[Ran], cwd: Path) -> None:
    overall = pd.read_csv(cwd / "models/prb/backtest/overall.csv", index_col="model")
    assert "kpi-forecast" in overall.index and overall.notna().any().all()
    forecast = pd.read_csv(cwd / "forecast.csv")
    assert list(forecast.columns) == ["cell_id", "timestamp", "p10", "p50", "p90"]
    assert len(forecast) == 3 * 24 and (forecast["p10"] <= forecast["p90"]).all()
    assert "model: models/prb/model.onnx" in ran[2].stdout
    meta = json.loads((cwd / "models/prb/metadata.json").read_text())
    assert (cwd / "models/prb" / meta["onnx"]["float16"]["file"]).is_file()


def served(ran: list[Ran], cwd: Path) -> None:
    assert json.loads(ran[0].stdout)["status"] == "ready"
    answer = json.loads(ran[1].stdout)
    assert answer["source"] == "model" and len(answer["forecasts"]) == 24


def watched(ran: list[Ran], cwd: Path) -> None:
    """Operating: both probes answer, and the metrics say a model is ready within its budget."""
    assert json.loads(ran[0].stdout) == {"status": "alive"}
    ready = json.loads(ran[1].stdout)
    assert ready["status"] == "ready" and ready["model_version"].startswith("prb_util-")
    samples = dict(line.split() for line in ran[2].stdout.splitlines())
    assert float(samples['kpi_forecast_model_ready{model="prb"}']) == 1
    assert float(samples['kpi_forecast_latency_budget_seconds{model="prb"}']) > 0


def rules_checked(ran: list[Ran], cwd: Path) -> None:
    assert "SUCCESS" in ran[0].stdout and "SUCCESS" in ran[1].stdout


def ingested(ran: list[Ran], cwd: Path) -> None:
    answer = json.loads(ran[0].stdout)  # the file's first cell, named as e2mgr names it
    assert answer["cell_id"] == "00f110:0000000000" and len(answer["forecasts"]) == 24
    cells = json.loads(ran[1].stdout)  # one node serves the three: subscribed together
    assert sorted(c["cell_id"] for c in cells["cells"]) == [
        "00f110:0000000000", "00f110:0000000010", "00f110:0000000020"]


def connected(ran: list[Ran], cwd: Path) -> None:
    """The cells found in the nodes' F1 setups, held; one E2 subscription per cell at the
    subscription manager, each reporting to the xApp's RMR endpoint."""
    cells = json.loads(ran[0].stdout)
    assert sorted(c["cell_id"] for c in cells["cells"]) == [
        "00f110:0000000000", "00f110:0000000010", "00f110:0000000020"]
    listed = json.loads(ran[1].stdout)
    assert sorted(entry["SubscriptionId"] for entry in listed) == [1, 2, 3]
    assert all(entry["ClientEndpoint"] == ["127.0.0.1:4560"] for entry in listed)


def packaged(ran: list[Ran], cwd: Path) -> None:
    with tarfile.open(cwd / "prb-v2.tar.gz") as archive:
        assert {"model.onnx", "metadata.json"} <= {Path(n).name for n in archive.getnames()}


# What a block's first command starts with (a page's own blocks first: "page.md:command").
PRODUCED = {
    "operating.md:kpi-forecast serve": watched, "promtool check rules": rules_checked,
    "make demo": demo, "kpi-forecast train --data data/sample": quick_start,
    "kpi-forecast train --data kpis.csv.gz": trained, "python -m": trained_at_scale,
    "kpi-forecast k8s train-job": train_job, "kpi-forecast backtest": evaluated,
    "kpi-forecast serve": served, "kpi-forecast e2sim": ingested,
    "ric.md:kpi-forecast e2sim": connected,
    "kpi-forecast k8s package": packaged,
    "training.md:kpi-forecast train --data kpis.csv.gz --target prb_util,": trained_repository,
    "serving.md:kpi-forecast serve --models": served_repository,
}


def produced(block: Block) -> Callable[[list[Ran], Path], None]:
    first = " ".join(words(block.commands[0]))
    own = [check for start, check in PRODUCED.items() if f"{block.page}:{first}".startswith(start)]
    matches = own or [check for start, check in PRODUCED.items() if first.startswith(start)]
    assert len(matches) == 1, f"no check of what {first!r} produces: add one to PRODUCED"
    return matches[0]


# --- blocks that cannot run here -----------------------------------------------------------


def parse_cli(argv: list[str]) -> None:
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"kpi-forecast {' '.join(argv)}: the CLI refuses it") from exc


def check_docker_build(argv: list[str]) -> None:
    from tests.test_image import DOCKERFILE, stages

    text = DOCKERFILE.read_text()
    names = {stage.name for stage in stages(text)}
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == "--build-arg":
            assert f"ARG {value.split('=', 1)[0]}" in text, value
        if flag == "--target":
            assert value in names, f"no stage {value!r} in {DOCKERFILE}"
    assert argv[-1] == "." and DOCKERFILE.parent == ROOT


def helm_template(argv: list[str]) -> list[dict]:
    import kubernetes_validate

    from tests.k8s_tools import tool
    from tests.test_helm import CRD_KINDS, KUBE_VERSIONS

    helm = tool("helm")
    assert helm is not None, "helm unavailable: install the dev extra"
    done = subprocess.run([str(helm), "template", *argv[2:]], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    documents = [d for d in yaml.safe_load_all(done.stdout) if d]
    for document in documents:
        if document["kind"] not in CRD_KINDS:  # those are checked against their CRDs there
            kubernetes_validate.validate(document, KUBE_VERSIONS[1], strict=True)
    return documents


def created_secret(argv: list[str]) -> tuple[str, set[str]]:
    """`kubectl create secret generic NAME --from-literal=KEY=...`: its name and keys."""
    name = argv[argv.index("generic") + 1]
    keys = {a.split("=", 2)[1] for a in argv if a.startswith("--from-literal=")}
    assert keys, f"`{' '.join(argv)}` puts nothing in the Secret"
    return name, keys


def check_secret_refs(documents: list[dict], secrets: dict[str, set[str]]) -> None:
    """Every Secret the rendered pods read is one created above, with the key they read."""
    refs = [env["valueFrom"]["secretKeyRef"] for d in documents if d["kind"] == "Deployment"
            for c in d["spec"]["template"]["spec"]["containers"] for env in c.get("env", [])
            if "secretKeyRef" in env.get("valueFrom", {})]
    for ref in refs:
        assert ref["key"] in secrets.get(ref["name"], set()), f"no Secret gives {ref}"


def check_port_forward(argv: list[str], documents: list[dict]) -> None:
    target = next(a for a in argv if a.startswith("service/")).split("/", 1)[1]
    local, _, remote = argv[-1].partition(":")
    service = next((d for d in documents if d["kind"] == "Service"
                    and d["metadata"]["name"] == target), None)
    assert service is not None, f"the chart renders no Service {target}"
    assert int(remote) in {p["port"] for p in service["spec"]["ports"]}


def check_request(command: str) -> None:
    """The route a curl asks for exists, and its JSON body is one the route's schema takes."""
    from kpi_forecast.xapp.app import create_app
    from kpi_forecast.xapp.descriptor.config_file import descriptor_path, load_descriptor

    expanded = subprocess.run(["bash", "-c", "printf '%s\\0' " + command.split(" ", 1)[1]],
                              capture_output=True, text=True, check=True).stdout.split("\0")
    url = next(a for a in expanded if "localhost:" in a)
    method = expanded[expanded.index("-X") + 1].lower() if "-X" in expanded else "get"
    document = create_app(load_descriptor(descriptor_path()), watch_config=False).openapi()
    operation = document["paths"][urllib.parse.urlsplit(f"http://{url}").path][method]
    if "-d" in expanded:
        body = json.loads(expanded[expanded.index("-d") + 1])
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        jsonschema.validate(body, {**schema, "components": document["components"]})


def check_a1_request(command: str) -> None:
    """A call of the A1 mediator's northbound API: the policy type it loads is the one the
    chart ships, and an instance it creates is one that type and the xApp take."""
    from kpi_forecast.cli.schema_files import A1_POLICY_TYPE
    from kpi_forecast.xapp.ric.a1.policy_type import POLICY_TYPE_ID, ForecastPolicy

    expanded = subprocess.run(["bash", "-c", "printf '%s\\0' " + command.split(" ", 1)[1]],
                              capture_output=True, text=True, check=True, cwd=ROOT
                              ).stdout.split("\0")
    assert expanded[expanded.index("-X") + 1] == "PUT"
    path = urllib.parse.urlsplit(next(a for a in expanded if "/A1-P/" in a)).path
    parts = path.strip("/").split("/")  # A1-P v2 policytypes ID [policies INSTANCE]
    assert parts[:3] == ["A1-P", "v2", "policytypes"] and parts[3] == str(POLICY_TYPE_ID), path
    shipped = json.loads((ROOT / A1_POLICY_TYPE).read_text())
    data = expanded[expanded.index("-d") + 1]
    if len(parts) == 4:
        assert data == f"@{A1_POLICY_TYPE}" and shipped["policy_type_id"] == POLICY_TYPE_ID
        return
    assert parts[4] == "policies" and len(parts) == 6, path
    body = json.loads(data)
    jsonschema.Draft7Validator(shipped["create_schema"]).validate(body)
    ForecastPolicy.model_validate(body)


def check_dms_cli_install(argv: list[str]) -> None:
    """It names the chart the onboarder built from the shipped descriptor."""
    options = dict(a.removeprefix("--").split("=", 1) for a in argv[2:])
    descriptor = json.loads((ROOT / "xapp/descriptor/config-file.json").read_text())
    assert (options["xapp_chart_name"], options["version"]) == (descriptor["name"],
                                                                descriptor["version"])


def check_podman_run(argv: list[str]) -> None:
    """It runs an image the container tests build, the serving one as they run it."""
    from benchmarks.containers import SERVING, TRAINING

    (image,) = {SERVING, TRAINING} & set(argv)
    if image == SERVING:
        assert {"--read-only", "--tmpfs"} <= set(argv)
        assert any(a.endswith(":/opt/ric/model:ro") for a in argv)
    else:
        parse_cli(argv[argv.index(image) + 1:])


def check_offline(block: Block) -> None:
    documents: list[dict] = []
    secrets: dict[str, set[str]] = {}
    for command in block.commands:
        argv = words(command)
        if argv[0] == "kpi-forecast":
            parse_cli(argv[1:])
        elif argv[:2] == ["docker", "build"]:
            check_docker_build(argv)
        elif argv[:2] == ["helm", "install"] or argv[:3] == ["helm", "upgrade", "--install"]:
            documents = helm_template([a for a in argv if a != "--install"])
            if secrets:
                check_secret_refs(documents, secrets)
        elif argv[0] == "kubectl" and argv[3:6] == ["create", "secret", "generic"]:
            name, keys = created_secret(argv)
            secrets[name] = keys
        elif argv[0] == "kubectl" and "port-forward" in argv:
            check_port_forward(argv, documents)
        elif argv[0] == "curl" and "/A1-P/v2/policytypes/" in command:
            check_a1_request(command)
        elif argv[0] == "curl":
            check_request(command)
        elif argv[:2] == ["dms_cli", "install"]:
            check_dms_cli_install(argv)
        elif argv[:2] == ["podman", "run"]:
            check_podman_run(argv)
        else:
            raise AssertionError(f"no offline check for `{command}`: add one")


# --- the tests -----------------------------------------------------------------------------


def test_every_command_block_runs_or_says_what_it_needs() -> None:
    assert COMMANDS and SYNOPSES
    for block in COMMANDS:
        assert " [--" not in block.text, f"line {block.line}: options belong in a text synopsis"
        if block.needs:
            assert block.checked, f"line {block.line}: say how it is checked instead"
    # A block another test runs names that test, and the test reads the block's page.
    for block in BLOCKS:
        if block.run_by:
            assert f"docs/{block.page}" in (ROOT / block.run_by).read_text(), \
                f"{block.run_by} does not name docs/{block.page}"


@pytest.mark.parametrize("block", SYNOPSES, ids=lambda b: b.name)
def test_synopses_are_what_the_cli_takes(block: Block) -> None:
    for argv in synopses(block):
        parse_cli(argv)


OPTION = re.compile(r"\[(--[a-z0-9-]+) ([^\]]+)\]")  # [--speed 1], [--cells-from a|b]


def subcommand(words: list[str]) -> argparse.ArgumentParser:
    """The parser of ``kpi-forecast WORDS...`` (``k8s train-job``: two levels down)."""
    parser = build_parser()
    for word in words:
        choices = next((a.choices for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction)), {})
        if word not in choices:
            break
        parser = choices[word]
    return parser


def takes(action: argparse.Action, value: object) -> bool:
    """Whether the option takes ``value`` written out."""
    try:
        if callable(action.type) and not isinstance(value, list | tuple):
            action.type(str(value))
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        return False
    return True


@pytest.mark.parametrize("block", SYNOPSES, ids=lambda b: b.name)
def test_synopses_show_the_defaults_the_cli_has(block: Block) -> None:
    """An option's value in a synopsis is its default where it has one (the first of
    alternatives), else a placeholder (``STEP``, ``N``), never an example."""
    parser, wrong = None, []
    for line in block.text.splitlines():
        if line.startswith("kpi-forecast "):
            parser = subcommand(line.split()[1:3])
        elif not line.startswith(" "):
            parser = None
        for option, value in OPTION.findall(line) if parser is not None else ():
            action = parser._option_string_actions[option]
            default, shown = action.default, value.split("|")[0]
            if default is None or default is False or default in ("", [], {}) or not takes(
                    action, default):  # none, or a sentinel the option refuses (0: auto)
                if not PLACEHOLDER.match(shown):
                    wrong.append(f"{option} {value}: no default, so a placeholder")
            elif shown != (",".join(map(str, default)) if isinstance(default, list | tuple)
                           else str(default)) and not (isinstance(default, float)
                                                       and float(shown) == default):
                wrong.append(f"{option} {value}: the default is {default!r}")
    assert not wrong, wrong


@pytest.mark.slow
@pytest.mark.parametrize("block", COMMANDS, ids=lambda b: b.name)
def test_block(block: Block, workdir: Path, tmp_path: Path) -> None:
    if block.needs:
        check_offline(block)
        return
    if "e2sim" in block.text and not (RMR / "lib" / "librmr_si.so.4").is_file():
        pytest.skip(f"the E2 quick start needs librmr: {RMR / 'lib'} not present")
    ran = run_block(block, workdir, tmp_path)
    produced(block)([r for r in ran if not r.command.startswith("make -n")], workdir)
