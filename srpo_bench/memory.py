"""What models and optimizers hold: parameter counts and bytes
(``benchmarks/scale/role_adapters.py``, ``benchmarks/scale/role_memory.py``).
"""

from __future__ import annotations

import torch


def optimizer_bytes(optimizers) -> int:
    """Bytes of the optimizers' state tensors (AdamW's moments; scalar steps left out)."""
    return sum(t.numel() * t.element_size() for o in optimizers
               for state in o.state.values() for t in state.values()
               if isinstance(t, torch.Tensor) and t.dim() > 0)


def trainable(models) -> int:
    """Parameters that take gradients."""
    return sum(p.numel() for m in models for p in m.parameters() if p.requires_grad)


def weights_bytes(models) -> int:
    """Bytes of the models' parameters, each shared tensor counted once."""
    seen, total = set(), 0
    for m in models:
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel() * p.element_size()
    return total
