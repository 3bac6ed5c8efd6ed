"""Module and Parameter: parameters and sub-modules found by attribute, as in torch.nn."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

from mytorch.tensor import Tensor


class Parameter(Tensor):
    """A tensor that a Module registers as its parameter; requires grad by default."""

    __slots__ = ()

    def __init__(self, data: Tensor | torch.Tensor, requires_grad: bool = True) -> None:
        super().__init__(data.data if isinstance(data, Tensor) else data, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class Module:
    """Base of layers and models: ``forward`` computes, ``__call__`` runs it."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}: call super().__init__() before assigning attributes")
        for registry in (self._parameters, self._modules, self._buffers):
            registry.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def register_parameter(self, name: str, value: Parameter | None) -> None:
        """``value`` None records that the parameter is absent (e.g. bias=False), as torch does."""
        self._parameters[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name: str, value: Tensor) -> None:
        """A tensor saved in the state dict and moved by ``to()``, but not trained."""
        self._buffers[name] = value
        object.__setattr__(self, name, value)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # --- walking the tree -----------------------------------------------------------------------

    def children(self) -> Iterator[Module]:
        yield from self._modules.values()

    def named_children(self) -> Iterator[tuple[str, Module]]:
        yield from self._modules.items()

    def modules(self) -> Iterator[Module]:
        for _, module in self.named_modules():
            yield module

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        stack: list[tuple[str, Module]] = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            yield name, module
            for child_name, child in reversed(list(module._modules.items())):
                stack.append((f"{name}.{child_name}" if name else child_name, child))

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        for module_name, module in self.named_modules(prefix):
            for name, p in module._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{module_name}.{name}" if module_name else name), p

    def parameters(self) -> Iterator[Parameter]:
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self) -> Iterator[tuple[str, Tensor]]:
        for module_name, module in self.named_modules():
            for name, b in module._buffers.items():
                yield (f"{module_name}.{name}" if module_name else name), b

    # --- modes, gradients, devices --------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def to(self, device: Any = None, dtype: torch.dtype | None = None) -> Module:
        """Move (or cast) every parameter and buffer in place; gradients move with them."""
        if isinstance(device, torch.dtype):
            device, dtype = None, device
        for module in self.modules():
            for registry in (module._parameters, module._buffers):
                for _name, t in registry.items():
                    if t is None:
                        continue
                    cast = dtype if (dtype is not None and t.data.is_floating_point()) else t.dtype
                    t.data = t.data.to(device=device or t.device, dtype=cast)
                    if t.grad is not None:
                        t.grad = Tensor(t.grad.data.to(device=device or t.grad.device, dtype=cast))
        return self

    def cuda(self) -> Module:
        return self.to("cuda")

    def cpu(self) -> Module:
        return self.to("cpu")

    # --- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Tensor]:
        """Parameters and buffers by dotted name (detached, sharing memory)."""
        state = {name: Tensor(p.data) for name, p in self.named_parameters()}
        state.update({name: Tensor(b.data) for name, b in self.named_buffers()})
        return state

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Copy ``state`` (mytorch or torch tensors, e.g. a torch module's state_dict) into the
        parameters and buffers, keeping their devices and dtypes."""
        own = dict(self.named_parameters())
        own.update(dict(self.named_buffers()))
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        if strict and (missing or unexpected):
            raise KeyError(f"{type(self).__name__}.load_state_dict: missing keys {missing}, unexpected keys "
                           f"{unexpected}")
        for name, value in state.items():
            if name not in own:
                continue
            data = value.data if isinstance(value, Tensor) else value
            target = own[name]
            if tuple(data.shape) != tuple(target.shape):
                raise ValueError(f"{type(self).__name__}.load_state_dict: {name} has shape {tuple(data.shape)}, "
                                 f"the module's is {tuple(target.shape)}")
            target.data = data.detach().to(device=target.device, dtype=target.dtype).clone()

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): {child!r}".replace("\n", "\n  ") for name, child in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"
