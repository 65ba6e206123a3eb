"""`kpi-forecast models candidate|promote|rollback`: the deployment's model decisions asked of a
running xApp over its model-control routes (docs/lifecycle.md), as an operator or a retraining
Job's last step does. The API key, where the routes need one, is read from
$KPI_FORECAST_API_KEY, as the xApp reads it."""

from __future__ import annotations

import argparse
import os

from kpi_forecast.model.errors import UserError
from kpi_forecast.xapp.descriptor.controls import API_KEY_ENV, API_KEY_HEADER

TIMEOUT_S = 120.0  # a candidate is loaded, verified and warmed up before the answer


def decide(xapp: str, method: str, path: str, body: dict | None = None) -> dict:
    """The decision the xApp at ``xapp`` answers; UserError (one line) for any refusal."""
    import httpx  # the serving side's: the training image's command line leaves it out

    key = os.environ.get(API_KEY_ENV)
    url = xapp.rstrip("/") + path
    try:
        response = httpx.request(method, url, json=body, timeout=TIMEOUT_S,
                                 headers={API_KEY_HEADER: key} if key else None)
    except httpx.HTTPError as exc:
        raise UserError(f"{url}: cannot reach the xApp: {exc}") from None
    if response.status_code >= 400:
        try:
            reason = response.json()["error"]
        except (ValueError, KeyError, TypeError):
            reason = response.text.strip()[:200]
        raise UserError(f"{method} {url}: {response.status_code}: {reason}")
    return response.json()


def _say(answer: dict) -> None:
    print(f"{answer['model']}: decision {answer['sequence']} ({answer['action']}): serving "
          f"{answer['served_version']}, candidate {answer['candidate_version']}, before "
          f"{answer['previous_version']}")


def cmd_candidate(args: argparse.Namespace) -> None:
    _say(decide(args.xapp, "POST", f"/v1/models/{args.model}/candidate",
                {"model_dir": args.model_dir}))


def cmd_promote(args: argparse.Namespace) -> None:
    _say(decide(args.xapp, "POST", f"/v1/models/{args.model}/promote"))


def cmd_rollback(args: argparse.Namespace) -> None:
    _say(decide(args.xapp, "POST", f"/v1/models/{args.model}/rollback"))


def add_commands(commands: argparse._SubParsersAction) -> None:
    """models candidate, promote, rollback."""
    models = commands.add_parser("models", help="a running xApp's model decisions: shadow a "
                                 "candidate, promote it, roll back")
    verbs = models.add_subparsers(dest="models_command", required=True)
    for verb, run, what in (("candidate", cmd_candidate, "shadow a model directory beside the "
                             "version served"),
                            ("promote", cmd_promote, "serve the candidate"),
                            ("rollback", cmd_rollback, "serve the version served before")):
        parser = verbs.add_parser(verb, help=what)
        parser.add_argument("--xapp", required=True, help="the xApp's HTTP address, e.g. "
                            "http://service-ricxapp-kpi-forecast-http.ricxapp:8080")
        parser.add_argument("--model", required=True, help="the model's name")
        if verb == "candidate":
            parser.add_argument("--model-dir", required=True, help="the candidate's "
                                "directory, as the xApp's pods see it (in controls.modelRoot)")
        parser.set_defaults(run=run)
