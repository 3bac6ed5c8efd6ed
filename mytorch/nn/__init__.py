"""Layers, losses and the Module base, as in torch.nn."""

from mytorch.nn import functional
from mytorch.nn.attention import MultiheadAttention
from mytorch.nn.layers import (
    GELU,
    Conv2d,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    MaxPool2d,
    ModuleList,
    MSELoss,
    ReLU,
    Sequential,
    Tanh,
)
from mytorch.nn.module import Module, Parameter

__all__ = ["GELU", "Conv2d", "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "LayerNorm", "Linear",
           "MSELoss", "MaxPool2d", "Module", "ModuleList", "MultiheadAttention", "Parameter", "ReLU", "Sequential",
           "Tanh", "functional"]
