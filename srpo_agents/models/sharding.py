"""The learner's model on torch's FSDP2 (``torch.distributed.fsdp.fully_shard``).

Deliberate choices:
- **One unit of sharding per decoder layer**, as torchtitan and accelerate do: every
  module whose class the model names in ``_no_split_modules`` (transformers' own list of
  blocks that must stay whole), then the root (embeddings, final norm, head).
- **Strategies by accelerate's names**: "full_shard" splits weights, gradients and AdamW
  state over every rank (a 1-D mesh); "no_shard" replicates them as DDP would (a 2-D
  mesh of shape (world, 1): each "shard" group holds one rank, so every rank holds all).
- **Master weights stay float32.** The sharded parameters keep the model's dtype; with
  16-bit compute (``Policy.compute_dtype``) FSDP all-gathers them in that dtype and
  reduces gradients in float32 (``MixedPrecisionPolicy``), the semantics of one device's
  float32 masters under autocast.
- **Gradients are summed, not averaged.** The learner weights each micro-batch by its
  share of the global mini-batch, so the ranks' gradients must add up. FSDP averages
  over the ranks by default; a divide factor of 1 with sum-only collectives makes it a
  plain sum (gloo has no NCCL's pre-scaled sum, which the factor alone would ask for).
- **Whole weights for passes without a gradient** (``full_weights``): generation,
  evaluation and the pi_old / reference scoring run with every layer gathered once, so
  ranks that decode different numbers of tokens, or score different numbers of rows,
  never wait on each other's collectives.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import NoReturn

import torch

STRATEGIES = ("full_shard", "no_shard")


def init_distributed() -> tuple[int, int, torch.device]:
    """Join the process group ``torchrun`` describes and take this rank's device: with
    CUDA, GPU ``LOCAL_RANK`` (NCCL for CUDA tensors, gloo for CPU ones); else the CPU on
    gloo. Returns (rank, world size, device)."""
    import torch.distributed as dist

    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        backend = "cuda:nccl,cpu:gloo"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size(), device


def end_rank(code: int = 0) -> NoReturn:
    """End this rank once its work is written: a barrier (no rank leaves while another
    still talks to it), the process group destroyed, the output flushed, and the
    process ended without tearing the interpreter down. With gloo that teardown now and
    then aborts a process whose work was done ("terminate called without an active
    exception", no Python frame left: 2-rank updates of benchmarks/scale/ddp_update.py here,
    3 runs in 36 on FSDP2 and 1 in 40 under the old all-reduce; none in 40 since), which
    torchrun reports as the run failing."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    names = set(getattr(model, "_no_split_modules", None) or [])
    inner = getattr(model, "base_model", None)  # a PEFT wrapper: the model it wraps
    while not names and inner is not None and inner is not model:
        names = set(getattr(inner, "_no_split_modules", None) or [])
        model, inner = inner, getattr(inner, "model", None)
    return [m for m in model.modules() if type(m).__name__ in names]


def shard(model: torch.nn.Module, strategy: str,
          compute_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """``model`` on FSDP2, in place (its class becomes an FSDP one): each decoder block,
    then the root. Returns the model."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if strategy not in STRATEGIES:
        raise ValueError(f"fsdp={strategy!r}: expected one of {STRATEGIES}")
    blocks = _blocks(model)
    if not blocks:
        raise ValueError(f"{type(model).__name__} names no decoder blocks "
                         f"(_no_split_modules): nothing to shard layer by layer")
    world = dist.get_world_size()
    device = next(model.parameters()).device.type
    mesh = (init_device_mesh(device, (world,)) if strategy == "full_shard" else
            init_device_mesh(device, (world, 1), mesh_dim_names=("replicate", "shard")))
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for module in _fsdp_modules(model):
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)
        # A rank whose micro-batch has no row of some role leaves that role's adapter
        # without a gradient, and a block's reduce-scatter then differs in size between
        # the ranks (gloo: "a distributed collective mismatch"). Zeros for the unused
        # trainable parameters keep every rank's collective the same. Where no rank used
        # an adapter in a mini-batch, its gradient is 0 where one process leaves it None
        # (AdamW then moves it by its moments alone): mini-batches of whole team episodes
        # hold every role.
        if hasattr(module, "set_reduce_scatter_unused_params"):  # absent from older torch
            module.set_reduce_scatter_unused_params(True, recurse=False)
    return model


def same_as_rank0(model: torch.nn.Module) -> None:
    """Every rank's trainable parameters made rank 0's (a broadcast each), before
    ``shard``: FSDP2 keeps what each rank holds and never syncs it. Loaded weights are the
    same everywhere already; freshly drawn ones are not where ranks drew other random
    numbers before (LoRA's A matrices: rank 0 alone may have built a warm start)."""
    import torch.distributed as dist

    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                dist.broadcast(parameter.data, src=0)


def _fsdp_modules(model: torch.nn.Module) -> list:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def full_weights(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Every layer of a sharded ``model`` gathered once (one collective, on every rank)
    and kept whole until the block ends, so forward passes inside it run no collective.
    For passes without a gradient. A no-op for a model that is not sharded."""
    if not is_sharded(model):
        yield model
        return
    modules = _fsdp_modules(model)
    for module in modules:
        module.set_reshard_after_forward(False)
        module.unshard()
    try:
        yield model
    finally:
        for module in modules:
            module.reshard()
            module.set_reshard_after_forward(True)


def reshard_all(model: torch.nn.Module) -> None:
    """Every layer of a sharded ``model`` back to its shards. A forward without a
    backward leaves the root's layers gathered (FSDP2 keeps them for the backward it
    expects), so a reference to them taken then points at storage that FSDP frees
    later: a 2-rank SmolLM2 update that had scored its rows without a gradient first
    read such a reference after the step and crashed (SIGSEGV)."""
    for module in _fsdp_modules(model):
        module.reshard()


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's piece of a sharded parameter or gradient (the tensor itself if plain)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole of a sharded tensor, gathered (a collective: every rank must call it)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
