"""One frozen base, one LoRA adapter per role (``TrainConfig.per_role_adapters="lora"``).

A team of three roles trained with ``per_role_policies`` holds three copies of the
model and their optimizer state; here it holds one base and three small adapters
(PEFT's LoRA), and only the adapters train.

Deliberate choices:
- **Rows choose their adapter.** Every forward pass (the learner's scoring, the
  sampler's prefill and decode steps) carries one adapter name per row, PEFT's
  ``adapter_names`` argument. A batch may mix roles: each LoRA layer applies each
  adapter to its own rows. PEFT allows that argument only in eval mode, which is the
  mode the learner scores in anyway (``Learner.update``), and gradients flow as usual.
- **Every adapter trains.** PEFT marks only the *active* adapter trainable
  (huggingface/peft#631): after adding one adapter per role, a model would silently
  train one. ``attach_role_adapters`` marks every role's LoRA weights trainable and
  never calls ``set_adapter`` again; the active adapter does not matter, since every
  call names its rows' adapters.
- **The base is the reference.** With a KL penalty the reference policy is the base
  with the adapters switched off (``disable_adapter``), not a copy of the model.
- **Saved as PEFT saves them.** ``save_role_adapters`` writes one folder per role in
  PEFT's format (``adapter_config.json``, ``adapter_model.safetensors``), loadable by
  ``PeftModel.from_pretrained(base, folder)``, plus ``role_adapters.json`` with the
  base's name and the roles; ``load_policy`` reads such a folder back.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from srpo_agents.models.policy import Policy, require_peft
from srpo_agents.models.sources import MANIFEST


def lora_config(rank: int, alpha: float, targets: Sequence[str]):
    peft = require_peft()
    target = "all-linear" if tuple(targets) == ("all-linear",) else list(targets)
    return peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0,
                           target_modules=target, bias="none", task_type="CAUSAL_LM")


def attach_role_adapters(policy: Policy, roles: Sequence[str], *, rank: int = 8,
                         alpha: float = 16.0, targets: Sequence[str] = ("all-linear",)
                         ) -> Policy:
    """``policy`` with its model wrapped in a PEFT model holding one LoRA adapter per
    role (named by the role), the base frozen and every adapter trainable. Each adapter
    starts at zero (LoRA's B = 0), so the wrapped policy acts as the base at first."""
    peft = require_peft()
    roles = sorted(set(roles))
    if not roles:
        raise ValueError("attach_role_adapters: no roles to give an adapter")
    bad = [r for r in roles if not r.isidentifier()]
    if bad:
        raise ValueError(f"roles {bad!r}: an adapter name must be an identifier")
    config = lora_config(rank, alpha, targets)
    model = peft.get_peft_model(policy.model, config, adapter_name=roles[0])
    for role in roles[1:]:
        model.add_adapter(role, lora_config(rank, alpha, targets))
    _train_every_adapter(model, roles)
    base_name = getattr(policy, "base_name", "") or policy.name
    return dataclasses.replace(policy, model=model, adapter_roles=tuple(roles),
                               base_name=base_name)


def _train_every_adapter(model, roles: Sequence[str]) -> None:
    """The base frozen; every role's LoRA weights trainable (see the module docstring)."""
    wanted = {f".{role}." for role in roles}
    for name, parameter in model.named_parameters():
        parameter.requires_grad_("lora_" in name and any(w in name for w in wanted))


def adapter_parameters(policy: Policy, role: str) -> dict[str, torch.Tensor]:
    """The named LoRA parameters of one role's adapter."""
    marker = f".{role}."
    return {name: p for name, p in policy.model.named_parameters()
            if "lora_" in name and marker in name}


def trainable_state(policy: Policy) -> dict[str, torch.Tensor]:
    """The adapters' weights, by parameter name: what a checkpoint holds."""
    return {name: p.detach() for name, p in policy.model.named_parameters()
            if p.requires_grad}


def load_trainable_state(policy: Policy, tensors: dict[str, torch.Tensor], source: str) -> None:
    """Copy a checkpoint's adapter weights back in; it must hold every adapter weight
    and nothing else."""
    params = dict(policy.model.named_parameters())
    wanted = {name for name, p in params.items() if p.requires_grad}
    missing, extra = sorted(wanted - tensors.keys()), sorted(tensors.keys() - wanted)
    if missing or extra:
        raise ValueError(f"{source}: its adapter weights do not match this run's adapters "
                         f"(missing {missing[:3]}, unexpected {extra[:3]}): other roles, "
                         f"rank or targets?")
    with torch.no_grad():
        for name in wanted:
            params[name].copy_(tensors[name])


def save_role_adapters(policy: Policy, directory: Path,
                       state: dict[str, torch.Tensor] | None = None) -> None:
    """One PEFT folder per role under ``directory``, the tokenizer, and the manifest.
    ``state``: the adapters' weights by parameter name when the model's own are not
    whole tensors (a model sharded by FSDP2 holds pieces of them)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    extra = {} if state is None else {"state_dict": state}
    for role in policy.adapter_roles:
        # PEFT writes an adapter not named "default" into a subfolder of its name
        policy.model.save_pretrained(str(directory), selected_adapters=[role], **extra)
    policy.tokenizer.save_pretrained(str(directory))
    config = policy.model.peft_config[policy.adapter_roles[0]]
    manifest = {"format": "peft-lora", "base": policy.base_name,
                "roles": list(policy.adapter_roles), "rank": config.r,
                "alpha": config.lora_alpha,
                "targets": sorted(config.target_modules) if not isinstance(
                    config.target_modules, str) else [config.target_modules]}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def parameter_counts(policy: Policy) -> dict[str, int]:
    """Trainable and total parameters (the base's included) of a policy."""
    total = sum(p.numel() for p in policy.model.parameters())
    trainable = sum(p.numel() for p in policy.model.parameters() if p.requires_grad)
    return {"trainable": trainable, "total": total}
