"""The harness's presets as data: each names its env/workflow pairs, algorithms and
seeds, the settings every run shares (``base``), per-env ``overrides``, per-pair
``variants`` (a workflow and config overrides; ``warm_pair``: whose warm start it
shares) and, for the comparison presets, twins, references and ``same_as`` aliases.
``benchmarks/comparisons/harness.py``'s docstring describes the presets for users.
"""

from __future__ import annotations

from typing import Any

from srpo_agents.learning.objective import ALGORITHMS
from srpo_agents.running.benchmark_sets import default_data_dir
from srpo_agents.running.search_recipe import WARM_ROOT, track_settings
from srpo_agents.tiny.config import TinyConfig
from srpo_bench.math_team import MATH_DEMO

ALL_ALGOS = sorted(ALGORITHMS)
DATA = default_data_dir()
REFERENCE = "srpo"
KAPPA_ABLATION = ("srpo", "srpo_sum", "srpo_mean")  # kappa = 1/sqrt K, 1, 1/K
# Countdown on the tiny policy: the routing preset's settings (16 new tokens: an answer
# over two or three numbers is short), levels 0 and 1 (two and three numbers 1-9).
COUNTDOWN_BASE = dict(model="tiny", steps=40, group_size=8, tasks_per_step=16, lr=3e-5,
                      epochs=1, minibatch_episodes=32, eps_high=0.28, difficulty=(0, 1),
                      max_new_tokens=16, eval_tasks=500, eval_k=4, n_agents=3,
                      warmstart_steps=400, warmstart_decay=True, warmstart_minutes=60.0,
                      warmstart_target=1.0, warmstart_skill=0.5)
# The comparison: the math demo's hyperparameters, the same for every algorithm and pair and
# fixed before the runs, so no algorithm is tuned on its own result; 500 distinct held-out
# tasks per pair (Countdown mixes levels 0 and 1, as level 0's test split holds 43); k = 4
# per task.
COMPARE_BASE = {**{k: v for k, v in MATH_DEMO.items()
                   if k not in ("env", "workflow", "algo", "eval_every", "curve_tasks",
                                "save_every")}, "eval_k": 4}
COMPARE_TEAMS = [("SRPO-Math-v0", "parallel"), ("SRPO-Math-v0", "solve_verify"),
                 ("SRPO-Countdown-v0", "parallel")]
# The order runs start in (run_preset): srpo, then the baselines; srpo's twins (the noise
# floor) and the single-agent references follow all of them.
COMPARE_ORDER = ["srpo", "grpo", "magrpo", "srpo_singleton", "dr_mas", "at_grpo",
                 "srpo_sum", "srpo_mean"]
COUNTDOWN_VARIANTS = {("SRPO-Countdown-v0", "single"): dict(workflow="single",
                                                           warm_pair="parallel")}
SEARCH = "SRPO-Search-v0"
# The search track's warm starts are committed (about 4 MB each): built once by
# benchmarks/learning/search_track.py, they are read by every later run, session and CI clone
# (the path is relative to the repository root, where the harness runs).
SEARCH_WARM_ROOT = WARM_ROOT
# The math demo's RL settings on the search track: 16 questions x G=8 per step, one epoch
# in mini-batches of 32 episodes (4 optimizer steps), lr 3e-5, clip-higher; 500 held-out
# questions x k=4.
SEARCH_RL = {**{k: MATH_DEMO[k] for k in ("group_size", "tasks_per_step", "lr", "epochs",
                                          "minibatch_episodes", "eps_high")},
             "eval_tasks": 500, "eval_k": 4}
SEARCH_VARIANTS = {
    (SEARCH, "search_answer_verify"): track_settings("search_answer_verify"),
    (SEARCH, "routed"): track_settings("routed"),
    (SEARCH, "parallel"): {**track_settings("routed"), "workflow": "parallel",
                           "warm_pair": "routed"}}
# Issue 60, fair by construction: every algorithm on four team pairs with the same
# optimizer steps on the same episodes (mini-batches of 32 of a step's 128 episodes: 4
# steps a batch, so ratios differ from 1 after the first), one clip rule (the token budget
# divides the losses that sum tokens) and held-out tasks disjoint from training by
# computation. Declared before any of its runs: the compare preset's settings (the math
# demo's, lr 3e-5, 60 steps, 16 tasks x G = 8, k = 4) but for the math levels: level 0's
# test split holds only 34 computations now, so math mixes levels 0 and 1 (188 test
# computations, every one of them scored), as Countdown already did (500). Search: the
# parallel team of the search track (2 searchers, then the aggregator) from its committed
# routed warm start. "same_as": baselines identical by construction on a pair
# (tests/test_compare.py), run once.
FAIR_TEAMS = [("SRPO-Math-v0", "parallel"), ("SRPO-Math-v0", "solve_verify"),
              ("SRPO-Countdown-v0", "parallel"), (SEARCH, "parallel")]
FAIR_SAME_AS = {("SRPO-Math-v0", "parallel"): {"dr_mas": "grpo", "at_grpo": "grpo"},
                ("SRPO-Math-v0", "solve_verify"): {"srpo_sum": "srpo", "srpo_mean": "srpo",
                                                   "srpo_singleton": "srpo"},
                ("SRPO-Countdown-v0", "parallel"): {"dr_mas": "grpo", "at_grpo": "grpo"}}
FAIR_BASE = {**COMPARE_BASE, "minibatch_episodes": 32, "epochs": 1}
FAIR_OVERRIDES = {"SRPO-Math-v0": dict(difficulty=(0, 1)),
                  "SRPO-Countdown-v0": dict(difficulty=(0, 1), max_new_tokens=16),
                  # the track's warm-start skill, not the math demo's (its warm start is
                  # the committed one: tests/test_harness.py checks the key)
                  SEARCH: {"warmstart_skill": TinyConfig.warmstart_skill,
                           **{k: v for k, v in SEARCH_VARIANTS[(SEARCH, "parallel")].items()
                              if k not in ("workflow", "warm_pair")}}}
PRESETS: dict[str, dict[str, Any]] = {
    "fair": {"pairs": FAIR_TEAMS, "team_pairs": FAIR_TEAMS, "algos": COMPARE_ORDER,
             "seeds": [0, 1, 2], "same_as": FAIR_SAME_AS, "base": FAIR_BASE,
             "overrides": FAIR_OVERRIDES, "warm_root": {SEARCH: SEARCH_WARM_ROOT},
             # the routed warm start's own settings, as search_parallel has them
             "variants": {(SEARCH, "routed"): SEARCH_VARIANTS[(SEARCH, "routed")],
                          (SEARCH, "parallel"): {"warm_pair": "routed"}}},
    # Issue 60, item 5: the paper's kappa ablation on the tiny search team, K = 5
    # searchers in parallel (then the aggregator): one output per event, sum, mean and
    # 1/sqrt(K), paired, 3 seeds, 4 optimizer steps a batch; the fair preset's settings,
    # from the search track's routed warm start. Declared before its runs.
    "fair_k5": {"pairs": [(SEARCH, "parallel")], "team_pairs": [(SEARCH, "parallel")],
                "algos": ["srpo", "srpo_singleton", "srpo_sum", "srpo_mean"],
                "seeds": [0, 1, 2], "base": FAIR_BASE,
                # five searchers on the run only: the warm start is the track's routed
                # team of two (its searcher prompt does not name the searcher)
                "overrides": {SEARCH: FAIR_OVERRIDES[SEARCH]},
                "warm_root": {SEARCH: SEARCH_WARM_ROOT},
                "variants": {(SEARCH, "routed"): SEARCH_VARIANTS[(SEARCH, "routed")],
                             (SEARCH, "parallel"): {"warm_pair": "routed", "n_agents": 5}}},
    "smoke": {"pairs": [("SRPO-Math-v0", "parallel")], "algos": ["srpo", "grpo"],
              "seeds": [0], "base": dict(model="fresh-tiny", steps=2, group_size=2,
                                         tasks_per_step=2, eval_tasks=4, eval_k=2,
                                         max_new_tokens=12, n_agents=2)},
    "small": {"pairs": [("SRPO-Math-v0", "parallel"), ("SRPO-Math-v0", "solve_verify"),
                        ("SRPO-Search-v0", "parallel"),
                        ("SRPO-Search-v0", "search_answer_verify")],
              "algos": ALL_ALGOS, "seeds": [0, 1, 2],
              # Two epochs over each batch: the second is off-policy (ratio != 1), which
              # is where the set ratio and its clip act; with one on-policy step per batch
              # every ratio is 1 and only the weighting of the gradient differs.
              # max_turns 3: the math solve_verify rounds its runs used
              "base": dict(model="tiny", steps=6, group_size=4, tasks_per_step=8, max_turns=3,
                           eval_tasks=64, eval_k=4, max_new_tokens=32, difficulty=(0,),
                           lr=1e-4, epochs=2, warmstart_minutes=3.0),
              # A search episode costs the character-level policy 3-8x a math one (the
              # retrieved passages are in its prompts): one-hop questions, two searchers,
              # two rounds and a smaller budget keep the preset near an hour on 2 cores.
              # 48 new tokens: "<search>" + a name + "</search>" is up to ~45 characters,
              # and a query cut off before its closing tag is no query.
              "overrides": {"SRPO-Search-v0": dict(
                  n_agents=2, max_turns=2, steps=3, eval_tasks=32, max_new_tokens=48,
                  extra_env_kwargs={"hops": [1]})}},
    # Mode switching: the routed workflow against fixed K = 1 and fixed
    # K = K_max, one algorithm (srpo), the same budget and the same starting policy (the
    # routed pair's warm start, which imitates a scripted team routing at random, so it
    # covers every route). "routed+cost" charges COST_PER_TOKEN per generated token.
    # Math mixes levels 0 and 1 so the router can condition on difficulty. Settings are
    # the demo's (lr 3e-5, 4 clipped updates per batch, clip-higher), fixed before the run.
    "routing": {"pairs": [("SRPO-Math-v0", "routed"), ("SRPO-Math-v0", "routed+cost"),
                          ("SRPO-Math-v0", "K=1"), ("SRPO-Math-v0", "K=3"),
                          ("SRPO-Search-v0", "routed"), ("SRPO-Search-v0", "routed+cost"),
                          ("SRPO-Search-v0", "K=1"), ("SRPO-Search-v0", "K=2")],
                "algos": ["srpo"], "seeds": [0],
                "compare": [(env, a, b) for env, k_max in (("SRPO-Math-v0", "K=3"),
                                                           ("SRPO-Search-v0", "K=2"))
                            for a, b in (("routed", "K=1"), ("routed", k_max),
                                         ("routed+cost", "K=1"), ("routed", "routed+cost"),
                                         ("K=1", k_max))],
                "base": dict(model="tiny", steps=40, group_size=8, tasks_per_step=16,
                             lr=3e-5, epochs=1, minibatch_episodes=32, eps_high=0.28,
                             difficulty=(0, 1), max_new_tokens=32, eval_tasks=500, eval_k=4,
                             n_agents=3, warmstart_steps=400, warmstart_decay=True,
                             warmstart_minutes=60.0, warmstart_target=1.0,
                             warmstart_skill=0.5),
                # Search: from the search track's committed routed warm start
                # (one-hop questions, 2 rounds), 60 steps on 1- to 3-hop questions with 3
                # rounds (run_settings), so the router can condition on hop count; the
                # route events carry it (the table's "by level" is hops here).
                "warm_root": {SEARCH: SEARCH_WARM_ROOT},
                "overrides": {SEARCH: {**track_settings("routed"), "steps": 60,
                                       "warmstart_skill": 0.75}},
                "run_settings": {SEARCH: {"max_turns": 3, "extra_env_kwargs": {
                    "hops": [1, 2, 3], "top_k": track_settings("routed")["extra_env_kwargs"][
                        "top_k"]}}},
                "variants": {
                    ("SRPO-Math-v0", "routed+cost"): dict(workflow="routed", warm_pair="routed",
                                                          cost_per_token=0.002),
                    ("SRPO-Math-v0", "K=1"): dict(workflow="single", warm_pair="routed"),
                    ("SRPO-Math-v0", "K=3"): dict(workflow="parallel", warm_pair="routed"),
                    ("SRPO-Search-v0", "routed+cost"): dict(
                        workflow="routed", warm_pair="routed", cost_per_token=0.002,
                        cost_per_tool_call=0.05),
                    ("SRPO-Search-v0", "K=1"): dict(workflow="parallel", n_agents=1,
                                                    warm_pair="routed"),
                    ("SRPO-Search-v0", "K=2"): dict(workflow="parallel", warm_pair="routed")}},
    # A third environment (the tutorial env, docs/new-environment.md): does the tiny policy
    # learn Countdown? One solver against three proposers and an aggregator, from one
    # shared warm start (the parallel pair's) so they differ only in the team. The
    # settings are the routing preset's, fixed before the run.
    "countdown": {"pairs": [("SRPO-Countdown-v0", "parallel"), ("SRPO-Countdown-v0", "single")],
                  "algos": ["srpo"], "seeds": [0],
                  "compare": [("SRPO-Countdown-v0", "parallel", "single")],
                  "base": COUNTDOWN_BASE, "variants": COUNTDOWN_VARIANTS},
    # countdown at four times the steps, a budget sweep: whether a longer budget separates
    # the parallel team from the single solver.
    "countdown_long": {"pairs": [("SRPO-Countdown-v0", "parallel"),
                                 ("SRPO-Countdown-v0", "single")],
                       "algos": ["srpo"], "seeds": [0],
                       "compare": [("SRPO-Countdown-v0", "parallel", "single")],
                       "base": {**COUNTDOWN_BASE, "steps": 160},
                       "variants": COUNTDOWN_VARIANTS},
    # SRPO against every baseline where the tiny team learns. "same_as": a
    # baseline identical by construction on a pair (tests/test_compare.py proves it by
    # weights) is run once and its rows copied. "twins": srpo again per seed with these
    # rollout seeds (the noise floor). "references": each team's single agent, trained
    # from the team's warm start with the same budget, and its majority vote over
    # "majority" samples.
    "compare": {"pairs": COMPARE_TEAMS + [(env, f"single@{w}") for env, w in COMPARE_TEAMS],
                "team_pairs": COMPARE_TEAMS, "algos": COMPARE_ORDER, "seeds": [0, 1, 2],
                "twins": [1], "majority": 3,
                "same_as": {("SRPO-Math-v0", "parallel"): {"dr_mas": "grpo", "at_grpo": "grpo"},
                            ("SRPO-Math-v0", "solve_verify"): {
                                "srpo_sum": "srpo", "srpo_mean": "srpo",
                                "srpo_singleton": "srpo"},
                            ("SRPO-Countdown-v0", "parallel"): {"dr_mas": "grpo",
                                                                "at_grpo": "grpo"}},
                "references": {(env, w): f"single@{w}" for env, w in COMPARE_TEAMS},
                "base": COMPARE_BASE,
                "overrides": {"SRPO-Countdown-v0": dict(difficulty=(0, 1), max_new_tokens=16)},
                "variants": {(env, f"single@{w}"): dict(workflow="single", warm_pair=w,
                                                         algos=["srpo"])
                             for env, w in COMPARE_TEAMS}},
    # The search track's pilot: SRPO from the track's cached warm start
    # (benchmarks/learning/search_track.py builds it into warm_root; the routed workflow's serves
    # parallel), the demo's RL settings, and a validation curve every 10 steps, to size
    # the steps of the runs that follow.
    "search_pilot": {"pairs": [(SEARCH, "search_answer_verify"), (SEARCH, "parallel")],
                     "algos": ["srpo"], "seeds": [0], "warm_root": SEARCH_WARM_ROOT,
                     "base": {**SEARCH_RL, "model": "tiny", "steps": 60, "eval_every": 10,
                              "curve_tasks": 200},
                     "variants": SEARCH_VARIANTS},
    # search_answer_verify for 100 steps from the cached warm start, at the demo's lr and
    # at a 3.3 times larger one (at the demo's lr the updates barely clip, so the larger
    # one asks whether the step size holds the pair back), each with the validation curve
    # every 10 steps. Declared before the runs.
    "search_sav": {"pairs": [(SEARCH, "search_answer_verify"), (SEARCH, "sav@lr1e-4")],
                   "algos": ["srpo"], "seeds": [0], "warm_root": SEARCH_WARM_ROOT,
                   "base": {**SEARCH_RL, "model": "tiny", "steps": 100, "eval_every": 10,
                            "curve_tasks": 200},
                   "variants": {**SEARCH_VARIANTS, (SEARCH, "sav@lr1e-4"): {
                       **track_settings("search_answer_verify"),
                       "workflow": "search_answer_verify",
                       "warm_pair": "search_answer_verify", "lr": 1e-4}}},
    # parallel (two searchers, then the aggregator) with the search_sav preset's settings
    # (100 steps at the demo's lr, a validation curve every 10 steps), from the routed
    # team's committed warm start (it holds parallel's roles). Declared before the run.
    "search_parallel": {"pairs": [(SEARCH, "parallel")], "algos": ["srpo"], "seeds": [0],
                        "warm_root": SEARCH_WARM_ROOT,
                        "base": {**SEARCH_RL, "model": "tiny", "steps": 100, "eval_every": 10,
                                 "curve_tasks": 200},
                        "variants": SEARCH_VARIANTS},
    # SRPO against GRPO and Dr. MAS on the search pair that
    # learns, with the search_sav preset's settings (its srpo seed-0 run is this preset's
    # when both write to the same --out), three seeds and one twin of srpo per seed (the
    # noise floor). Declared before its baselines ran; about 22 min per run on one thread.
    "search_compare": {"pairs": [(SEARCH, "search_answer_verify")],
                       "team_pairs": [(SEARCH, "search_answer_verify")],
                       "algos": ["srpo", "grpo", "dr_mas"], "seeds": [0, 1, 2], "twins": [1],
                       # One unit per role per rollout under one team reward: each
                       # (task, agent) group holds the task group's returns, so Dr. MAS's
                       # advantages are GRPO's (tests/test_compare.py proves it by
                       # weights).
                       "same_as": {(SEARCH, "search_answer_verify"): {"dr_mas": "grpo"}},
                       "warm_root": SEARCH_WARM_ROOT,
                       "base": {**SEARCH_RL, "model": "tiny", "steps": 100, "eval_every": 10,
                                "curve_tasks": 200},
                       "variants": SEARCH_VARIANTS},
    # The GPU preset: the paper's setting on the real benchmark files (see
    # srpo_agents.running.benchmark_sets). Training data: the MATH train stand-in; for search,
    # HotpotQA train questions over a Wikipedia retrieval server (Search-R1's protocol)
    # that you start yourself at the URL below.
    "paper": {"pairs": [("SRPO-Math-v0", "parallel"), ("SRPO-Math-v0", "solve_verify"),
                        ("SRPO-Search-v0", "parallel"),
                        ("SRPO-Search-v0", "search_answer_verify")],
              "algos": ALL_ALGOS, "seeds": [0, 1, 2],
              "base": dict(model="Qwen/Qwen2.5-3B-Instruct", backend="vllm", device="cuda",
                           max_turns=3,
                           steps=200, group_size=8, tasks_per_step=32, eval_tasks=200,
                           eval_k=16, max_new_tokens=1024, lr=1e-6),
              "overrides": {
                  "SRPO-Math-v0": dict(
                      dataset=str(DATA / "math" / "math_test_minus_math500.jsonl"),
                      eval_dataset=str(DATA / "math" / "math500.jsonl")),
                  "SRPO-Search-v0": dict(
                      dataset=str(DATA / "search" / "hotpotqa_train_100.jsonl"),
                      eval_dataset=str(DATA / "search" / "hotpotqa_dev_500.jsonl"),
                      retriever="http://127.0.0.1:8000/retrieve", max_new_tokens=512)},
              "benchmarks": {"SRPO-Math-v0": "aime24,amc23,math500,gsm8k",
                             "SRPO-Search-v0": "all"},
              "benchmark_tasks": 500},
}
