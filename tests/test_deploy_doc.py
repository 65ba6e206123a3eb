"""docs/deploy.md's blocks that the page runner (tests/test_readme.py) leaves to this test: its
dms_cli block runs as printed (O-RAN SC's onboarder against a stand-in chart repository, from a
copy of the project's descriptor files), and the Dockerfile of a model image is linted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.ports import free_port
from tests.chart_repository import chart_repository
from tests.oran_onboarder import dms_cli
from tests.readme import blocks

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "deploy.md"
BLOCKS = blocks(PAGE)
HADOLINT = Path(sys.executable).parent / "hadolint"

@pytest.mark.slow
def test_the_onboarding_block_runs_as_printed(helm: Path, tmp_path: Path) -> None:
    (block,) = [b for b in BLOCKS if b.run_by == "tests/test_deploy_doc.py"]
    cli = dms_cli()
    shutil.copytree(ROOT / "xapp" / "descriptor", tmp_path / "xapp" / "descriptor")
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "helm").symlink_to(helm)
    port = free_port()
    env = {**os.environ, "PATH": os.pathsep.join([str(tools), str(cli.parent),
                                                  os.environ["PATH"]]),
           "CHART_REPO_URL": f"http://127.0.0.1:{port}",
           "CHART_WORKSPACE_PATH": str(tmp_path / "workspace")}
    outputs = []
    with chart_repository(port) as repository:
        for command in block.commands:
            done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path,
                                  env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stdout + done.stderr
            outputs.append(done.stdout)
        assert list(repository.charts) == [("kpi-forecast", "0.1.0")]
    created = outputs[0][outputs[0].rindex("\n{") + 1:]
    assert json.loads(created) == {"status": "Created"}  # as the page says it prints
    assert (tmp_path / "charts" / "kpi-forecast-0.1.0.tgz").is_file()


def test_the_model_image_dockerfile_lints_clean(tmp_path: Path) -> None:
    if not HADOLINT.exists():
        pytest.skip(f"hadolint is not installed next to the interpreter ({HADOLINT})")
    (block,) = [b for b in BLOCKS if b.language == "dockerfile"]
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(block.text + "\n")
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    done = subprocess.run([str(HADOLINT), "--config", str(config), "--no-color",
                           "--failure-threshold", "style", str(dockerfile)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr
    # The folder the image's user must be able to read, where controls.modelDir points.
    assert "--chown=10001:10001" in block.text and "/opt/ric/model/" in block.text
