"""One rank of data-parallel training in float64, for tests/test_distributed.py:

    torchrun --nproc-per-node N -m tests.ddp_float64 DATA OUT

The training loop is the CLI's (``training.train.train``, each rank on its block of cells);
only the arithmetic is float64, so that one rank and two agree to float64's rounding.
"""

from __future__ import annotations

import sys

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

TARGET = "traffic_mb"
MODEL = {"context": 168, "horizon": 24, "dropout": 0.0}  # dropout's masks follow the split
TRAIN = {"max_epochs": 2, "batch_size": 64, "max_minutes": 30.0}


def main(data: str, out: str) -> None:
    torch.set_default_dtype(torch.float64)
    from kpi_forecast.data.ingest import load_panel
    from kpi_forecast.model.config import ModelConfig
    from kpi_forecast.training.distributed import join
    from kpi_forecast.training.train import TrainConfig, train

    group = join(torch.device("cpu"))
    first: list[torch.Tensor] = []  # the gradient the first optimiser step takes, all ranks'

    def keep_first_gradient(optimiser: torch.optim.Optimizer, args, kwargs) -> None:
        if not first:
            first.extend(p.grad.detach().clone() for g in optimiser.param_groups
                         for p in g["params"])

    register_optimizer_step_pre_hook(keep_first_gradient)
    try:
        panel = load_panel(data, TARGET)
        block = panel.cells(group.block(panel.n_cells)) if group.distributed else panel
        result = train(block, ModelConfig(**MODEL), TrainConfig(**TRAIN), progress=False,
                       group=group)
        if group.main:
            torch.save({"weights": result.network.state_dict(), "epochs": result.epochs,
                        "loss": result.best_validation_loss, "first_gradient": first}, out)
    finally:
        group.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
