"""A multilayer perceptron from hidden widths and an activation, laid out as TorchRL's ``MLP`` lays it out
(``Linear, act, Linear, act, ..., Linear``: the same ``state_dict`` keys, so weights copy across)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

ACTIVATION_CLASSES: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


class MLP(nn.Sequential):
    """``in_features -> hidden[0] -> ... -> out_features``, ``activation`` after every hidden layer, none
    after the last; torch's default ``Linear`` initialisation (seed the global RNG around construction).

    Usage: ``MLP(4, 2, hidden=(64, 64), activation="tanh")(torch.zeros(8, 4)).shape == (8, 2)``
    """

    def __init__(self, in_features: int, out_features: int, hidden: Sequence[int], activation: str) -> None:
        act = ACTIVATION_CLASSES[activation]
        layers: list[nn.Module] = []
        width = in_features
        for size in hidden:
            layers += [nn.Linear(width, size), act()]
            width = size
        layers.append(nn.Linear(width, out_features))
        super().__init__(*layers)
