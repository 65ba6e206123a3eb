"""A schema-driven fuzzer against a running xApp: schemathesis reads the xApp's own OpenAPI
document and runs every phase (examples, coverage, fuzzing, stateful) with every check but one,
in at most FUZZ_SECONDS, as a caller with the API key and as one without (the restricted route
groups then answer 403, as the document says). Nothing may fail and nothing may error.

The check left out, positive_data_acceptance, asks that every schema-valid request be taken.
Two kinds cannot be: an Arrow body is binary in the schema (no JSON Schema says which bytes are
an Arrow stream), and a model directory named in a reload may exist and hold no model. The one
operation left out, a model's unload, does what it says: the model's routes answer 503 until
it is loaded again, and the rest of the run would read as the server's errors
(tests/test_model_repository.py tests it).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from benchmarks.ports import free_port
from kpi_forecast.xapp.descriptor.controls import API_KEY_ENV, API_KEY_HEADER
from tests.processes import BIN, ROOT, answers, running
from tests.xapp_helpers import make_model, write_descriptor

FUZZ_SECONDS = 20  # per caller
PHASES = ("Examples", "Coverage", "Fuzzing", "Stateful")
KEY = "fuzz-key-0123456789"


@pytest.mark.slow
@pytest.mark.parametrize("with_key", [True, False], ids=["with-key", "without-key"])
def test_schemathesis_finds_no_failure_and_no_error(tmp_path: Path, with_key: bool) -> None:
    config = write_descriptor(tmp_path / "config", make_model(tmp_path / "model"),
                              api={"modelControl": "key", "historyWrites": "key"})
    url = f"http://127.0.0.1:{free_port()}"
    serve = [str(BIN / "kpi-forecast"), "serve", "--config", str(config), "--host", "127.0.0.1",
             "--port", url.rsplit(":", 1)[1]]
    fuzz = [str(BIN / "schemathesis"), "run", f"{url}/openapi.json", "--checks", "all",
            "--exclude-checks", "positive_data_acceptance", "--exclude-operation-id", "unload",
            "--phases", ",".join(p.lower() for p in PHASES), "--max-time", str(FUZZ_SECONDS),
            "--seed", "0", "--generation-database", "none", "--no-color",
            "--report", "junit", "--report-junit-path", str(tmp_path / "junit.xml"),
            *(["--header", f"{API_KEY_HEADER}: {KEY}"] if with_key else [])]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks", "PYTHONPATH": str(ROOT)}
    with running(serve, answers(f"{url}/ric/v1/health/ready"), tmp_path / "xapp.log",
                 env={**os.environ, API_KEY_ENV: KEY}) as xapp:
        done = subprocess.run(fuzz, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=FUZZ_SECONDS + 60)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-6000:]
    for phase in PHASES:
        assert f"✅  {phase}" in report, report[-6000:]
    summary = report[report.rindex("SUMMARY"):]
    assert "Failures:" not in summary and "Errors:" not in summary, summary
    assert "Traceback" not in xapp.log, xapp.log[-6000:]
    assert KEY not in xapp.log  # never logged
