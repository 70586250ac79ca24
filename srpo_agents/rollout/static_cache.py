"""KV-cache layers of ``HFGenerator`` (``hf_generator``): reserved buffers for the plain
decode loop, and fixed-shape slots for the compiled one (``--hf-compile``). Both are
``transformers`` ``DynamicLayer`` subclasses, made on first use so that importing this
module does not import transformers."""

from __future__ import annotations

import torch


def _static_slot_layer_type():
    from transformers.cache_utils import DynamicLayer

    class StaticSlotLayer(DynamicLayer):
        """A cache layer of fixed shape for compiled decoding: keys and values of
        ``capacity`` columns, allocated once, written in place at the slot a device-side
        counter holds, and returned whole (a boolean 4-D mask hides the unfilled
        columns). No Python number changes between steps, so a compiled step is not
        retraced, and the buffers keep their addresses, as CUDA graphs need."""

        is_compileable = True

        def __init__(self, capacity: int):
            super().__init__()
            self.capacity = capacity

        def fill_from(self, keys: torch.Tensor, values: torch.Tensor) -> None:
            """Start from a prefill's (rows, heads, width, dim) keys and values."""
            width = keys.shape[-2]
            if not self.is_initialized:
                self.device = keys.device
                shape = (*keys.shape[:-2], self.capacity, keys.shape[-1])
                self.keys = keys.new_zeros(shape)
                self.values = values.new_zeros((*values.shape[:-2], self.capacity,
                                                values.shape[-1]))
                self.slot = torch.zeros((), dtype=torch.long, device=keys.device)
                if keys.device.type == "cuda":
                    for buffer in (self.keys, self.values, self.slot):
                        torch._dynamo.mark_static_address(buffer)
                self.is_initialized = True
            self.keys[..., :width, :] = keys
            self.values[..., :width, :] = values
            self.slot.fill_(width)

        def update(self, key_states, value_states, *args, **kwargs):
            slots = self.slot + torch.arange(key_states.shape[-2], device=self.slot.device)
            self.keys.index_copy_(2, slots, key_states.to(self.keys.dtype))
            self.values.index_copy_(2, slots, value_states.to(self.values.dtype))
            self.slot.add_(key_states.shape[-2])
            return self.keys, self.values

        def get_seq_length(self, *args, **kwargs):
            return self.slot if self.is_initialized else 0

        def get_mask_sizes(self, *args, **kwargs) -> tuple[int, int]:
            return self.capacity, 0

        def get_max_length(self) -> int:
            return self.capacity

    return StaticSlotLayer


def StaticSlotLayer(capacity: int):  # noqa: N802 - made on first use (transformers import)
    if not _STATIC_LAYER:
        _STATIC_LAYER.append(_static_slot_layer_type())
    return _STATIC_LAYER[0](capacity)


_STATIC_LAYER: list = []
_RESERVED_LAYER: list = []


def reserved_layer_type():
    """A ``transformers`` ``DynamicLayer`` whose keys and values live in buffers reserved
    for the whole generation, so one decode step writes one column instead of copying the
    whole cache (``torch.cat``, which took half of the decode time of the tiny CPU policy
    with 200-token prompts). ``keys``/``values`` are views of the filled columns. None
    when this transformers has no ``DynamicLayer`` (the plain cache is used then)."""
    if _RESERVED_LAYER:
        return _RESERVED_LAYER[0]
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        _RESERVED_LAYER.append(None)
        return None

    class ReservedLayer(DynamicLayer):
        def __init__(self, capacity: int):
            super().__init__()
            self.capacity = capacity
            self.length = 0

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.device = key_states.device
                shape = (*key_states.shape[:-2], self.capacity, key_states.shape[-1])
                self._keys = key_states.new_empty(shape)
                self._values = value_states.new_empty(shape)
                self.is_initialized = True
            end = self.length + key_states.shape[-2]
            if end > self.capacity:
                raise RuntimeError(f"cache capacity {self.capacity} exceeded ({end} tokens)")
            self._keys[..., self.length:end, :] = key_states
            self._values[..., self.length:end, :] = value_states
            self.length = end
            self.keys = self._keys[..., :end, :]
            self.values = self._values[..., :end, :]
            return self.keys, self.values

        def batch_select_indices(self, indices) -> None:
            if self.is_initialized:
                self._keys, self._values = self._keys[indices], self._values[indices]
                self.keys = self._keys[..., :self.length, :]
                self.values = self._values[..., :self.length, :]

    _RESERVED_LAYER.append(ReservedLayer)
    return ReservedLayer
