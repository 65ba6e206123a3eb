"""Argument types the training and evaluation commands share: step counts or durations, whole
numbers, quantile lists, holiday calendars."""

from __future__ import annotations

import argparse

import pandas as pd

from kpi_forecast.model.errors import UserError


def parse_steps(text: str, step: pd.Timedelta, option: str) -> int:
    """A count of steps ("336") or a duration ("14D", "24h") converted to steps."""
    if text.isdigit():
        steps = int(text)
    else:
        try:
            duration = pd.Timedelta(text)
        except ValueError as exc:
            raise UserError(f"{option} {text!r}: neither a step count nor a duration") from exc
        steps = duration // step
        if steps * step != duration:
            raise UserError(f"{option} {text!r}: not a whole number of {step} steps")
    if steps < 1:
        raise UserError(f"{option} {text!r}: must be at least one step")
    return steps


def holiday_calendar(text: str) -> str:
    from kpi_forecast.model.features import check_holidays

    try:
        return check_holidays(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def parse_quantiles(text: str) -> list[float]:
    try:
        return [float(q) for q in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text}") from exc


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a whole number >= 1: {text}")
    return int(text)


def non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a whole number >= 0: {text}")
    return int(text)


def windows_or_auto(text: str) -> int | str:
    return text if text == "auto" else non_negative_int(text)
