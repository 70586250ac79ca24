"""Any registered srpo env's single-agent workflow in TRL's ``GRPOTrainer`` (extra ``trl``).

    from trl import GRPOConfig, GRPOTrainer
    from srpo_agents.rollout.trl_adapter import TRLEnv

    env = TRLEnv("SRPO-Countdown-v0", workflow="single")
    trainer = GRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=env.reward,
                          train_dataset=env.dataset(1000),
                          args=GRPOConfig(output_dir="runs/trl", num_generations=8))
    trainer.train()

``dataset(n)`` holds the env's first prompt of tasks 0..n-1 (column ``prompt``) and their
``task_index``. ``reward`` replays each completion in a fresh env on its task and returns
the env's reward, so the env stays the judge. A workflow of several turns (the search
env's ``single``: search, read, answer) needs ``rollout_func=env.rollout_func`` as well:
it plays whole episodes with the trainer's model (TRL's documented hook for multi-turn
rollouts, which runs without vLLM), joins each episode's turns into one completion
(the env's observations between turns are masked out of the loss with ``env_mask``) and
hands the env's reward to ``reward``.

TRL trains one policy on one agent's text; a workflow with several agents (a team)
belongs to the srpo learner, whose active sets are what TRL lacks.
"""

from __future__ import annotations

from typing import Any

import torch

from srpo_envs import registry


class TRLEnv:
    """A registered env's one-agent workflow as a TRL dataset, reward function and
    multi-turn rollout function."""

    def __init__(self, env: str, workflow: str = "single", split: str = "train",
                 max_turns: int = 8, **env_kwargs: Any):
        self.spec = registry.get(env)
        self.spec.check_workflow(workflow)
        self.kwargs = {"workflow": workflow, "split": split, **env_kwargs}
        probe = self._make()
        if len(probe.possible_agents) != 1:
            raise ValueError(f"workflow={workflow!r} of {env} has agents "
                             f"{probe.possible_agents}; TRL's GRPOTrainer trains one agent, "
                             f"so choose a one-agent workflow (train teams with srpo train)")
        self.agent = probe.possible_agents[0]
        self.max_turns = max_turns
        self._task_of_prompt: dict[str, int] = {}

    def _make(self):
        return self.spec.make(**self.kwargs)

    def _first_prompt(self, env, task_index: int) -> str:
        observations, _ = env.reset(options={"task_index": task_index})
        return observations[self.agent]

    def dataset(self, n_tasks: int, start: int = 0, chat: bool = False):
        """A ``datasets.Dataset`` of tasks ``start..start+n_tasks-1``: ``prompt`` (the
        agent's first prompt; with ``chat``, as one user message, so TRL applies the
        model's chat template) and ``task_index``."""
        from datasets import Dataset

        env = self._make()
        indices = list(range(start, start + n_tasks))
        prompts = [self._first_prompt(env, i) for i in indices]
        for prompt, index in zip(prompts, indices, strict=True):
            self._task_of_prompt.setdefault(prompt, index)
        column = [[{"role": "user", "content": p}] for p in prompts] if chat else prompts
        return Dataset.from_dict({"prompt": column, "task_index": indices})

    def reward(self, prompts: list[str], completions: list[Any], task_index: list[int],
               env_reward: list[float] | None = None, **_: Any) -> list[float]:
        """The env's reward of each completion (TRL's reward-function signature)."""
        if env_reward is not None:  # whole episodes were played by rollout_func
            return [float(r) for r in env_reward]
        env, rewards = self._make(), []
        for completion, index in zip(completions, task_index, strict=True):
            text = completion if isinstance(completion, str) else completion[-1]["content"]
            self._first_prompt(env, int(index))
            env.step({self.agent: text})
            if env.agents:
                raise ValueError(f"workflow={self.kwargs['workflow']!r} of {self.spec.name} "
                                 f"takes more than one turn: also pass "
                                 f"rollout_func=<TRLEnv>.rollout_func to GRPOTrainer")
            rewards.append(float(env.last_transition.reward))
        return rewards

    @torch.no_grad()
    def rollout_func(self, prompts: list[str], trainer) -> dict[str, list]:
        """Play one episode per prompt with ``trainer``'s model (TRL ``rollout_func``)."""
        tokenizer = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        limit = int(trainer.max_completion_length)
        temperature = float(getattr(trainer, "temperature", 1.0) or 1.0)
        envs = [self._make() for _ in prompts]
        texts = [p[-1]["content"] if isinstance(p, list) else p for p in prompts]
        for env, text in zip(envs, texts, strict=True):
            if text not in self._task_of_prompt:
                raise ValueError(f"prompt {text[:60]!r}... is not from this TRLEnv's "
                                 f"dataset(); build the train_dataset with it")
            self._first_prompt(env, self._task_of_prompt[text])
        encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        # a chat prompt goes through the model's chat template, as TRL's own generation does
        prompt_ids = [tokenizer.apply_chat_template(p, add_generation_prompt=True,
                                                    tokenize=True, return_dict=False)
                      if isinstance(p, list) else encode(p) for p in prompts]
        completion = [[] for _ in prompts]
        logprobs = [[] for _ in prompts]
        mask = [[] for _ in prompts]
        rewards = [0.0] * len(prompts)
        was_training = model.training
        model.eval()
        for _ in range(self.max_turns):
            live = [i for i, env in enumerate(envs) if env.agents and len(completion[i]) < limit]
            if not live:
                break
            contexts = [prompt_ids[i] + completion[i] for i in live]
            width = max(map(len, contexts))
            pad = tokenizer.pad_token_id
            input_ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts],
                                     device=model.device)
            attention = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts],
                                     device=model.device)
            out = model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True,
                                 temperature=temperature, top_k=0, top_p=1.0,
                                 max_new_tokens=max(1, limit - min(len(completion[i])
                                                                   for i in live)),
                                 pad_token_id=pad, eos_token_id=tokenizer.eos_token_id,
                                 output_scores=True, return_dict_in_generate=True)
            new = out.sequences[:, width:]
            scores = torch.stack(out.scores, 1).float().log_softmax(-1)
            chosen = scores.gather(-1, new.unsqueeze(-1)).squeeze(-1)
            for row, i in enumerate(live):
                room = limit - len(completion[i])
                ids = new[row].tolist()[:room]
                if tokenizer.eos_token_id in ids:
                    ids = ids[:ids.index(tokenizer.eos_token_id) + 1]
                completion[i] += ids
                logprobs[i] += chosen[row, :len(ids)].tolist()
                mask[i] += [1] * len(ids)
                text = tokenizer.decode(ids, skip_special_tokens=True)
                observations = envs[i].step({self.agent: text})[0]
                if not envs[i].agents:
                    rewards[i] = float(envs[i].last_transition.reward)
                    continue
                # the next observation joins the completion, masked out of the loss
                observation = encode("\n" + observations[self.agent])
                observation = observation[:max(0, limit - len(completion[i]))]
                completion[i] += observation
                logprobs[i] += [0.0] * len(observation)
                mask[i] += [0] * len(observation)
        if was_training:
            model.train()
        # An episode cut off by the length limit or max_turns ends unfinished: reward 0.
        return {"prompt_ids": prompt_ids, "completion_ids": completion, "logprobs": logprobs,
                "env_mask": mask, "env_reward": rewards}


class SearchTools:
    """SRPO-Search-v0's retriever and answer checking as a TRL environment: pass
    ``environment_factory=SearchTools.factory(...)`` to ``GRPOTrainer`` and TRL exposes
    ``search`` and ``answer`` as tools the model calls during generation; the episode's
    reward is ``get_reward``, the env's exact match of the answered text.

        tools = SearchTools.factory(split="train")
        trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", environment_factory=tools,
                              train_dataset=SearchTools.dataset(1000),
                              args=GRPOConfig(output_dir="runs/trl-search"))

    One search env is built per process (its corpus and index, shared by every
    instance); an instance holds one rollout's question, its number of searches and
    its answer. ``reset(task_index=...)`` takes the dataset's ``task_index`` column (TRL
    passes each row's columns). Passages are the env's own text, control tokens
    neutralized; after ``max_searches`` a search returns a note instead of passages."""

    _envs: dict[tuple, Any] = {}

    def __init__(self, split: str = "train", max_searches: int = 4, **env_kwargs: Any):
        key = (split, tuple(sorted(env_kwargs.items())))
        if key not in SearchTools._envs:
            SearchTools._envs[key] = registry.get("SRPO-Search-v0").make(
                workflow="single", split=split, **env_kwargs)
        self.env = SearchTools._envs[key]
        self.max_searches = max_searches
        self.task = None
        self.searches = 0
        self.reward = 0.0

    @classmethod
    def factory(cls, split: str = "train", max_searches: int = 4, **env_kwargs: Any):
        """A zero-argument callable making instances (TRL's ``environment_factory``)."""
        return lambda: cls(split, max_searches, **env_kwargs)

    @classmethod
    def dataset(cls, n_tasks: int, start: int = 0, split: str = "train", **env_kwargs: Any):
        """A ``datasets.Dataset`` of questions ``start..start+n_tasks-1``: ``prompt`` (one
        user message asking to search and then answer) and ``task_index``."""
        from datasets import Dataset

        tools = cls(split, **env_kwargs)
        indices = list(range(start, start + n_tasks))
        prompts = [[{"role": "user", "content": tools._question_prompt(i)}] for i in indices]
        return Dataset.from_dict({"prompt": prompts, "task_index": indices})

    def _question_prompt(self, index: int) -> str:  # private: TRL makes public methods tools
        question = self.env._clean(self.env.task(index).question, 2000)
        return (f"Answer the question. Call search to look things up, then call answer "
                f"with a short answer.\nQuestion: {question}")

    def reset(self, task_index: int, **_: Any) -> None:
        self.task = self.env.task(int(task_index))
        self.searches, self.reward = 0, 0.0

    def search(self, query: str) -> str:
        """Search the encyclopedia for passages about a query.

        Args:
            query: A few words naming what to look up.

        Returns:
            The best passages, each after its title.
        """
        self.searches += 1
        if self.searches > self.max_searches:
            return f"no more searches ({self.max_searches} used): call answer now"
        return self.env.search_text(query)

    def answer(self, answer: str) -> str:
        """Give the final answer to the question.

        Args:
            answer: The short answer, a name or a few words.

        Returns:
            Whether the answer was recorded.
        """
        from srpo_envs.qa_metrics import exact_match

        self.reward = float(bool(answer) and exact_match(answer, self.task.answers))
        return "answer recorded"

    def get_reward(self) -> float:
        return self.reward
