"""An exponential moving average of a network's weights, kept in a copy of the network."""

from __future__ import annotations

import copy

import torch


class WeightAverage:
    """What ``torch.optim.swa_utils.AveragedModel`` with an EMA function computes (the first
    update copies, later ones lerp towards the weights), on parameter lists gathered once.

    ``AveragedModel.update_parameters`` walks both module trees on every optimiser step, a
    cost that grows with the number of parameter tensors, not their size.
    """

    def __init__(self, network: torch.nn.Module, decay: float) -> None:
        self.module = copy.deepcopy(network)
        self.decay = decay
        self.updates = 0
        self._weights = [p.detach() for p in network.parameters()]
        self._averages = [p.detach() for p in self.module.parameters()]

    @torch.no_grad()
    def update(self) -> None:
        if self.updates == 0:
            torch._foreach_copy_(self._averages, self._weights)
        else:
            torch._foreach_lerp_(self._averages, self._weights, 1.0 - self.decay)
        self.updates += 1

    def state_dict(self) -> dict:
        return {"updates": self.updates, "module": self.module.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.updates = state["updates"]
        self.module.load_state_dict(state["module"])
