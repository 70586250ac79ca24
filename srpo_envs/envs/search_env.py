"""SRPO-Search-v0: multi-turn search QA by a team of LLM agents.

## Description
A team answers one question per episode with a retriever over a document corpus. The
tags are the ones Search-R1 and Dr. MAS users know: an agent writes
``<search>query</search>`` or ``<answer>text</answer>`` (the first complete tag in its
text counts) and the env shows results inside ``<information>...</information>``.

- ``"single"``: one agent, multi-turn. Each turn (one event, K = 1) it searches or
  answers. After ``max_turns`` turns without an answer the episode is truncated with
  reward 0.
- ``"parallel"`` (co-evolution): ``n_searchers`` searchers each write a query in one
  event (K = n_searchers); the env runs them as one batch. The aggregator (K = 1) reads
  every result and answers, or writes ``<search>note</search>`` to ask for another round
  (the note is shown to the searchers). ``max_turns`` rounds at most, then truncation.
- ``"search_answer_verify"`` (division of labor, as in Dr. MAS): each round the searcher
  writes one query, the answerer reads everything gathered and answers, and the
  verifier writes ``<verdict>accept</verdict>`` or ``<verdict>reject</verdict>`` with
  feedback for the next round. Without a verdict tag the answer is accepted. A
  rejection in the last of ``max_turns`` rounds leaves the answer standing.
- ``"routed"`` (mode switching): each round a router first chooses, in a singleton
  event, how many searchers query this round: ``ROUTE: K`` with K in 1..``n_searchers``
  (grammar, and ``default_route`` for a reply that cannot be read:
  ``srpo_envs.routing``). Searchers 0..K-1 then search in one event (K members) and the
  aggregator answers or asks for another round, as in ``parallel``. Route events' info
  has ``route_k``, ``route_parsed`` and ``route_failures``, and on generated
  questions ``level``: the question's hop count (so routing can be read by hops); the
  search event's has ``route_k``.

## Observation
Per agent a string: its prompt when due (role instructions, the question, the history
of queries and ``<information>`` blocks), otherwise a not-your-turn note. Retrieved text
is environment text: ``infos[agent]["prompt_segments"]`` splits each due prompt into
``("prompt", text)`` and ``("env", text)`` pieces (their concatenation is the prompt),
so a learner that trains on its own history can mask retrieved passages out of the loss.
Queries and passages are inserted as data: chat-template control tokens and this env's
own tags inside them are neutralized, so a passage can never close ``<information>``.
Passages are written one per line as ``Doc 1 (Title: X) text`` by default, or exactly as
Search-R1's client writes them with ``passage_format="search_r1"`` (``SearchEnvConfig``),
so a policy trained with Search-R1 reads the text it was trained on.

## Action
Per agent a string; rules for missing, ``None``, over-long, mistyped and unknown-agent
actions in ``srpo_envs.event_env``. A text with no ``<search>``/``<answer>`` tag, or an
empty query, is an invalid action: no search happens, the turn is used up, the history
says so and ``info["invalid_agents"]`` names the agent (the defined penalty). Queries are
clipped to ``max_query_chars``. A retriever failure (a remote server that is down or
too slow) is reported inside the ``<information>`` block and in
``info["retrieval_error"]``, with ``info["retrieval_errors"]`` counting the episode's
failures so far; the episode goes on.

## Rewards
``reward_correct`` when the final answer matches any gold alias exactly after SQuAD
normalization, else ``reward_wrong``; paid at the last event. Every transition's info
has ``tool_calls`` (queries run in this event), ``retrieved_chars`` and ``turn``; the
final one has ``correct``, ``em``, ``f1``, ``final_answer``, ``total_tool_calls`` and
``turns``. An optional team cost per token and per tool call (``cost_per_token``,
``cost_per_tool_call``, off by default; ``srpo_envs.routing``) is subtracted at the
last event and reported apart in its info.

## Episode end
Terminates on an accepted or final answer; truncated after ``max_turns`` turns (single)
or rounds (parallel) without one.

## Arguments
See ``SearchEnvConfig``. ``retriever`` may also be a ready ``Retriever`` object, so
many envs can share one index. ``world="compact"`` swaps the generated world for one a
byte-level tiny policy can read (short names, one-sentence facts); the default world
and the dataset paths are for real models.

## Version history
- v0: initial release.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srpo_envs.event_env import EventEnv, EventOutcome
from srpo_envs.qa_metrics import exact_match, f1_score
from srpo_envs.retrieval import (
    Corpus,
    Passage,
    RetrievalError,
    Retriever,
    corpus_from_records,
    load_corpus,
    make_retriever,
)
from srpo_envs.routing import Route, TokenCounter, check_cost, parse_default_route, parse_route
from srpo_envs.search_tasks import load_search_tasks
from srpo_envs.search_world import SearchTask, World, build_world
from srpo_envs.splits import check_split
from srpo_envs.text import (
    as_data,
    check_prompt_overrides,
    neutralize_tags,
    render,
    to_charset,
)

WORKFLOWS = ("single", "parallel", "search_answer_verify", "routed")
WORLDS = ("default", "compact")
PASSAGE_FORMATS = ("default", "search_r1")
TAGS = ("search", "answer", "information", "verdict")
_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_VERDICT = re.compile(r"<verdict>\s*(accept|reject)\s*</verdict>", re.IGNORECASE)
_TITLE_CHARS = 200
_SLOT = 96  # room for the fixed words around one inserted item

_TOOLS = ("write <search>query</search> to search the document collection (results "
          "appear between <information> and </information>)")
DEFAULT_PROMPTS: dict[str, str] = {
    "agent": (f"Answer the question. You may {_TOOLS}. When you know the answer, write "
              "<answer>short answer</answer>.\n\nQuestion: {question}\n{history}"),
    "searcher": ("You search for a team answering the question below. Write one query as "
                 "<search>query</search>.\n\nQuestion: {question}\n{history}"),
    "aggregator": ("You lead a team answering the question below. If the information "
                   "found is enough, write <answer>short answer</answer>; otherwise write "
                   "<search>what to look for next</search> for another round.\n\n"
                   "Question: {question}\n{history}"),
    "answerer": ("Answer the question from the information gathered. Write "
                 "<answer>short answer</answer>.\n\nQuestion: {question}\n{history}"),
    "verifier": ("Check the proposed answer against the information gathered. Write "
                 "<verdict>accept</verdict> if it is supported; otherwise write "
                 "<verdict>reject</verdict> and say what to search for.\n\nQuestion: "
                 "{question}\n{history}\nProposed answer: {answer}\n"),
    "router": ("You plan the next search round for a team answering the question below. "
               "Reply ROUTE: K with K from 1 to {k_max}: how many searchers query this "
               "round (more searchers cost more).\n\nQuestion: {question}\n{history}"),
}
REQUIRED_PLACEHOLDERS = {role: {"question", "history"} for role in DEFAULT_PROMPTS}
REQUIRED_PLACEHOLDERS["verifier"] = {"question", "history", "answer"}


@dataclass
class SearchEnvConfig:
    """Arguments of SRPO-Search-v0; checked on construction."""

    workflow: str = "single"
    """"single", "parallel" (co-evolution) or "search_answer_verify" (division of labor)."""
    n_searchers: int = 3
    """Searchers in the parallel workflow (K of its search event), and K_max of the routed
    workflow; 1..32."""
    dataset: str | Path | None = None
    """None for the generated world, a JSONL path (question, answers), or a ``datasets``
    name (needs the network and the ``datasets`` package)."""
    dataset_config: str | None = None
    dataset_split: str = "validation"
    corpus: str | Path | None = None
    """JSONL corpus (id, title, text) for ``dataset``; not needed with a URL retriever."""
    retriever: Any = "bm25"
    """"bm25" (bm25s), "rank_bm25", "dense", an http(s) URL of a retrieval server, or a
    ``Retriever`` object."""
    retriever_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Extra arguments for ``make_retriever`` (e.g. timeout, retries)."""
    cache_dir: str | Path | None = None
    """Index cache (default: $SRPO_CACHE_DIR or ~/.cache/srpo)."""
    top_k: int = 3
    """Passages returned per query; 1..20."""
    max_turns: int = 4
    """Turns (single) or rounds (parallel, search_answer_verify); 1..32."""
    split: str = "train"
    """Generated world's question split: "train", "validation" or "test" (disjoint
    people)."""
    world_seed: int = 0
    world: str = "default"
    """The generated world's form: "default" (for real models) or "compact" (short names
    and one-sentence facts, 3000 one-hop test questions; for a byte-level tiny policy, see
    ``srpo_envs.search_world``). Ignored with ``dataset``."""
    hops: tuple[int, ...] = (1, 2, 3)
    """Generated questions to keep, by number of hops."""
    max_output_chars: int = 2048
    max_question_chars: int = 1024
    max_query_chars: int = 512
    max_passage_chars: int = 600
    passage_format: str = "default"
    """How passages are written inside ``<information>``: "default" puts one per line as
    ``Doc 1 (Title: X) text``; "search_r1" writes Search-R1's text exactly (its client's
    ``_passages2string``, stripped as its generation loop does): ``Doc 1(Title: "X")
    text``, each passage followed by a newline and the title in quotes, as the first line
    of Search-R1's ``contents`` has it. Both neutralize and clip titles and texts."""
    reward_correct: float = 1.0
    reward_wrong: float = 0.0
    prompts: Mapping[str, str] = field(default_factory=dict)
    """Overrides of ``DEFAULT_PROMPTS`` by role."""
    default_route: str = "ROUTE: 1"
    """Routed workflow: the route taken when the router's reply cannot be read."""
    cost_per_token: float = 0.0
    """Team cost per generated token, subtracted at the last event (``srpo_envs.routing``)."""
    cost_per_tool_call: float = 0.0
    """Team cost per retriever query, subtracted at the last event."""
    token_counter: TokenCounter | None = None
    """Counts a text's tokens for the cost (default: about 4 characters per token)."""

    def __post_init__(self) -> None:
        if self.workflow not in WORKFLOWS:
            raise ValueError(f"workflow={self.workflow!r}: expected one of {WORKFLOWS}")
        if self.passage_format not in PASSAGE_FORMATS:
            raise ValueError(f"passage_format={self.passage_format!r}: expected one of "
                             f"{PASSAGE_FORMATS}")
        for name, low, high in (("n_searchers", 1, 32), ("top_k", 1, 20), ("max_turns", 1, 32),
                                ("max_output_chars", 16, 10**6), ("max_question_chars", 16, 10**6),
                                ("max_query_chars", 8, 10**5), ("max_passage_chars", 16, 10**5)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"{name}={value!r}: expected an int in {low}..{high}")
        if self.world not in WORLDS:
            raise ValueError(f"world={self.world!r}: expected one of {WORLDS}")
        check_split(self.split)
        self.hops = (self.hops,) if isinstance(self.hops, int) else tuple(self.hops)
        if not self.hops or not set(self.hops) <= {1, 2, 3}:
            raise ValueError(f"hops={self.hops!r}: expected a non-empty subset of (1, 2, 3)")
        if self.dataset is not None and self.corpus is None and not _is_url(self.retriever) \
                and isinstance(self.retriever, str):
            raise ValueError(f"dataset={str(self.dataset)!r} needs corpus= (a JSONL of "
                             f"id/title/text) or an http(s) retriever URL; got corpus=None "
                             f"and retriever={self.retriever!r}")
        check_cost(self.cost_per_token, self.cost_per_tool_call, self.token_counter)
        self.route = parse_default_route(self.default_route, self.n_searchers, False,
                                         "default_route")
        check_prompt_overrides(self.prompts, DEFAULT_PROMPTS, REQUIRED_PLACEHOLDERS)


def _is_url(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("http://", "https://"))


@functools.lru_cache(maxsize=4)
def generated_world(world_seed: int, world_form: str = "default") -> tuple[World, Corpus]:
    """The world of ``world_seed`` and its corpus, built once per process: a run creates
    hundreds of envs over the same world (about 30 ms each to rebuild)."""
    world = build_world(world_seed, compact=world_form == "compact")
    return world, corpus_from_records(world.documents)


def parse_action(text: str | None) -> tuple[str, str] | None:
    """("search" | "answer", content) from the first complete tag, or None."""
    match = _ACTION.search(text or "")
    return (match.group(1).lower(), match.group(2).strip()) if match else None


def well_formed(role: str, text: str | None, k_max: int = 32) -> bool:
    """Whether ``text`` is a well-formed action of ``role``: a verdict tag for the
    verifier, an answer tag for the answerer, a readable ``ROUTE: K`` with K in
    1..``k_max`` for the router, otherwise a complete search or answer tag (what the env
    acts on; anything else is an invalid action, for the verifier an implicit accept,
    for the router the default route)."""
    if role == "router":
        return parse_route(text, k_max, False, Route(1))[1]
    if role == "verifier":
        return bool(_VERDICT.search(text or ""))
    action = parse_action(text)
    return action is not None and (role != "answerer" or action[0] == "answer")


class SearchEnv(EventEnv):
    __doc__ = __doc__
    metadata = {"name": "srpo_search_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(self, seed: int | None = None, render_mode: str | None = None, **kwargs: Any):
        self.config = config = SearchEnvConfig(**kwargs)
        self.templates = {**DEFAULT_PROMPTS, **config.prompts}
        if config.workflow == "single":
            self.possible_agents = ["agent_0"]
        elif config.workflow in ("parallel", "routed"):
            self.possible_agents = [f"searcher_{i}" for i in range(config.n_searchers)]
            self.possible_agents.append("aggregator_0")
            if config.workflow == "routed":
                self.possible_agents.insert(0, "router_0")
        else:
            self.possible_agents = ["searcher_0", "answerer_0", "verifier_0"]
        self.roles = {a: a.rsplit("_", 1)[0] for a in self.possible_agents}
        self.cost_per_token = config.cost_per_token
        self.cost_per_tool_call = config.cost_per_tool_call
        self.token_counter = config.token_counter
        self._tasks, corpus = self._load_source()
        self.corpus: Corpus | None = corpus
        self._titles = dict(zip(corpus.ids, corpus.titles, strict=True)) if corpus else {}
        self.retriever = self._make_retriever(corpus)
        self.max_output_chars = config.max_output_chars
        self.max_prompt_chars = self._prompt_bound()
        super().__init__(seed=seed, render_mode=render_mode)

    # -- construction --------------------------------------------------------------------
    def _load_source(self) -> tuple[list[SearchTask], Corpus | None]:
        config = self.config
        if config.dataset is None:
            world, corpus = generated_world(config.world_seed, config.world)
            tasks = [t for t in world.tasks[config.split] if t.meta["hops"] in config.hops]
            return tasks, corpus
        tasks = load_search_tasks(config.dataset, config.dataset_config, config.dataset_split)
        return tasks, load_corpus(config.corpus) if config.corpus is not None else None

    def _make_retriever(self, corpus: Corpus | None) -> Retriever:
        spec = self.config.retriever
        if not isinstance(spec, str):
            if not callable(getattr(spec, "search", None)):
                raise TypeError(f"retriever={spec!r}: expected a backend name, a URL or an "
                                f"object with search(queries, k)")
            return spec
        return make_retriever(spec, None if _is_url(spec) else corpus,
                              cache_dir=self.config.cache_dir, **dict(self.config.retriever_kwargs))

    def _prompt_bound(self) -> int:
        c = self.config
        passage = _TITLE_CHARS + c.max_passage_chars + _SLOT
        query_block = c.max_query_chars + c.top_k * passage + _SLOT
        queries_per_round = c.n_searchers if c.workflow in ("parallel", "routed") else 1
        notes = 2 * (c.max_output_chars + _SLOT)  # a lead's note or a verifier's feedback
        round_block = queries_per_round * query_block + notes
        return (max(len(t) for t in self.templates.values()) + c.max_question_chars
                + c.max_turns * round_block + c.max_output_chars + _SLOT)

    # -- tasks -----------------------------------------------------------------------------
    @property
    def num_tasks(self) -> int:
        return len(self._tasks)

    def task(self, index: int) -> SearchTask:
        return self._tasks[index % len(self._tasks)]

    @property
    def current_task(self) -> SearchTask:
        return self._task

    def title_of(self, doc_id: str) -> str | None:
        """Title of a corpus document (oracle policies search supporting titles)."""
        return self._titles.get(doc_id)

    def _pick_task(self, options: Mapping[str, Any]) -> SearchTask:
        if "task" in options:
            if not isinstance(options["task"], SearchTask):
                raise TypeError(f"options['task'] is a {type(options['task']).__name__}; "
                                f"expected SearchTask")
            return options["task"]
        if "task_index" in options:
            index = options["task_index"]
            if not isinstance(index, int) or index < 0:
                raise ValueError(f"options['task_index']={index!r}: expected an int >= 0")
            return self.task(index)
        return self.task(self._rng.randrange(len(self._tasks)))

    # -- prompts -----------------------------------------------------------------------------
    def _begin(self, task: SearchTask) -> str:
        self._task = task
        self._question = as_data(task.question, self.config.max_question_chars)
        self._history: list[tuple[str, str]] = []  # (kind, text): kind "prompt" or "env"
        self._turn = 0
        self._tool_calls = 0
        self._retrieval_errors = 0
        self._answer = ""
        self._route: Route | None = None
        self._route_failures = 0
        self._first_prompts = self._prompts_for(self._first_due())
        return task.task_id

    def _first_due(self) -> list[str]:
        """Who opens a round: the router in the routed workflow, else the searchers."""
        if self.config.workflow == "routed":
            return ["router_0"]
        return [a for a in self.possible_agents if self.roles[a] in ("agent", "searcher")]

    def _segments(self, agent: str) -> list[tuple[str, str]]:
        template = self.templates[self.roles[agent]]
        head, _, tail = template.partition("{history}")
        values = {"question": self._question, "answer": as_data(self._answer, 400),
                  "k_max": str(self.config.n_searchers)}
        segments = [("prompt", render(head, values)), *self._history,
                    ("prompt", render(tail, values))]
        return [(kind, to_charset(text)) for kind, text in segments if text]

    def _prompts_for(self, agents: list[str]) -> dict[str, str]:
        return {a: "".join(text for _, text in self._segments(a)) for a in agents}

    def reset(self, seed: int | None = None, options: dict | None = None):
        observations, infos = super().reset(seed=seed, options=options)
        self._attach_segments(infos)
        return observations, infos

    def step(self, actions):
        result = super().step(actions)
        self._attach_segments(result[4])
        return result

    def _attach_segments(self, infos: dict[str, dict]) -> None:
        for agent in self.due_agents:
            infos[agent]["prompt_segments"] = self._segments(agent)

    # -- retrieval ---------------------------------------------------------------------------
    def _clean(self, text: str, limit: int) -> str:
        return neutralize_tags(as_data(text, limit), TAGS)

    def _format_passages(self, passages: list[Passage]) -> str:
        """The text inside ``<information>`` (``SearchEnvConfig.passage_format``). Both
        formats insert title and text through ``_clean``: retrieved text is data."""
        c = self.config
        cleaned = [(i, self._clean(p.title, _TITLE_CHARS),
                    self._clean(p.text, c.max_passage_chars))
                   for i, p in enumerate(passages, start=1)]
        if c.passage_format == "search_r1":
            # Search-R1 titles each passage with the first line of its corpus row's
            # contents ('"Title"\ntext', so the title is quoted), glues "(Title:" to the
            # number, ends every passage with a newline and strips the whole block
            # before wrapping it in <information>.
            return "".join(f'Doc {i}(Title: "{title}") {text}\n'
                           for i, title, text in cleaned).strip()
        return "\n".join(f"Doc {i} (Title: {title}) {text}" for i, title, text in cleaned)

    def search_text(self, query: str) -> str:
        """One query's passages as the env shows them to an agent (queries clipped,
        control tokens neutralized), or the retrieval error as text: the env's search
        tool outside an episode (TRL's ``environment_factory``,
        ``srpo_agents.rollout.trl_adapter.SearchTools``)."""
        query = self._clean(query, self.config.max_query_chars)
        try:
            passages = self.retriever.search([query], self.config.top_k)[0]
        except RetrievalError as err:
            return f"retrieval failed: {self._clean(str(err), 300)}"
        return self._format_passages(passages) or "no results"

    def _run_queries(self, queries: dict[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
        """Retrieve for every agent's query in one batch; (information text per agent, info)."""
        info: dict[str, Any] = {"tool_calls": len(queries), "retrieved_chars": 0}
        if not queries:
            return {}, info
        try:
            results = self.retriever.search(list(queries.values()), self.config.top_k)
        except RetrievalError as err:
            self._retrieval_errors += 1
            info.update(retrieval_error=str(err), retrieval_errors=self._retrieval_errors)
            return {a: f"retrieval failed: {self._clean(str(err), 300)}" for a in queries}, info
        out = {}
        for agent, passages in zip(queries, results, strict=True):
            out[agent] = self._format_passages(passages) or "no results"
            info["retrieved_chars"] += sum(len(p.text) for p in passages)
            info.setdefault("retrieved_ids", {})[agent] = [p.id for p in passages]
        self._tool_calls += len(queries)
        return out, info

    def _record_search(self, label: str, query: str | None, information: str | None) -> None:
        if query is None:
            self._history.append(("prompt", f"\n{label}: (no valid query; write "
                                             f"<search>query</search>)\n"))
            return
        shown = self._clean(query, self.config.max_query_chars)
        self._history.append(("prompt", f"\n{label}<search>{shown}</search>\n"))
        self._history.append(("env", f"<information>{information}</information>\n"))

    # -- events ------------------------------------------------------------------------------
    def _final(self, event_type: str, answer: str | None, info: dict) -> EventOutcome:
        answer = answer or ""
        golds = self._task.answers
        correct = bool(answer) and exact_match(answer, golds)
        info.update(correct=correct, em=correct, f1=f1_score(answer, golds) if answer else 0.0,
                    final_answer=answer, gold=list(golds), total_tool_calls=self._tool_calls,
                    turns=self._turn + 1)
        reward = self.config.reward_correct if correct else self.config.reward_wrong
        return EventOutcome(event_type, reward=reward, terminated=True, info=info)

    def _out_of_turns(self, event_type: str, info: dict) -> EventOutcome:
        info.update(correct=False, em=False, f1=0.0, final_answer=None,
                    total_tool_calls=self._tool_calls, turns=self._turn + 1)
        return EventOutcome(event_type, reward=self.config.reward_wrong, truncated=True,
                            info=info)

    def _consume(self, texts: Mapping[str, str | None]) -> EventOutcome:
        workflow = self.config.workflow
        if workflow == "single":
            return self._single_turn(texts["agent_0"])
        if workflow in ("parallel", "routed"):
            if "router_0" in texts:
                return self._route_step(texts["router_0"])
            if "aggregator_0" in texts:
                return self._aggregate(texts["aggregator_0"])
            outcome = self._parallel_search(texts)
            if self._route is not None:
                outcome.info["route_k"] = self._route.k
            return outcome
        if "searcher_0" in texts:
            return self._dol_search(texts["searcher_0"])
        if "answerer_0" in texts:
            return self._dol_answer(texts["answerer_0"])
        return self._dol_verify(texts["verifier_0"])

    def _valid_queries(self, texts: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
        queries, invalid = {}, []
        for agent, text in texts.items():
            action = parse_action(text)
            if action and action[0] == "search" and action[1]:
                queries[agent] = action[1][: self.config.max_query_chars]
            else:
                invalid.append(agent)
        return queries, invalid

    def _next_turn(self, event_type: str, info: dict, due: list[str]) -> EventOutcome:
        if self._turn + 1 >= self.config.max_turns:
            return self._out_of_turns(event_type, info)
        self._turn += 1
        return EventOutcome(event_type, info=info, next_prompts=self._prompts_for(due))

    def _search(self, texts: Mapping[str, str | None], labelled: bool = False) -> dict[str, Any]:
        """One search event: parse every text's query, retrieve them as one batch, and
        append each query and its results to the history; returns the event's info."""
        queries, invalid = self._valid_queries(texts)
        results, info = self._run_queries(queries)
        info.update(turn=self._turn, queries=dict(queries))
        if invalid:
            info["invalid_agents"] = invalid
        for agent in texts:
            self._record_search(f"{agent} " if labelled else "", queries.get(agent),
                                results.get(agent))
        return info

    def _single_turn(self, text: str | None) -> EventOutcome:
        action = parse_action(text)
        if action and action[0] == "answer":
            return self._final("answer", action[1], {"tool_calls": 0, "retrieved_chars": 0,
                                                     "turn": self._turn})
        return self._next_turn("search", self._search({"agent_0": text}), ["agent_0"])

    def _parallel_search(self, texts: Mapping[str, str | None]) -> EventOutcome:
        self._history.append(("prompt", f"\nRound {self._turn + 1}:"))
        info = self._search(texts, labelled=True)
        return EventOutcome("search", info=info,
                            next_prompts=self._prompts_for(["aggregator_0"]))

    def _route_step(self, text: str | None) -> EventOutcome:
        route, parsed = parse_route(text, self.config.n_searchers, False, self.config.route)
        self._route = route
        self._route_failures += not parsed
        info = {"tool_calls": 0, "retrieved_chars": 0, "turn": self._turn,
                "route_k": route.k, "route_parsed": parsed,
                "route_failures": self._route_failures}
        if "hops" in self._task.meta:  # generated questions: routing read by hop count
            info["level"] = self._task.meta["hops"]
        searchers = [f"searcher_{i}" for i in range(route.k)]
        return EventOutcome("route", info=info, next_prompts=self._prompts_for(searchers))

    def _aggregate(self, text: str | None) -> EventOutcome:
        action = parse_action(text)
        info: dict[str, Any] = {"tool_calls": 0, "retrieved_chars": 0, "turn": self._turn}
        if action and action[0] == "answer":
            return self._final("aggregate", action[1], info)
        if action is None:
            info["invalid_agents"] = ["aggregator_0"]
        note = self._clean(action[1], self.config.max_output_chars) if action else ""
        self._history.append(("prompt", f"\nThe lead asks for another round: {note}\n"))
        return self._next_turn("aggregate", info, self._first_due())

    def _dol_search(self, text: str | None) -> EventOutcome:
        return EventOutcome("search", info=self._search({"searcher_0": text}),
                            next_prompts=self._prompts_for(["answerer_0"]))

    def _dol_answer(self, text: str | None) -> EventOutcome:
        action = parse_action(text)
        info: dict[str, Any] = {"tool_calls": 0, "retrieved_chars": 0, "turn": self._turn}
        if action and action[0] == "answer":
            self._answer = action[1]
            info["answer"] = action[1]
            info["correct"] = bool(action[1]) and exact_match(action[1], self._task.answers)
        else:
            self._answer = ""
            info["invalid_agents"] = ["answerer_0"]
        return EventOutcome("answer", info=info, next_prompts=self._prompts_for(["verifier_0"]))

    def _dol_verify(self, text: str | None) -> EventOutcome:
        verdicts = _VERDICT.findall(text or "")
        accepted = not verdicts or verdicts[-1].lower() == "accept"
        info: dict[str, Any] = {"tool_calls": 0, "retrieved_chars": 0, "turn": self._turn,
                                "verdict": "accept" if accepted else "reject"}
        if accepted or self._turn + 1 >= self.config.max_turns:
            return self._final("verify", self._answer, info)
        feedback = self._clean(_VERDICT.sub("", text or ""), self.config.max_output_chars)
        self._history.append(("prompt", f"\nA verifier rejected the answer "
                                        f"{self._clean(self._answer, 400)!r}: {feedback}\n"))
        self._answer = ""
        return self._next_turn("verify", info, ["searcher_0"])


def parallel_env(**kwargs: Any) -> SearchEnv:
    """The PettingZoo parallel env; keyword arguments as in ``SearchEnvConfig`` plus
    ``seed`` and ``render_mode``."""
    return SearchEnv(**kwargs)
