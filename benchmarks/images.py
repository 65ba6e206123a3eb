"""The container images: what building them costs, their sizes, what the serving image holds,
and its cold start to ready against the same xApp started from a venv.

The images are built with podman as docs/images.md says (``benchmarks/containers.py``), each
build command timed. Cold start: from the command to the first 200 of /ric/v1/health/ready,
the container (``podman run``, read-only root, the model mounted) and the venv
(``kpi-forecast serve``) alternating, on the same model, REPEATS times each. With
``--before REF``, the serving image of that revision is built too, as its own docs/images.md
says (in a storage of its own), and its size and cold start are measured beside this tree's.

    python -m benchmarks.images [--before REF]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pandas as pd

from benchmarks.common import write_section
from benchmarks.containers import GPU, ROOT, SERVING, TRAINING, Podman, missing
from benchmarks.ports import free_port
from benchmarks.results import RESULTS, Results
from tests.xapp_helpers import make_model

REPEATS = 5
COMMAND = "python -m benchmarks.images"
BIN = Path(sys.executable).parent


def ready_after(argv: list[str], url: str, env: dict | None) -> float:
    """Seconds from starting ``argv`` to the first 200 of ``url``; the process is stopped."""
    started = time.monotonic()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() - started > 300:
                raise RuntimeError(f"{argv[:3]} never became ready")
            time.sleep(0.02)
    finally:
        process.terminate()
        process.wait(timeout=30)


def contents(podman: Podman) -> dict[str, str]:
    """What the serving image holds: its packages, the largest, and what it lacks."""
    # The image has no pip: the venv's distributions are counted by importlib.metadata.
    script = ("python -I -c 'import importlib.metadata as m; print(len(list(m.distributions())))';"
              " du -sm /opt/venv | cut -f1;"
              " du -sm /opt/venv/lib/python3.11/site-packages/* | sort -rn | head -5;"
              " command -v gcc cc g++ cmake git make | wc -l;"
              " python -c 'import importlib.util as u; print(u.find_spec(\"torch\") is None)'")
    done = podman("run", "--rm", "--network=none", "--entrypoint", "sh", SERVING, "-c", script)
    lines = done.stdout.split("\n")
    largest = [line.split("\t") for line in lines[2:7]]
    return {"packages": lines[0].strip(), "venv_mb": lines[1].strip(),
            "largest": ", ".join(f"{Path(p).name} {mb} MB" for mb, p in largest),
            "compilers": lines[7].strip(), "no_torch": lines[8].strip()}


def cold_starts(podman: Podman, work: Path, before: Podman | None = None
                ) -> dict[str, list[float]]:
    """Seconds to ready of the serving container, of the venv and (``before``) of the serving
    container of the tree compared with, in turn, REPEATS times each."""
    model = make_model(work / "model")
    engines = {"container": podman} | ({} if before is None else {"container before": before})
    times: dict[str, list[float]] = {kind: [] for kind in [*engines, "venv"]}
    for _ in range(REPEATS):
        for kind in times:
            port = free_port()
            url = f"http://127.0.0.1:{port}/ric/v1/health/ready"
            if kind in engines:
                argv = ["podman", "run", "--rm", "--network=host", "--read-only", "--tmpfs",
                        "/tmp", "-v", f"{model}:/opt/ric/model:ro", SERVING, "--host",
                        "127.0.0.1", "--port", str(port)]
                times[kind].append(ready_after(argv, url, engines[kind].env))
            else:
                argv = [str(BIN / "kpi-forecast"), "serve", "--model", str(model), "--host",
                        "127.0.0.1", "--port", str(port)]
                times[kind].append(ready_after(argv, url, None))
    return times


@contextlib.contextmanager
def tree_at(ref: str, where: Path) -> Iterator[tuple[Path, str]]:
    """A git worktree of ``ref`` at ``where`` (and its short revision), removed after."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--quiet", "--detach",
                    str(where), ref], check=True)
    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref],
                              capture_output=True, text=True, check=True).stdout.strip()
    try:
        yield where, revision
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)],
                       check=False, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REF", help="also build the serving image of this "
                        "git ref as its docs/images.md says, and compare its size and cold "
                        "start with this tree's")
    args = parser.parse_args()
    lacking = missing()
    if lacking:
        print(f"the image builds need {', '.join(lacking)}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        podman = stack.enter_context(closing(Podman(Path(tmp) / "podman")))
        before, compared = None, None
        if args.before:
            tree, revision = stack.enter_context(tree_at(args.before, Path(tmp) / "before"))
            before = stack.enter_context(closing(Podman(Path(tmp) / "podman-before", tree)))
            before.build(serving_only=True)
            compared = {"revision": revision, "size": before.size_mb(SERVING)}
        podman.build()
        sizes = {image: podman.size_mb(image) for image in (SERVING, GPU, TRAINING)}
        held = contents(podman)
        starts = cold_starts(podman, Path(tmp), before)
    builds = pd.DataFrame({"command": list(podman.seconds),
                           "seconds": list(podman.seconds.values())})
    RESULTS.mkdir(parents=True, exist_ok=True)
    builds.to_csv(RESULTS / "image_builds.csv", index=False)
    pd.DataFrame(starts).to_csv(RESULTS / "image_cold_start.csv", index_label="run")
    command = COMMAND + (f" --before {compared['revision']}" if compared else "")
    figures = {**{f"{image} MB": size for image, size in sizes.items()},
               "serving venv MB": float(held["venv_mb"])}
    if compared:
        figures[f"{SERVING} MB at {compared['revision']}"] = compared["size"]
    results = Results("images", command, "benchmarks.md", "container-images", figures=figures,
                      tables=["image_builds", "image_cold_start"])
    section = markdown(builds, sizes, held, starts, results, compared)
    print(section)
    write_section(results, section)
    return 0


def markdown(builds: pd.DataFrame, sizes: dict[str, float], held: dict[str, str],
             starts: dict[str, list[float]], results: Results, compared: dict | None) -> str:
    def what(command: str) -> str:
        for image in (GPU, TRAINING, SERVING):  # the GPU tag contains the serving one
            if image in command:
                return f"build {image}"
        return command.split()[0]

    steps = ", ".join(f"{what(c)} {s:.0f}" for c, s in zip(builds["command"], builds["seconds"],
                                                           strict=True))

    def spread(values: list[float]) -> str:
        return (f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})")

    ratio = statistics.median(starts["container"]) / statistics.median(starts["venv"])
    before_size, before_start = "", ""
    if compared:
        revision = compared["revision"]
        before_size = (f" (at `{revision}`, as its docs/images.md builds it: "
                       f"{compared['size']:,.0f} MB)")
        before_ratio = (statistics.median(starts["container"])
                        / statistics.median(starts["container before"]))
        before_start = (f"| container at `{revision}` | {spread(starts['container before'])} |\n"
                        f"| container / container at `{revision}` | {before_ratio:.2f}x |\n")
    return f"""## Container images

{results.measured} (part of `make bench`):
podman (runc) building as docs/images.md says, on a Debian bookworm base from debootstrap; \
cold starts alternating, {REPEATS} of each, on the test model.

Seconds per step of docs/images.md: {steps}; all {builds["seconds"].sum():.0f}.
Sizes: {SERVING} {sizes[SERVING]:,.0f} MB{before_size}, {GPU} {sizes[GPU]:,.0f} MB,
{TRAINING} {sizes[TRAINING]:,.0f} MB.
The serving image's venv: {held["venv_mb"]} MB, {held["packages"]} packages, the largest
{held["largest"]}; compilers found: {held["compilers"]}; torch absent: {held["no_torch"]}.

| cold start to ready | median (min-max) |
|---|---:|
| container (`podman run`, read-only root, model mounted) | {spread(starts["container"])} |
| venv (`kpi-forecast serve`) | {spread(starts["venv"])} |
| container / venv | {ratio:.2f}x |
{before_start}"""


if __name__ == "__main__":
    sys.exit(main())
