"""Scripted policies for demos, tests and throughput benchmarks (no model involved).

``ScriptedMathTeam`` plays every role of SRPO-Math-v0 with a fixed skill: each solver
answers correctly with probability ``skill`` (with the task's reference solution when it
has one; otherwise the answer is off by a small amount, written in the reference's
shape when there is one), the
verifier judges the candidate correctly with probability ``skill`` and the aggregator
takes the majority answer. Both teams' routers (routed workflows) choose a route at
random, uniformly over K (and the verifier, for math), so a warm start that imitates
them covers every option and leaves the choice to RL. It reads the gold answer from the env, so it is an oracle
with noise, useful only to exercise the environments.
"""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

from srpo_envs.envs.math_env import MathEnv
from srpo_envs.envs.search_env import parse_action
from srpo_envs.grading import extract_answer
from srpo_envs.routing import Route


def random_route(rng: random.Random, k_max: int, can_verify: bool) -> str:
    """A router's reply for a route drawn uniformly (K in 1..k_max, verify or not)."""
    return str(Route(rng.randint(1, k_max), can_verify and rng.random() < 0.5))


def _wrong(answer: str, rng: random.Random) -> str:
    try:
        value = Fraction(answer)
    except (ValueError, ZeroDivisionError):
        return answer + "1"
    wrong = value + rng.choice((-2, -1, 1, 2))
    return str(wrong.numerator) if wrong.denominator == 1 else f"{wrong.numerator}/{wrong.denominator}"


class _SkilledTeam:
    """A scripted team that is right with probability ``skill``."""

    def __init__(self, skill: float = 0.6, seed: int = 0):
        if not 0.0 <= skill <= 1.0:
            raise ValueError(f"skill={skill!r}: expected a probability in [0, 1]")
        self.skill = skill
        self.rng = random.Random(seed)


class ScriptedMathTeam(_SkilledTeam):

    def _solve(self, task) -> str:
        """The task's reference solution when right (a reference trajectory a warm start
        can imitate), the same text with a wrong final answer otherwise."""
        right = self.rng.random() < self.skill
        if right and task.solution:
            return task.solution
        answer = task.answer if right else _wrong(task.answer, self.rng)
        if task.solution and "= " in task.solution:
            # The reference's own shape with a wrong last result: a reader (the
            # aggregator, the verifier) cannot tell right from wrong by the format.
            head = task.solution[:task.solution.rfind("= ")]
            return f"{head}= {answer}. \\boxed{{{answer}}}"
        return f"Working it out step by step. The answer is \\boxed{{{answer}}}."

    @staticmethod
    def imitable(env: MathEnv, output) -> bool:
        """Whether a consumed output is worth imitating: a solver's only when it is the
        reference solution (a right one), every other role's always."""
        return output.role != "solver" or output.text == env.current_task.solution

    def act(self, env: MathEnv, observations: dict[str, str]) -> dict[str, str]:
        """Texts for every live agent; agents not due get a filler that the env ignores."""
        gold = env.current_task.answer
        actions = {agent: "(waiting)" for agent in env.agents}
        for agent in env.due_agents:
            role = env.roles[agent]
            if role == "router":
                actions[agent] = random_route(self.rng, env.config.n_solvers, True)
            elif role == "solver":
                actions[agent] = self._solve(env.current_task)
            elif role == "verifier":
                candidate = extract_answer(observations[agent].split("Solution:", 1)[-1])
                right = candidate == gold
                judged_right = right if self.rng.random() < self.skill else not right
                actions[agent] = ("VERDICT: ACCEPT" if judged_right else
                                  f"VERDICT: REJECT. Recheck the arithmetic. \\boxed{{{gold}}}")
            else:
                # The solvers' answers as the env read them, whatever the aggregator's
                # template shows (full solutions or answers only).
                answers = env.last_transition.info["member_answers"].values()
                votes = Counter(a for a in answers if a)
                best = votes.most_common(1)[0][0] if votes else gold
                actions[agent] = f"\\boxed{{{best}}}"
        return actions


class OracleSearchTeam:
    """Plays SRPO-Search-v0 by searching the titles of the task's supporting documents,
    one new title per search, and answering with the gold answer once every supporting
    document has been retrieved or every title searched (the aggregator waits for that,
    the verifier rejects until then). Tests check which gold documents its searches
    actually retrieved: that shows they can be found by their titles within the budget.

    ``slip``: the probability that a query misspells its title (one letter changed), so
    it usually misses. The team then behaves as a careful one should: the answerer writes
    ``<answer>unknown</answer>``, the verifier rejects, the aggregator asks for another
    round, and the next query spells the title right unless it slips too. A warm start
    imitating it (``imitable`` drops the slipped queries) sees what to do after a failed
    search, which a team that never fails cannot show."""

    UNKNOWN = "unknown"

    def __init__(self, slip: float = 0.0, seed: int = 0):
        if not 0.0 <= slip <= 1.0:
            raise ValueError(f"slip={slip!r}: expected a probability in [0, 1]")
        self.slip = slip
        self.rng = random.Random(seed)

    def _retrieved(self, env) -> set[str]:
        found: set[str] = set()
        for t in env.transitions:
            for ids in t.info.get("retrieved_ids", {}).values():
                found.update(ids)
        return found

    @staticmethod
    def _titles(env) -> list[str]:
        task = env.current_task
        return [env.title_of(i) or i for i in task.supporting_ids] or [task.question]

    @classmethod
    def _right_queries(cls, env) -> set[str]:
        """The titles as the env records a query for them (clipped to its limit)."""
        return {t[:env.config.max_query_chars] for t in cls._titles(env)}

    def _misspell(self, title: str) -> str:
        letters = [i for i, ch in enumerate(title) if ch.isalpha()]
        if not letters:
            return title + "x"
        i = self.rng.choice(letters)
        swap = self.rng.choice([c for c in "aeioukmstz" if c != title[i].lower()])
        return title[:i] + (swap.upper() if title[i].isupper() else swap) + title[i + 1:]

    def imitable(self, env, output) -> bool:
        """Whether a consumed output is worth imitating: every output but a slipped
        query (a search for something that is not a supporting title)."""
        action = parse_action(output.text)
        return (output.role not in ("searcher", "agent") or action is None
                or action[0] != "search" or action[1] in self._right_queries(env))

    def act(self, env, observations: dict[str, str]) -> dict[str, str]:
        task = env.current_task
        titles = self._titles(env)
        # Searches spelled right so far (a slipped one does not use up a title).
        right = self._right_queries(env)
        searches = sum(q in right for t in env.transitions
                       for q in t.info.get("queries", {}).values())
        # Done once every gold document was seen, or every title was searched once.
        done = (set(task.supporting_ids) <= self._retrieved(env)) or searches >= len(titles)
        answer = f"<answer>{task.answers[0]}</answer>"
        actions = {agent: "(waiting)" for agent in env.agents}
        for rank, agent in enumerate(env.due_agents):
            role = env.roles[agent]
            title = titles[(searches + rank) % len(titles)]
            if self.slip and self.rng.random() < self.slip:
                title = self._misspell(title)
            query = f"<search>{title}</search>"
            if role == "router":
                actions[agent] = random_route(self.rng, env.config.n_searchers, False)
            elif role == "agent":
                actions[agent] = answer if done else query
            elif role == "searcher":
                actions[agent] = query
            elif role == "aggregator":
                actions[agent] = answer if done else "<search>more</search>"
            elif role == "answerer":
                actions[agent] = answer if done else f"<answer>{self.UNKNOWN}</answer>"
            else:
                # A bare verdict: short enough for a tiny policy to imitate whole.
                actions[agent] = ("<verdict>accept</verdict>" if done else
                                  "<verdict>reject</verdict>")
        return actions


def search_reference_team(skill: float = 0.75, seed: int = 0) -> OracleSearchTeam:
    """The search env's warm-start team (``EnvSpec.reference_team``): its queries slip
    with probability ``1 - skill``."""
    return OracleSearchTeam(slip=1.0 - skill, seed=seed)


class ScriptedCountdownTeam(_SkilledTeam):
    """Plays SRPO-Countdown-v0: a solver (or proposer) writes the task's reference
    equation with probability ``skill``, otherwise the same equation with its target
    missed (one number changed by one); the aggregator writes the first proposal that
    checks out, else the first proposal. It reads the reference from the env, so it is an
    oracle with noise, for warm starts, demos and tests."""

    def _solve(self, task) -> str:
        if self.rng.random() < self.skill:
            return task.solution
        digits = [i for i, ch in enumerate(task.solution) if ch.isdigit()]
        i = self.rng.choice(digits)
        return task.solution[:i] + str((int(task.solution[i]) + 1) % 10) + task.solution[i + 1:]

    @staticmethod
    def imitable(env, output) -> bool:
        """Only right equations are worth imitating; the aggregator's choice always."""
        from srpo_envs.countdown_tasks import check_equation

        task = env.current_task
        return (output.role == "aggregator"
                or check_equation(output.text, task.numbers, task.target)["correct"])

    def act(self, env, observations: dict[str, str]) -> dict[str, str]:
        from srpo_envs.countdown_tasks import check_equation

        task = env.current_task
        actions = {}
        for agent in env.due_agents:
            if env.roles[agent] == "solver":
                actions[agent] = self._solve(task)
            else:
                proposals = env.state.proposals
                right = [p for p in proposals
                         if check_equation(p, task.numbers, task.target)["correct"]]
                actions[agent] = (right or list(proposals) or [""])[0]
        return actions
