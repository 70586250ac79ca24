"""Every flag and config field is checked up front: the error names the field, the value
and what is allowed (issue 13's cases), before any warm start or training."""

import dataclasses
import json

import pytest

from srpo_agents.cli import main
from srpo_agents.config import TrainConfig


@pytest.mark.parametrize("fields, message", [
    ({"group_size": -2}, r"group_size=-2: expected an int >= 1"),
    ({"group_size": 1}, r"group_size=1: a relative advantage needs at least 2"),
    ({"n_agents": 0}, r"n_agents=0: expected an int >= 1"),
    ({"n_agents": 100}, r"n_solvers=100: expected an int in 1\.\.64 \(n_solvers takes "
                        r"--n-agents\)"),
    ({"workflow": "routed", "n_agents": 3, "extra_env_kwargs": {"default_route": "ROUTE: 5"}},
     r"default_route='ROUTE: 5'.*K in 1\.\.3"),
    ({"eps_low": 1.5}, r"eps_low=1.5: expected a value in \(0, 1\)"),
    ({"eps_high": -0.1}, r"eps_high=-0.1: expected a value > 0"),
    ({"lr": 0}, r"lr=0: expected a learning rate in \(0, 1\)"),
    ({"temperature": 0.0}, r"temperature=0.0: expected a finite number > 0"),
    ({"beta": float("nan")}, r"beta=nan: expected a finite number >= 0"),
    ({"env": "SRPO-Serch-v0"}, r"env='SRPO-Serch-v0' is not registered \(did you mean "
                               r"'SRPO-Search-v0'\?\)"),
    ({"workflow": "solve_verfy"}, r"workflow='solve_verfy' is not a workflow of SRPO-Math-v0 "
                                  r"\(did you mean 'solve_verify'\?\)"),
    ({"difficulty": (9,)}, r"difficulty=\(9,\)"),
    ({"extra_env_kwargs": {"n_solver": 2}}, r"no argument 'n_solver' \(did you mean "
                                            r"'n_solvers'\?\)"),
    ({"env": "SRPO-Search-v0", "retriever": "bm26"}, r"retriever='bm26': expected one of"),
    ({"device": "gpu"}, r"device='gpu': expected auto, cpu, cuda, cuda:N or mps"),
    ({"algo": "ppo"}, r"algo='ppo': expected one of"),
    ({"model": "tiny", "model_options": {"warmstart_skill": 2.0}},
     r"warmstart_skill=2.0: expected a probability"),
    ({"model": "tiny", "model_options": {"warmstart_stpes": 2}},
     r"'warmstart_stpes' is not an option of the tiny model; expected some of \['warmstart"),
    ({"model": "smollm2-135m-instruct", "model_options": {"warmstart_steps": 2}},
     r"--model smollm2-135m-instruct takes no options \(only tiny does\)"),
])
def test_bad_fields_are_named_with_what_is_allowed(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**fields)


def test_a_missing_dataset_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"eval_dataset='.*nope.jsonl': no such JSONL"):
        TrainConfig(eval_dataset=str(tmp_path / "nope.jsonl"))


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_bad_rows_stop_srpo_train_before_the_warm_start(tmp_path, capsys):
    questions = _jsonl(tmp_path / "q.jsonl", [{"question": "1+1?", "answer": "2"},
                                              {"answer": "3"}])
    out = tmp_path / "run"
    assert main(["train", "--dataset", questions, "--out", str(out)]) == 2
    assert "q.jsonl:2: field 'question' = None; expected a non-empty string" in (
        capsys.readouterr().err)
    assert not (out / "warmstart").exists()

    good = _jsonl(tmp_path / "good.jsonl", [{"question": "Who?", "answer": "Ann"}])
    corpus = _jsonl(tmp_path / "corpus.jsonl", [{"id": "a", "title": "A", "text": "Ann."},
                                                {"id": "b", "title": "B"}])
    assert main(["train", "--env", "SRPO-Search-v0", "--dataset", good, "--eval-dataset", good,
                 "--corpus", corpus, "--out", str(out)]) == 2
    assert "corpus.jsonl, line 2: missing field 'text'" in capsys.readouterr().err


def test_cli_flags_of_eval_and_rollout_are_checked(tmp_path, capsys):
    assert main(["rollout", "--checkpoint", str(tmp_path), "--out", "x.jsonl",
                 "--group-size", "0"]) == 2
    assert "group_size=0: expected an int >= 1" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(tmp_path), "--k", "0"]) == 2
    assert "--k=0: expected an int >= 1" in capsys.readouterr().err
    assert main(["rollout", "--checkpoint", str(tmp_path), "--out", "x.jsonl",
                 "--tasks", "-1"]) == 2
    assert "--tasks=-1: expected an int >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--steps", "many"])  # argparse: invalid int value
    assert "argument --steps: invalid int value: 'many'" in capsys.readouterr().err


def test_a_config_json_from_before_the_sections_still_loads():
    """``config_before_sections.json``: a run's recorded config as the flat TrainConfig
    of before the sections wrote it. It loads unchanged: every value reads back, and the
    only new keys are the learner's weight decay, the asynchronous settings, the trackers,
    the per-role and evaluation sampling and the evaluation helpers, each at its default
    (no decay, synchronous, no tracker, the run's sampling everywhere, no helper)."""
    import json
    from pathlib import Path

    from srpo_agents.config import SECTIONS, TrainConfig

    recorded = json.loads((Path(__file__).parent / "config_before_sections.json").read_text())
    # issue 60 replaced the unit count by an episode count (REMOVED_SETTINGS); 0 meant
    # one step per epoch under both
    assert recorded.pop("minibatch_units") == 0
    loaded = json.loads(json.dumps(TrainConfig(**recorded).to_dict()))
    assert {k: loaded[k] for k in recorded} == recorded
    new = {"weight_decay": 0.0, "max_staleness": 0, "proximal": "recompute",
           "behaviour_correction": "truncate", "behaviour_cap": 3.0, "report_to": [],
           "role_sampling": {}, "eval_temperature": None, "pi_old": "auto",
           "vllm_gpu_memory": 0.3, "max_batch": 256, "hf_compile": False,
           "vllm_sleep_level": 1, "gradient_checkpointing": False,
           "skip_zero_advantage": False, "fsdp": "", "rollout_worker_gpus": 0.0,
           "rollout_device": "",
           "weight_sync": "collective", "ray_ranks": 0, "minibatch_episodes": 0,
           "token_budget": 0, "minibatch_by": "episode", "eval_processes": 0,
           "share_prompt_prefix": True, "vllm_compile": False}
    assert {k: loaded[k] for k in set(loaded) - set(recorded)} == new
    # each field is declared in exactly one section
    names = [f.name for section in SECTIONS for f in dataclasses.fields(section)]
    assert len(names) == len(set(names)) == len(dataclasses.fields(TrainConfig))


def test_the_learner_section_has_one_bound_per_field():
    """A bound is checked once, in its section: the learner alone and a whole run reject
    the same value with the same message (they disagreed on eps_low = 0 before)."""
    from srpo_agents.config import LearnerConfig, TrainConfig

    for bad in ({"eps_low": 0.0}, {"lr": 1.5}, {"adv_eps": 0.0}, {"weight_decay": -1.0},
                {"microbatch_rows": 0}):
        with pytest.raises(ValueError) as alone:
            LearnerConfig(**bad)
        with pytest.raises(ValueError) as whole:
            TrainConfig(**bad)
        assert str(alone.value) == str(whole.value), bad
    config = TrainConfig(lr=3e-4, eps_high=0.28, device="cpu")
    # "auto" decided for the run: hf in float32 in this process samples as the learner
    # and the token budget of losses that sum tokens: the run's max_new_tokens (48)
    assert config.learner() == LearnerConfig(lr=3e-4, eps_high=0.28, pi_old="sampler",
                                             token_budget=48)


def test_fsdp_names_its_strategies_and_needs_ranks():
    from srpo_agents.config import LearnerConfig, TrainConfig

    with pytest.raises(ValueError, match="fsdp='zero3': expected one of"):
        LearnerConfig(fsdp="zero3", data_parallel=True)
    with pytest.raises(ValueError, match="fsdp='full_shard' without data_parallel"):
        LearnerConfig(fsdp="full_shard")
    assert LearnerConfig(fsdp="no_shard", data_parallel=True).sharding == "no_shard"
    assert TrainConfig(fsdp="full_shard", data_parallel=True).learner().fsdp == "full_shard"
    # data parallelism is FSDP2: full_shard unless another strategy is chosen
    assert LearnerConfig(data_parallel=True).sharding == "full_shard"
    # what would call a collective on one rank only, or read whole weights, says so
    with pytest.raises(ValueError, match="data_parallel with backend='vllm'"):
        TrainConfig(data_parallel=True, backend="vllm")
    with pytest.raises(ValueError, match="data_parallel with dynamic_sampling"):
        TrainConfig(fsdp="no_shard", data_parallel=True, dynamic_sampling=True)
    # Ray starts the ranks of a data-parallel run only, and then may join a cluster
    with pytest.raises(ValueError, match="ray_ranks=2 without data_parallel"):
        TrainConfig(ray_ranks=2)
    with pytest.raises(ValueError, match="ray_ranks=-1: expected an int >= 0"):
        TrainConfig(ray_ranks=-1, data_parallel=True)
    assert TrainConfig(ray_ranks=2, data_parallel=True, ray_address="h:6379").ray_ranks == 2
    with pytest.raises(ValueError, match="needs rollout_workers >= 1 or ray_ranks >= 1"):
        TrainConfig(ray_address="h:6379")


def test_the_fsdp_recipe_in_the_docs_is_a_valid_run():
    """docs/scale-out.md's 8-GPU command parses into the run it says (not run: no GPU)."""
    import shlex
    from pathlib import Path

    from srpo_agents.cli import build_parser
    from srpo_agents.cli.flags import config_from_args

    text = (Path(__file__).resolve().parents[1] / "docs" / "scale-out.md").read_text()
    block = text[text.index("torchrun --nproc_per_node 8"):]
    argv = shlex.split(block[:block.index("```")].replace("\\\n", " "))
    assert argv[:4] == ["torchrun", "--nproc_per_node", "8", "-m"]
    config = config_from_args(build_parser().parse_args(argv[5:]))
    assert config.data_parallel and config.fsdp == "full_shard"
    assert config.model == "Qwen/Qwen2.5-7B-Instruct" and config.gradient_checkpointing


def test_a_setting_on_by_default_has_a_no_flag():
    """``--share-prompt-prefix`` is on by default: ``--no-share-prompt-prefix`` turns it
    off (a store_true flag could not)."""
    from srpo_agents.cli import build_parser
    from srpo_agents.cli.flags import config_from_args

    def parsed(*argv):
        return config_from_args(build_parser().parse_args(["train", *argv]))

    assert parsed().share_prompt_prefix and not parsed("--no-share-prompt-prefix").share_prompt_prefix
    assert not parsed().skip_zero_advantage and parsed("--skip-zero-advantage").skip_zero_advantage
