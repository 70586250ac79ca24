"""The comparison preset (issue 24): the equivalences it relies on, its statistics, the
majority vote, twins from one start, and the whole report in miniature."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from srpo_agents.config import TrainConfig
from srpo_agents.running.evaluate import held_out, majority_at
from srpo_agents.running.train import train
from srpo_agents.tiny import build_tiny_policy
from srpo_bench.harness import PRESETS, pair_algos, pair_settings, run_preset

COMPARE = PRESETS["compare"]


@pytest.fixture(scope="module")
def fresh_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fresh-tiny")
    build_tiny_policy(["x"], folder, hidden_size=64, num_layers=2, num_heads=2)
    return str(folder)


def _two_steps(model: str, out: Path, env: str, workflow: str, algo: str,
               **world) -> dict:
    # A token cost makes the team's reward vary with its lengths, so a fresh policy (never
    # right) still gets non-zero advantages; two epochs of several mini-batches make the
    # later updates off-policy, where the ratios and their clipping act.
    # ``world``: the pair's own env settings (agents, rounds, hops) where they matter.
    settings = {"max_new_tokens": 8, "n_agents": 3, **world}
    config = TrainConfig(env=env, workflow=workflow, algo=algo, model=model,
                         compact_prompts=True, steps=2, group_size=4, tasks_per_step=4,
                         eval_tasks=2, eval_k=1, epochs=2, minibatch_episodes=4, lr=1e-3,
                         cost_per_token=0.01, save_every=0,
                         out=str(out / f"{env}-{workflow}-{algo}"), **settings)
    summary = train(config, log=lambda *_: None)
    rows = [json.loads(line) for line in (Path(config.out) / "metrics.jsonl").open()]
    assert any(r["mixed_group_fraction"] > 0 for r in rows), "no advantage to act on"
    assert summary["after"]["tasks"] == 2
    return load_file(str(Path(config.out) / "policy" / "model.safetensors"))


def _identical(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# Every preset's declared equivalences, with the env settings of that preset's runs (the
# search pair's rounds and hops: a searcher that could act a second time would put two
# units of one rollout in its agent's group and break GRPO = Dr. MAS).
DECLARED = [(name, pair) for name in ("compare", "search_compare")
            for pair in sorted(PRESETS[name].get("same_as", {}))]
WORLD_FIELDS = ("n_agents", "max_turns", "max_new_tokens", "extra_env_kwargs")


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize(("preset", "pair"), DECLARED)
def test_declared_equivalences_train_identical_weights(preset, pair, fresh_model, tmp_path):
    """Each baseline the preset runs once as another gives bit-identical weights after
    two updates on that pair: GRPO, Dr. MAS and AT-GRPO where every agent acts once per
    episode under one team reward (their groups hold the same returns, replicated); the
    four SRPO variants where every set has K = 1 (kappa(1) = 1 and a set of one is its
    output)."""
    env, label = pair
    aliases = PRESETS[preset]["same_as"][pair]
    workflow, settings, _ = pair_settings(PRESETS[preset], env, label, run=True)
    world = {k: settings[k] for k in WORLD_FIELDS if k in settings} \
        if preset != "compare" else {}
    weights = {}
    for algo in sorted(set(aliases) | set(aliases.values())):
        weights[algo] = _two_steps(fresh_model, tmp_path, env, workflow, algo, **world)
    for algo, target in aliases.items():
        assert _identical(weights[algo], weights[target]), f"{algo} != {target} on {pair}"


@pytest.mark.usefixtures("one_torch_thread")
def test_the_weight_check_can_fail(fresh_model, tmp_path):
    """A control: SRPO's set ratio and GRPO's token ratio differ on the parallel pair, and
    the same check sees it."""
    a = _two_steps(fresh_model, tmp_path, "SRPO-Math-v0", "parallel", "srpo")
    b = _two_steps(fresh_model, tmp_path, "SRPO-Math-v0", "parallel", "grpo")
    assert not _identical(a, b)


def test_majority_vote_is_exact_over_subsets():
    right, two = "right", "answer:2"
    assert majority_at([right, two, two], 3) == 0.0
    assert majority_at([right, right, two], 3) == 1.0
    assert majority_at([right, two, two], 1) == pytest.approx(1 / 3)
    # size 2 of [right, two, two]: {r,2} tie (1/2) twice, {2,2} wrong once
    assert majority_at([right, two, two], 2) == pytest.approx(1 / 3)
    assert majority_at([None, None], 1) == 0.0
    assert majority_at([None, right, "answer:7"], 3) == 0.5  # the abstention does not vote
    with pytest.raises(ValueError, match="size=4"):
        majority_at([right] * 3, 4)


def test_twins_share_held_out_tasks_and_nothing_they_sample():
    base = TrainConfig(env="SRPO-Math-v0", workflow="single", difficulty=(0,), eval_tasks=20,
                       seed=3)
    twin = TrainConfig(env="SRPO-Math-v0", workflow="single", difficulty=(0,), eval_tasks=20,
                       seed=3, rollout_seed=1)
    assert base.sampling_seed == 3 and twin.sampling_seed != 3
    tasks = [held_out(c)[0][0].reset(options={"task_index": i})[0]["solver_0"]
             for c in (base, twin) for i in range(20)]
    assert tasks[:20] == tasks[20:]
    with pytest.raises(ValueError, match="rollout_seed=-1"):
        TrainConfig(rollout_seed=-1)


def test_compare_preset_runs_in_miniature_and_reports(tmp_path, monkeypatch, fresh_model):
    """The preset's machinery end to end on a fresh policy: twins, a baseline run once as
    another, a single-agent reference with its majority vote, every section of the
    report and both plots; then ``report_only`` reads the runs back without training."""
    team, single = ("SRPO-Math-v0", "parallel"), ("SRPO-Math-v0", "single@parallel")
    monkeypatch.setitem(PRESETS, "compare-mini", {
        **COMPARE, "pairs": [team, single], "team_pairs": [team],
        "algos": ["srpo", "grpo", "dr_mas", "srpo_sum", "srpo_mean"], "seeds": [0, 1],
        "majority": 2, "same_as": {team: {"dr_mas": "grpo"}},
        "references": {team: "single@parallel"},
        "base": dict(model=fresh_model, compact_prompts=True, steps=2, group_size=2,
                     tasks_per_step=2, eval_tasks=4, eval_k=2, max_new_tokens=8,
                     n_agents=2, epochs=1, minibatch_episodes=1, cost_per_token=0.01),
        "variants": {single: dict(workflow="single", warm_pair="parallel", algos=["srpo"])}})
    assert pair_algos(PRESETS["compare-mini"], *team) == ["srpo", "grpo", "srpo_sum",
                                                          "srpo_mean"]
    rows = run_preset("compare-mini", tmp_path, log=lambda *_: None)
    after = [r for r in rows if r["checkpoint"] == "after"]
    assert {(r["workflow"], r["algo"], r.get("rollout_seed", 0), r["seed"]) for r in after} == {
        (w, a, t, s) for s in (0, 1) for w, a, t in [
            ("parallel", "srpo", 0), ("parallel", "srpo", 1), ("parallel", "grpo", 0),
            ("parallel", "dr_mas", 0), ("parallel", "srpo_sum", 0),
            ("parallel", "srpo_mean", 0), ("single@parallel", "srpo", 0)]}
    copies = [r for r in after if r["algo"] == "dr_mas"]
    assert all(r["same_as"] == "grpo" for r in copies)
    assert not (tmp_path / "runs" / "SRPO-Math-v0-parallel-dr_mas-s0").exists()
    twins = {r["seed"]: r for r in after if r.get("rollout_seed") == 1}
    firsts = {r["seed"]: r for r in after if r["algo"] == "srpo" and r["workflow"] == "parallel"
              and not r.get("rollout_seed")}
    assert twins[0]["train_accuracy"] is not None and set(twins) == set(firsts)
    voted = [r for r in after if "majority" in r]
    assert len(voted) == 2 and all(r["workflow"] == "single@parallel" for r in voted)
    assert all(len(r["majority"]["per_task"]) == 4 for r in voted)
    team_after = [r for r in after if r["workflow"] == "parallel"]
    assert all("solver_majority" in r and 0 <= r["solver_majority"] <= 1 for r in team_after)
    assert all(len(r["clip_fraction_by_update"]) >= 1 for r in team_after if r["algo"] != "dr_mas")
    table = (tmp_path / "table.md").read_text()
    for heading in ("## The noise floor", "## Verdicts", "## The team against one agent",
                    "## Where the set ratio acts", "## Wall time per run",
                    "dr_mas (= grpo)", "Kappa"):
        assert heading in table, heading
    for png in ("forest.png", "learning_curves_seeds.png"):
        assert (tmp_path / png).stat().st_size > 1000

    import srpo_agents.running.train as train_module

    def refuse(*_, **__):
        raise AssertionError("report_only trained a run")

    monkeypatch.setattr(train_module, "train", refuse)
    again = run_preset("compare-mini", tmp_path, log=lambda *_: None, report_only=True)
    assert sorted(json.dumps(r, sort_keys=True) for r in again) == sorted(
        json.dumps(r, sort_keys=True) for r in rows)

    # A later sitting runs seed 1 alone after seed 0's run folders are gone (runs/ does
    # not outlive a session): the report still holds seed 0, from the earlier rows.
    for run in (tmp_path / "runs").glob("*-s0*"):
        shutil.rmtree(run)
    later = run_preset("compare-mini", tmp_path, log=lambda *_: None, seeds=(1,))
    assert sorted(json.dumps(r, sort_keys=True) for r in later) == sorted(
        json.dumps(r, sort_keys=True) for r in rows)
    table = (tmp_path / "table.md").read_text()
    assert "Kept from an earlier invocation" in table and "parallel srpo seed 0 twin 1" in table
    assert "parallel srpo seed 1" not in table.split("Machine:")[0]


def test_solvers_right_reads_the_envs_frozen_member_flags(fresh_model):
    """The team's ceiling counts the solvers right in the parallel event's info (a
    read-only mapping in a Transition), not its keys."""
    from srpo_agents.models.policy import load_policy
    from srpo_agents.rollout.engine import engine_for
    from srpo_agents.running.evaluate import evaluate, run_tasks, solvers_right

    config = TrainConfig(env="SRPO-Math-v0", workflow="parallel", n_agents=2, model=fresh_model,
                         compact_prompts=True, eval_tasks=6, eval_k=2, max_new_tokens=8,
                         difficulty=(0,))
    engine = engine_for(config, load_policy(fresh_model))
    envs, indices = held_out(config)
    for _, _, _, rollout in run_tasks(engine, envs, indices, 1):
        flags = dict(rollout.transitions[0].info["member_correct"])
        assert solvers_right(rollout) == (sum(flags.values()), 2)
    result = evaluate(engine, envs, indices, 2)
    assert 0 <= result["solver_majority"] <= result["solver_any"] <= 1


def test_answer_key_pools_numbers_written_differently():
    from srpo_envs.grading import answer_key

    assert {answer_key(a) for a in ("2", "2.0", r"\frac{4}{2}", "4/2", " 2. ")} == {"2"}
    assert answer_key("0.5") == answer_key("1/2") != answer_key("2")
    assert answer_key("x+1") == "x+1"


def test_a_result_stored_before_a_field_existed_still_matches(tmp_path):
    """Adding a TrainConfig field must not make every stored run stale: a field missing
    from a stored config counts as its default there, and any other change still counts."""
    from srpo_bench.harness import same_config

    config = TrainConfig(env="SRPO-Math-v0", workflow="parallel", out=str(tmp_path / "run"))
    stored = config.to_dict()
    del stored["rollout_seed"]  # written by a version without the field
    stored["tiny_vocab"] = 0  # a field since moved into the tiny model's model_options
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"config": stored}))
    assert same_config(path, config)
    assert not same_config(path, TrainConfig(env="SRPO-Math-v0", workflow="parallel",
                                              out=str(tmp_path / "run"), rollout_seed=3))
    assert not same_config(path, TrainConfig(env="SRPO-Math-v0", workflow="parallel",
                                              out=str(tmp_path / "run"), lr=1e-4))
    # Where it was written is not part of it: an absolute and a relative --out, or the
    # folder moved, still name the same run.
    assert same_config(path, TrainConfig(env="SRPO-Math-v0", workflow="parallel",
                                          out="elsewhere/run"))
