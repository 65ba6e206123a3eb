"""`python -m kpi_forecast.cli`, the form torchrun launches: `torchrun ... -m kpi_forecast.cli
train ...`."""

import sys

from kpi_forecast.cli.main import main

sys.exit(main())
