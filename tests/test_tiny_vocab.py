"""The tiny policy's tokenizer with letter merges (``tiny_vocab``): shorter prompts, a
name the same tokens wherever it stands, the same ids after a reload, and a warm-start
key that tells the two tokenizers apart."""

import pytest

from srpo_agents.config import TrainConfig
from srpo_agents.models.policy import load_policy
from srpo_agents.rollout.envs import env_factory
from srpo_agents.tiny import build_tiny_policy
from srpo_agents.tiny.warmstart import warm_start

TEXTS = ["Search for: Works for which company? Kuhi", "<search>Kuhi</search>",
         "Doc 1 (Title: Kuhi) Kuhi works for Lomaru.", "Was born in which city? Futi"] * 40


def _tokens(policy, text: str) -> list[str]:
    return policy.tokenizer.convert_ids_to_tokens(
        policy.tokenizer.encode(text, add_special_tokens=False))


def test_merges_shorten_text_and_keep_a_name_one_piece_everywhere(tmp_path):
    chars = build_tiny_policy(TEXTS, tmp_path / "bytes", hidden_size=32, num_layers=1,
                              num_heads=2)
    merged = build_tiny_policy(TEXTS, tmp_path / "merges", hidden_size=32, num_layers=1,
                               num_heads=2, vocab_size=300)
    assert len(chars.tokenizer) == 260 and 260 < len(merged.tokenizer) <= 300
    question = "Works for which company? Kuhi"
    assert len(_tokens(merged, question)) < len(_tokens(chars, question)) / 2
    # after a space and after a tag's ">": the name's own tokens, never merged with them
    after_space = _tokens(merged, " Kuhi")
    after_tag = _tokens(merged, "<search>Kuhi</search>")
    assert after_space[0] == "Ġ" and after_space[1:] == ["Kuhi"]
    assert "Kuhi" in after_tag and ">" in after_tag
    # the saved folder loads back to the very same ids (Qwen2's pipeline keeps merges)
    again = load_policy(str(tmp_path / "merges"))
    for text in TEXTS[:4]:
        assert again.tokenizer.encode(text) == merged.tokenizer.encode(text)
        assert again.decode(again.tokenizer.encode(text, add_special_tokens=False)) == text


def test_a_vocabulary_at_or_below_the_bytes_is_refused(tmp_path):
    with pytest.raises(ValueError, match="vocab_size=260"):
        build_tiny_policy(TEXTS, tmp_path / "x", vocab_size=260)
    with pytest.raises(ValueError, match="tiny_vocab=100"):
        TrainConfig(model="tiny", model_options={"tiny_vocab": 100})


def test_the_warm_start_key_tells_the_tokenizers_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    config = TrainConfig(env="SRPO-Math-v0", workflow="single", difficulty=(0,))
    logs: list[str] = []

    def build(vocab: int):
        return warm_start(tmp_path, env_factory(config, "train"),
                          env_factory(config, "validation"), minutes=1, target=1.1, seed=0,
                          max_new_tokens=8, steps=1, episodes=10, check_every=1,
                          eval_tasks=2, env_name=config.env, vocab_size=vocab,
                          log=logs.append)

    policy, meta = build(0)
    assert len(policy.tokenizer) == 260 and "vocab_size" not in meta["settings"]["model"]
    policy, meta = build(400)
    assert "cached" not in meta and meta["settings"]["model"]["vocab_size"] == 400
    assert len(policy.tokenizer) > 260
    assert any("model.vocab_size" in line and "rebuilding" in line for line in logs), logs
    assert build(400)[1]["cached"] is True
