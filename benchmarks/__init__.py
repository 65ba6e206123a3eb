"""The benchmarks. Run from a source tree where kpi-forecast is not installed (an air-gapped GPU
node runs the GPU check with its own python3), ``kpi_forecast`` maps to the tree's folders, as
pyproject.toml's package-dir does for an installed one."""

import importlib.util
import sys
import types
from pathlib import Path

if importlib.util.find_spec("kpi_forecast") is None:
    _package = types.ModuleType("kpi_forecast")
    _package.__path__ = [str(Path(__file__).resolve().parents[1])]
    sys.modules["kpi_forecast"] = _package
