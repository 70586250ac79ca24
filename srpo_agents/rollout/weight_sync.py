"""The learner's weights to its rollout workers by a collective: one broadcast a bucket
over a process group of the learner (rank 0) and the workers (ranks 1..N), gloo for CPU
tensors and NCCL where the learner and every worker hold a GPU. It replaces a copy of
the whole state dict through Ray's object store on every update.

The group is its own, apart from any ``torchrun`` group: a ``TCPStore`` that the learner
serves, and a process group built on it directly (``ProcessGroupGloo`` or
``ProcessGroupNCCL`` on a ``PrefixStore``), so workers that Ray starts anywhere join it
by the learner's address. A replaced worker means a new group: every member joins again
under the next prefix (``generation``).

What travels: the state dict's tensors in a fixed order (the learner's and the worker's
models are copies, so both list them alike), tied tensors once, each cast to the
workers' dtype (bf16 from float32 masters on GPUs) and packed into buckets of at most
``BUCKET_BYTES``, so a model is a few collectives, not hundreds.
"""

from __future__ import annotations

import datetime
import socket

import torch

BUCKET_BYTES = 256 * 2**20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _unique(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The state dict's tensors, each storage once (a tied head goes with its embedding)."""
    seen, out = set(), []
    for name, tensor in model.state_dict(keep_vars=False).items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.shape)
        if key not in seen:
            seen.add(key)
            out.append((name, tensor))
    return out


def _buckets(tensors: list[tuple[str, torch.Tensor]], dtype: torch.dtype
             ) -> list[list[tuple[str, torch.Tensor]]]:
    size = torch.tensor([], dtype=dtype).element_size()
    buckets, current, used = [], [], 0
    for name, tensor in tensors:
        nbytes = tensor.numel() * size
        if current and used + nbytes > BUCKET_BYTES:
            buckets.append(current)
            current, used = [], 0
        current.append((name, tensor))
        used += nbytes
    return buckets + ([current] if current else [])


class WeightGroup:
    """One member of the learner-workers group. ``rank`` 0 (the learner) serves the
    store; the others connect to ``host``:``port``. Construction returns once all
    ``world`` members have joined (each builds its member at the same time)."""

    def __init__(self, host: str, port: int, rank: int, world: int, generation: int = 0,
                 device: str | torch.device = "cpu", timeout_s: float = 600.0,
                 store=None):
        import torch.distributed as dist

        self.rank, self.world, self.device = rank, world, torch.device(device)
        timeout = datetime.timedelta(seconds=timeout_s)
        self.store = store or dist.TCPStore(host, port, world, is_master=rank == 0,
                                            timeout=timeout, wait_for_workers=False)
        prefixed = dist.PrefixStore(f"weights-{generation}/", self.store)
        if self.device.type == "cuda":
            self.group = dist.ProcessGroupNCCL(prefixed, rank, world)
        else:
            self.group = dist.ProcessGroupGloo(prefixed, rank, world, timeout)

    def _broadcast(self, flat: torch.Tensor) -> None:
        self.group.broadcast(flat, 0).wait()

    def send(self, model: torch.nn.Module, dtype: torch.dtype) -> int:
        """Rank 0: every tensor of ``model`` to the others, in ``dtype``. Returns bytes."""
        sent = 0
        with torch.no_grad():
            for bucket in _buckets(_unique(model), dtype):
                flat = torch.cat([t.detach().reshape(-1).to(self.device, dtype)
                                  for _, t in bucket])
                self._broadcast(flat)
                sent += flat.numel() * flat.element_size()
        return sent

    def receive(self, model: torch.nn.Module, dtype: torch.dtype) -> None:
        """Ranks >= 1: rank 0's tensors into ``model``, in place (cast to its dtypes)."""
        with torch.no_grad():
            for bucket in _buckets(_unique(model), dtype):
                flat = torch.empty(sum(t.numel() for _, t in bucket), dtype=dtype,
                                   device=self.device)
                self._broadcast(flat)
                offset = 0
                for _, tensor in bucket:
                    piece = flat[offset:offset + tensor.numel()].view(tensor.shape)
                    tensor.copy_(piece.to(tensor.device, tensor.dtype))
                    offset += tensor.numel()
