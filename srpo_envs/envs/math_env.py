"""SRPO-Math-v0: math problems solved by a team of LLM agents.

## Description
A team answers one math problem per episode through one of three workflows
(``workflow=``), each a sequence of events; every event emits one ``Transition`` whose
consumed set is the SRPO active set:

- ``"single"``: one solver answers in one event (K = 1). The single-agent reference.
- ``"solve_verify"`` (division of labor): the solver answers (K = 1), the verifier
  accepts, or rejects with feedback and a corrected answer (K = 1); on a rejection the
  solver retries with the feedback, for up to ``max_rounds`` solve/verify rounds.
- ``"parallel"`` (co-evolution): ``n_solvers`` solvers answer the same prompt in one
  event (K = n_solvers), then an aggregator reads their solutions and writes the final
  answer (K = 1).
- ``"routed"`` (mode switching): a router acts first (a singleton event) and chooses the
  team for this problem: ``ROUTE: 1`` sends it to one solver, ``ROUTE: K`` with K in
  2..``n_solvers`` to K solvers in parallel and then the aggregator, and ``+verify``
  adds one verifier check of the final answer (grammar and the default for a reply
  that cannot be read: ``srpo_envs.routing``, ``default_route``). A verifier that
  rejects with a corrected answer replaces the answer; otherwise the answer stands.
  Every transition's info carries ``route_k`` and ``route_verify``; the route event's
  also ``route_parsed``, ``route_failures`` (replies that could not be read) and, for
  generated tasks, the task's ``level``.

## Observation
Per agent, a string: the agent's prompt when it is due to act, otherwise a short note
that it is not its turn. Space: ``gymnasium.spaces.Text`` over ``srpo_envs.text.CHARSET``
(printable BMP characters plus newline and tab) with a length bound computed from the
templates, ``max_question_chars`` and ``max_output_chars``. Text that came from a model
or a dataset is inserted as data: chat-template control tokens are neutralized.

## Action
Per agent, a string (its full response). See ``srpo_envs.event_env`` for the rules on
missing, ``None``, over-long and mistyped actions and unknown agent keys.

## Rewards
The team reward is ``reward_correct`` when the final answer is correct and
``reward_wrong`` otherwise, paid at the last event; earlier events pay 0. The final
answer is the last ``\\boxed{...}`` of the deciding text, else its last number
(``srpo_envs.grading``). Graded events carry ``info["correct"]``:
- a solve event: whether the solver's answer is correct;
- the parallel solve event: ``info["member_correct"]`` per solver and ``correct`` for
  their majority answer (ties go to the first solver in agent order);
- the final event: whether the final answer is correct (``info["final_answer"]``), and
  ``info["boxed"]``: whether it was read from a non-empty ``\\boxed{}`` (the format the
  prompts ask for) rather than from a last number; ``info["answer_anywhere"]``: whether
  the gold answer is among every box and number the team wrote this episode
  (``srpo_envs.grading.every_answer``): a bound on what reading the answers differently
  could score, which tells a gain in format from one in arithmetic.

An optional team cost (``cost_per_token``, off by default; ``srpo_envs.routing``) is
subtracted from the reward at the last event and reported apart in its info.

Verifier replies: ``VERDICT: ACCEPT`` or ``VERDICT: REJECT`` (the last one written
counts, case-insensitive). Without a verdict line, a reply whose boxed answer differs
from the candidate's is a rejection with that correction, anything else an acceptance.
When the last round ends in a rejection, the verifier's corrected answer (if it wrote
one) is final, otherwise the solver's. A missing aggregator leaves no final answer
(wrong).

## Episode end
Terminates after the final event: 1 event for single, 2 for parallel, 2 to
``2 * max_rounds`` for solve_verify, 2 to 4 for routed. Episodes are never truncated.

## Arguments
See ``MathEnvConfig``. ``prompts`` overrides role templates by role name (``solver``,
``solver_retry``, ``verifier``, ``aggregator``, ``router``); see ``REQUIRED_PLACEHOLDERS`` for the
placeholders each must contain. An aggregator template may leave out ``{question}``, and
may show the solvers' final answers only (``{answers}``: one line ``Answer i: ...`` per
solver, in agent order) instead of their full solutions (``{solutions}``). ``prompts`` may
instead name a set of ``PROMPT_SETS``: ``"example-v1"`` gives the solver and the verifier
a format instruction and one worked example, which small instruct models need before
their answers can be read (measured in ``benchmarks/results/real_model_candidates.md``).

## Version history
- v0: initial release.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srpo_envs.event_env import EventEnv, EventOutcome
from srpo_envs.grading import answer_key, answers_match, boxed, extract_answer, written_anywhere
from srpo_envs.math_tasks import (
    MathTask,
    check_levels,
    check_split_by,
    distinct_tasks,
    generate_task,
    load_tasks,
)
from srpo_envs.routing import (
    Route,
    TokenCounter,
    check_cost,
    parse_default_route,
    parse_route,
)
from srpo_envs.splits import HELD_OUT, SMALL_SPLIT, check_split, small_split
from srpo_envs.text import as_data, check_prompt_overrides, named_prompts, render

WORKFLOWS = ("single", "solve_verify", "parallel", "routed")

DEFAULT_PROMPTS: dict[str, str] = {
    "solver": (
        "You are a math solver. Solve the problem step by step and put the final answer "
        "in \\boxed{}.\n\nProblem: {question}\n"
    ),
    "solver_retry": (
        "You are a math solver. Solve the problem step by step and put the final answer "
        "in \\boxed{}.\n\nProblem: {question}\n\nYour previous solution:\n{previous}\n\n"
        "A verifier rejected it with this feedback:\n{feedback}\n\nWrite a corrected "
        "solution.\n"
    ),
    "verifier": (
        "You are a math verifier. Check the solution to the problem. If its final answer "
        "is correct, reply VERDICT: ACCEPT. Otherwise reply VERDICT: REJECT, explain the "
        "error and give the corrected final answer in \\boxed{}.\n\nProblem: {question}\n\n"
        "Solution:\n{solution}\n"
    ),
    "aggregator": (
        "You are an aggregator. Several solvers answered the problem below. Compare "
        "their solutions and write the final answer in \\boxed{}.\n\nProblem: {question}"
        "\n\n{solutions}\n"
    ),
    "router": (
        "You route a math problem to a team. Reply ROUTE: K, where K = 1 sends it to one "
        "solver and K = 2 to {k_max} sends it to K solvers in parallel whose solutions an "
        "aggregator combines. Append +verify to have a verifier check the final answer "
        "(for example ROUTE: 2+verify). Larger teams cost more.\n\nProblem: {question}\n"
    ),
}
# Named prompt sets (``prompts="example-v1"``); a name, once published, never changes its
# text: a new text gets a new version, so results recorded under a name stay reproducible.
PROMPT_SETS: dict[str, dict[str, str]] = {
    "default": {},
    "example-v1": {
        "solver": (
            "You are a math solver. Work out the answer in one short line and put it in "
            "\\boxed{}.\n\nExample problem: A shelf holds 6 cups and 5 more cups are put on "
            "it. How many cups are on the shelf?\nExample answer: 6 + 5 = 11, so the answer "
            "is \\boxed{11}.\n\nProblem: {question}\n"),
        "verifier": (
            "You are a math verifier. Check the solution to the problem. If its final "
            "answer is correct, reply VERDICT: ACCEPT. Otherwise reply VERDICT: REJECT and "
            "the corrected answer in \\boxed{}.\n\nExample: for the problem \"A shelf holds "
            "6 cups and 5 more cups are put on it. How many cups are on the shelf?\" and the "
            "solution \"6 + 5 = 12, so the answer is \\boxed{12}.\" reply: VERDICT: REJECT. "
            "6 + 5 = 11, so the answer is \\boxed{11}.\n\nProblem: {question}\n\n"
            "Solution:\n{solution}\n"),
    },
}
REQUIRED_PLACEHOLDERS = {
    "solver": {"question"},
    "solver_retry": {"question", "previous", "feedback"},
    "verifier": {"question", "solution"},
    # The question is optional: an aggregator prompt without it makes the aggregator a
    # pure selector, whose answer can only come from the solvers. It reads the full
    # solutions or only their final answers (a tuple: at least one of them).
    "aggregator": {("solutions", "answers")},
    "router": {"question"},
}
_SOLUTION_SLOT = 64  # room per inserted solution for its "Solution i (agent):" header
_VERDICT = re.compile(r"VERDICT\s*:\s*(ACCEPT|REJECT)", re.IGNORECASE)
NO_ANSWER = "(no answer)"


@dataclass
class MathEnvConfig:
    """Arguments of SRPO-Math-v0; checked on construction."""

    workflow: str = "parallel"
    """"single", "solve_verify" (division of labor) or "parallel" (co-evolution)."""
    n_solvers: int = 3
    """Solvers in the parallel workflow (the size K of its solve event), and K_max of the
    routed workflow; 1..64."""
    dataset: str | Path | None = None
    """None for the embedded generator, a JSONL path (question, answer), or a
    Hugging Face ``datasets`` name (needs the network and the ``datasets`` package)."""
    dataset_config: str | None = None
    """Config name for a ``datasets`` dataset (e.g. "main" for openai/gsm8k)."""
    dataset_split: str = "test"
    """Split of a ``datasets`` dataset."""
    difficulty: int | tuple[int, ...] = 1
    """Generator level(s) 0-5, see ``srpo_envs.math_tasks``; a tuple mixes levels."""
    split: str = "train"
    """Generator split: "train", "validation" or "test", disjoint by computation
    (``srpo_envs.splits``); the held-out ones are read by evaluations only."""
    split_by: str = "computation"
    """What the generator's splits are keyed by: "computation" (held out by arithmetic) or
    "text" (the splits before issue 60, to repeat their runs on the same tasks: held out
    by wording only, ``math_tasks.SPLIT_BY``)."""
    task_seed: int = 0
    """Seed of the generator's task stream (the env's ``seed`` picks tasks from it)."""
    max_rounds: int = 2
    """Solve/verify rounds in the solve_verify workflow; >= 1."""
    max_output_chars: int = 4096
    """Longest agent text consumed; longer texts are clipped."""
    max_question_chars: int = 8192
    """Longest question placed in a prompt; longer questions are clipped."""
    reward_correct: float = 1.0
    reward_wrong: float = 0.0
    prompts: Mapping[str, str] | str = field(default_factory=dict)
    """Overrides of ``DEFAULT_PROMPTS`` by role, or the name of a set in ``PROMPT_SETS``."""
    default_route: str = "ROUTE: 1"
    """Routed workflow: the route taken when the router's reply cannot be read."""
    cost_per_token: float = 0.0
    """Team cost per generated token, subtracted at the last event (``srpo_envs.routing``)."""
    token_counter: TokenCounter | None = None
    """Counts a text's tokens for the cost (default: about 4 characters per token)."""

    def __post_init__(self) -> None:
        if self.workflow not in WORKFLOWS:
            raise ValueError(f"workflow={self.workflow!r}: expected one of {WORKFLOWS}")
        if not isinstance(self.n_solvers, int) or not 1 <= self.n_solvers <= 64:
            raise ValueError(f"n_solvers={self.n_solvers!r}: expected an int in 1..64")
        if not isinstance(self.max_rounds, int) or self.max_rounds < 1:
            raise ValueError(f"max_rounds={self.max_rounds!r}: expected an int >= 1")
        for name in ("max_output_chars", "max_question_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 16:
                raise ValueError(f"{name}={value!r}: expected an int >= 16")
        check_split(self.split)
        check_split_by(self.split_by)
        self.difficulty = check_levels(self.difficulty)
        check_cost(self.cost_per_token, 0.0, self.token_counter)
        self.route = parse_default_route(self.default_route, self.n_solvers, True,
                                         "default_route")
        self.prompts = named_prompts(self.prompts, PROMPT_SETS)
        check_prompt_overrides(self.prompts, DEFAULT_PROMPTS, REQUIRED_PLACEHOLDERS)


def parse_verdict(text: str, candidate: str | None) -> tuple[bool, str | None]:
    """(accepted, corrected answer or None) for a verifier reply; rules in the module doc."""
    corrected = extract_answer(text) if "\\boxed" in text or "\\fbox" in text else None
    verdicts = _VERDICT.findall(text)
    if verdicts:
        return verdicts[-1].upper() == "ACCEPT", corrected
    if corrected is not None and corrected != "" and not (
        candidate is not None and answers_match(corrected, candidate)
    ):
        return False, corrected
    return True, corrected


class MathEnv(EventEnv):
    __doc__ = __doc__
    metadata = {"name": "srpo_math_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(self, seed: int | None = None, render_mode: str | None = None, **kwargs: Any):
        self.config = config = MathEnvConfig(**kwargs)
        self.templates = {**DEFAULT_PROMPTS, **config.prompts}
        if config.workflow == "single":
            self.possible_agents = ["solver_0"]
        elif config.workflow == "solve_verify":
            self.possible_agents = ["solver_0", "verifier_0"]
        else:
            self.possible_agents = [f"solver_{i}" for i in range(config.n_solvers)]
            self.possible_agents.append("aggregator_0")
            if config.workflow == "routed":
                self.possible_agents = ["router_0", *self.possible_agents, "verifier_0"]
        self.cost_per_token = config.cost_per_token
        self.token_counter = config.token_counter
        self.roles = {a: a.rsplit("_", 1)[0] for a in self.possible_agents}
        self._tasks: list[MathTask] | None = None
        if config.dataset is not None:
            self._tasks = load_tasks(config.dataset, config.dataset_config,
                                     config.dataset_split)
        self.max_output_chars = config.max_output_chars
        inserted = max(2, config.n_solvers if config.workflow in ("parallel", "routed") else 1)
        self.max_prompt_chars = (max(len(t) for t in self.templates.values())
                                 + config.max_question_chars
                                 + inserted * (config.max_output_chars + _SOLUTION_SLOT))
        super().__init__(seed=seed, render_mode=render_mode)

    # -- task source ----------------------------------------------------------------
    @property
    def current_task(self) -> MathTask:
        """The task of the current episode (scripted policies and tests read its answer)."""
        return self._task

    @property
    def num_tasks(self) -> int | None:
        """Tasks in the dataset, or None for the unlimited generator."""
        return None if self._tasks is None else len(self._tasks)

    def held_out_warning(self) -> str | None:
        """Why a held-out score of this env's split says little (a generator level too
        small to split: ``splits.small_split``), or None."""
        if self._tasks is not None:
            return None
        if self.config.split_by == "text" and self.config.split in HELD_OUT:
            return (f"generated math split by question text (split_by='text'): the "
                    f"{self.config.split} split is held out by wording only, its problems' "
                    f"arithmetic is often a training problem's")
        return small_split("generated math", self.config.difficulty, self.config.split,
                           self.distinct_tasks(SMALL_SPLIT))

    def distinct_tasks(self, limit: int) -> int:
        """Distinct tasks this env's source holds, counted up to ``limit`` (an evaluation
        uses each once; a small generator level has fewer than asked)."""
        if self._tasks is not None:
            return min(limit, len(self._tasks))
        return distinct_tasks(limit, self.config.difficulty, self.config.task_seed,
                              self.config.split, self.config.split_by)

    def task(self, index: int) -> MathTask:
        """Task ``index`` of this env's source (for the generator: of its stream)."""
        if self._tasks is None:
            return generate_task(index, self.config.difficulty, self.config.task_seed,
                                 self.config.split, self.config.split_by)
        return self._tasks[index % len(self._tasks)]

    def _pick_task(self, options: Mapping[str, Any]) -> MathTask:
        if "task" in options:
            task = options["task"]
            if not isinstance(task, MathTask):
                raise TypeError(f"options['task'] is a {type(task).__name__}; expected MathTask")
            return task
        if "task_index" in options:
            index = options["task_index"]
            if not isinstance(index, int) or index < 0:
                raise ValueError(f"options['task_index']={index!r}: expected an int >= 0")
            return self.task(index)
        limit = 2**31 if self._tasks is None else len(self._tasks)
        return self.task(self._rng.randrange(limit))

    # -- the workflows ---------------------------------------------------------------
    def _begin(self, task: MathTask) -> str:
        self._task = task
        self._question = as_data(task.question, self.config.max_question_chars)
        self._round = 0
        self._boxed: set[str] = set()  # answers read from a box this episode
        self._written: list[str] = []  # every text the team wrote this episode
        self._candidate = ""
        self._route: Route | None = None
        self._route_failures = 0
        if self.config.workflow == "routed":
            self._first_prompts = {"router_0": render(
                self.templates["router"],
                {"question": self._question, "k_max": str(self.config.n_solvers)})}
            return task.task_id
        self._first_prompts = self._solver_prompts(self.config.n_solvers
                                                   if self.config.workflow == "parallel" else 1)
        return task.task_id

    def _solver_prompts(self, k: int) -> dict[str, str]:
        prompt = render(self.templates["solver"], {"question": self._question})
        return {f"solver_{i}": prompt for i in range(k)}

    def _answer_of(self, text: str | None) -> str | None:
        answer = extract_answer(text) if text else None
        if answer and boxed(text):
            self._boxed.add(answer)
        return answer

    def _is_correct(self, answer: str | None) -> bool:
        return bool(answer) and answers_match(answer, self._task.answer)

    def _final(self, event_type: str, answer: str | None, info: dict) -> EventOutcome:
        correct = self._is_correct(answer)
        info.update(correct=correct, final_answer=answer, gold=self._task.answer,
                    answer_key=None if answer is None else answer_key(answer),
                    boxed=bool(answer) and answer in self._boxed,
                    answer_anywhere=written_anywhere(self._written, self._task.answer))
        reward = self.config.reward_correct if correct else self.config.reward_wrong
        return EventOutcome(event_type, reward=reward, terminated=True, info=info)

    def _consume(self, texts: Mapping[str, str | None]) -> EventOutcome:
        # the router's reply is a route, not an answer ("k=3" must not count as a 3)
        self._written += [text for agent, text in texts.items()
                          if text and not agent.startswith("router")]
        workflow = self.config.workflow
        if workflow == "routed":
            outcome = self._routed_event(texts)
            outcome.info.update(route_k=self._route.k, route_verify=self._route.verify)
            return outcome
        if workflow == "single":
            answer = self._answer_of(texts["solver_0"])
            return self._final("solve", answer, {"answer": answer})
        if workflow == "parallel":
            if "aggregator_0" in texts:
                return self._final("aggregate", self._answer_of(texts["aggregator_0"]),
                                   {"answer": self._answer_of(texts["aggregator_0"])})
            return self._parallel_solve(texts)
        if "solver_0" in texts:
            return self._solve_step(texts["solver_0"])
        return self._verify_step(texts["verifier_0"])

    def _parallel_solve(self, texts: Mapping[str, str | None]) -> EventOutcome:
        answers = {agent: self._answer_of(text) for agent, text in texts.items()}
        member_correct = {agent: self._is_correct(ans) for agent, ans in answers.items()}
        votes = Counter(a for a in answers.values() if a)
        majority = max(votes, key=lambda a: (votes[a], -list(answers.values()).index(a)),
                       default=None)
        sections, lines = [], []
        for i, (agent, text) in enumerate(texts.items(), start=1):
            body = as_data(text, self.config.max_output_chars) if text else NO_ANSWER
            sections.append(f"Solution {i} ({agent}):\n{body}")
            answer = answers[agent]
            lines.append(f"Answer {i}: "
                         + (as_data(answer, self.config.max_output_chars) if answer else NO_ANSWER))
        prompt = render(self.templates["aggregator"],
                        {"question": self._question, "solutions": "\n\n".join(sections),
                         "answers": "\n".join(lines)})
        info = {"member_answers": answers, "member_correct": member_correct,
                "majority_answer": majority, "correct": self._is_correct(majority)}
        return EventOutcome("solve", info=info, next_prompts={"aggregator_0": prompt})

    def _to_verifier(self, text: str | None) -> dict[str, str]:
        """Keep ``text`` as the candidate; the verifier's prompt for it."""
        self._candidate = text or ""
        solution = as_data(text, self.config.max_output_chars) if text else NO_ANSWER
        return {"verifier_0": render(self.templates["verifier"],
                                     {"question": self._question, "solution": solution})}

    def _judge(self, text: str | None) -> tuple[str | None, bool, str | None, dict[str, Any]]:
        """(candidate answer, accepted, corrected answer, info) of a verifier reply."""
        candidate = self._answer_of(self._candidate)
        accepted, corrected = parse_verdict(text or "", candidate)
        if corrected:  # parse_verdict reads a correction from a box only
            self._boxed.add(corrected)
        info: dict[str, Any] = {"verdict": "accept" if accepted else "reject",
                                "candidate_correct": self._is_correct(candidate)}
        info["verifier_right"] = accepted == info["candidate_correct"]
        return candidate, accepted, corrected, info

    def _solve_step(self, text: str | None) -> EventOutcome:
        answer = self._answer_of(text)
        info = {"answer": answer, "correct": self._is_correct(answer), "round": self._round}
        return EventOutcome("solve", info=info, next_prompts=self._to_verifier(text))

    def _verify_step(self, text: str | None) -> EventOutcome:
        candidate, accepted, corrected, info = self._judge(text)
        info["round"] = self._round
        if accepted:
            return self._final("verify", candidate, info)
        self._round += 1
        if self._round >= self.config.max_rounds:
            return self._final("verify", corrected or candidate, info)
        feedback = as_data(text or "", self.config.max_output_chars)
        previous = as_data(self._candidate, self.config.max_output_chars) or NO_ANSWER
        prompt = render(self.templates["solver_retry"],
                        {"question": self._question, "previous": previous,
                         "feedback": feedback})
        return EventOutcome("verify", info=info, next_prompts={"solver_0": prompt})


    # -- the routed workflow ---------------------------------------------------------------
    def _routed_event(self, texts: Mapping[str, str | None]) -> EventOutcome:
        if "router_0" in texts:
            return self._route_step(texts["router_0"])
        if "verifier_0" in texts:
            return self._routed_verify(texts["verifier_0"])
        if "aggregator_0" in texts:
            answer = self._answer_of(texts["aggregator_0"])
            return self._routed_answer("aggregate", texts["aggregator_0"],
                                       {"answer": answer})
        if self._route.k == 1:
            answer = self._answer_of(texts["solver_0"])
            return self._routed_answer("solve", texts["solver_0"],
                                       {"answer": answer, "correct": self._is_correct(answer)})
        return self._parallel_solve(texts)

    def _route_step(self, text: str | None) -> EventOutcome:
        route, parsed = parse_route(text, self.config.n_solvers, True, self.config.route)
        self._route = route
        self._route_failures += not parsed
        info = {"route_parsed": parsed, "route_failures": self._route_failures}
        if "level" in self._task.meta:  # generated tasks: does routing follow difficulty?
            info["level"] = self._task.meta["level"]
        return EventOutcome("route", info=info, next_prompts=self._solver_prompts(route.k))

    def _routed_answer(self, event_type: str, text: str | None, info: dict) -> EventOutcome:
        """The team's answer (one solver's or the aggregator's): final, or to the verifier."""
        if not self._route.verify:
            return self._final(event_type, info["answer"], info)
        return EventOutcome(event_type, info=info, next_prompts=self._to_verifier(text))

    def _routed_verify(self, text: str | None) -> EventOutcome:
        candidate, accepted, corrected, info = self._judge(text)
        return self._final("verify", candidate if accepted else (corrected or candidate), info)


def parallel_env(**kwargs: Any) -> MathEnv:
    """The PettingZoo parallel env; keyword arguments as in ``MathEnvConfig`` plus
    ``seed`` and ``render_mode``."""
    return MathEnv(**kwargs)
