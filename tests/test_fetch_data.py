"""``srpo fetch-data``, offline: fixture rows shaped like each hub dataset become the files
the envs read (proven by loading them through the benchmark path), the real ``datasets``
library reads local copies laid out like the hub, and failures are one line each."""

import argparse
import json
import sys

import pytest

from srpo_agents.config import TrainConfig
from srpo_agents.running import fetch_data
from srpo_agents.running.benchmark_sets import (
    benchmark_configs,
    default_data_dir,
    fetched_data_dir,
    resolve,
)
from srpo_agents.running.evaluate import held_out
from srpo_agents.running.fetch_data import (
    FLASHRAG,
    SOURCES,
    FetchError,
    add_parser,
    default_fetch_dir,
    fetch,
    sample,
)
from srpo_envs import registry
from srpo_envs.scripted import OracleSearchTeam
from srpo_envs.search_tasks import load_search_tasks

try:
    import datasets
except ImportError:  # the `data` extra is not installed: the error paths still run
    datasets = None
needs_datasets = pytest.mark.skipif(datasets is None, reason="needs the `datasets` library "
                                                            "(pip install 'srpo[data]')")

CONTEXT = {"title": ["Ada Lovelace", "Charles Babbage", "Analytical Engine"],
           "sentences": [["Ada Lovelace was a mathematician.", " She wrote the first program."],
                         ["Charles Babbage designed the  Analytical Engine."],
                         ["The Analytical Engine was a mechanical computer."]]}


def flashrag_rows(name):
    return [{"id": "test_0", "question": f"who is in {name}? ", "metadata": {"type": "q"},
             "golden_answers": ["Ada Lovelace", "Ada Lovelace ", " Countess of Lovelace"]},
            {"id": "test_1", "question": "who else?", "golden_answers": [],
             "metadata": {"type": "q"}},
            {"id": "test_2", "question": "and who?", "golden_answers": ["Babbage"],
             "metadata": {"type": "q"}}]


# (dataset id, config, split) -> rows laid out as that dataset gives them
HUB = {
    ("openai/gsm8k", "main", "test"): [
        {"question": "Ann has 1,200 apples and buys 34 more. How many now?",
         "answer": "1200 + 34 = <<1200+34=1234>>1234\n#### 1,234"},
        {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}],
    ("HuggingFaceH4/MATH-500", None, "test"): [
        {"problem": "What is $\\frac{1}{2}+0$?", "solution": "It is $\\boxed{\\frac12}$.",
         "answer": "\\frac12", "subject": "Algebra", "level": 1,
         "unique_id": "test/algebra/1.json"}],
    ("HuggingFaceH4/aime_2024", None, "train"): [
        {"id": 60, "problem": "Find the number.", "solution": "It is $\\boxed{025}$.",
         "answer": "025", "year": "2024",
         "url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_II_Problems/Problem_3"}],
    ("math-ai/amc23", None, "test"): [
        {"id": 0, "question": "How many miles?", "answer": 27.0, "url": "https://aops/1"},
        {"id": 1, "question": "What is x+y?", "answer": -1.0, "url": "https://aops/2"}],
    ("hotpotqa/hotpot_qa", "distractor", "validation"): [
        {"id": "5a8b57f25542995d1e6f1371", "question": "Who wrote the first program?",
         "answer": "Ada Lovelace", "type": "bridge", "level": "hard", "context": CONTEXT,
         "supporting_facts": {"title": ["Ada Lovelace"], "sent_id": [1]}},
        {"id": "5a8c7595554299585d9e36b6", "question": "Who designed the Analytical Engine?",
         "answer": "Charles Babbage", "type": "bridge", "level": "medium", "context": CONTEXT,
         "supporting_facts": {"title": ["Charles Babbage", "Analytical Engine"],
                              "sent_id": [0, 0]}}],
    **{(FLASHRAG, config, split): flashrag_rows(config) for config, split in (
        ("nq", "test"), ("triviaqa", "test"), ("popqa", "test"), ("2wikimultihopqa", "dev"),
        ("musique", "dev"), ("bamboogle", "test"))},
}
ALL_FILES = 12  # 11 question files + HotpotQA's corpus


def fixture_loader(path, name=None, split=None):
    """The hub, as ``datasets.load_dataset(path, name, split=split)`` would answer."""
    return datasets.Dataset.from_list(HUB[path, name, split])


def read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def data_env(tmp_path, monkeypatch):
    """No $SRPO_DATA_DIR, srpo's cache in tmp_path, and a working folder with no
    ../shared/data beside it."""
    monkeypatch.delenv("SRPO_DATA_DIR", raising=False)
    monkeypatch.setenv("SRPO_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


def test_every_registered_benchmark_has_a_source():
    registered = {name for spec in registry.specs() for name in spec.benchmarks}
    assert registered == set(SOURCES)
    for name, source in SOURCES.items():
        assert source.name == name and source.dataset and source.split and source.license
        assert (HUB.get((source.dataset, source.config, source.split)) is not None), name


@needs_datasets
def test_fixture_rows_become_the_files_the_envs_read(tmp_path):
    fetched = fetch("all", tmp_path, loader=fixture_loader, log=lambda line: None)
    assert [f.name for f in fetched] == list(SOURCES)
    assert sum(len(f.files) for f in fetched) == ALL_FILES
    for item in fetched:
        env, questions, corpus = fetch_data.benchmark_files(item.name)
        assert item.env == env and item.files[0][0] == tmp_path / questions
        rows = read(tmp_path / questions)
        assert len(rows) == item.files[0][1] and rows
        assert len({r["id"] for r in rows}) == len(rows)
        for row in rows:
            assert isinstance(row["id"], str) and row["question"].strip() and row["source"]
            if env == "SRPO-Math-v0":
                assert isinstance(row["answer"], str) and row["answer"]
            else:
                assert row["answers"] and all(isinstance(a, str) and a for a in row["answers"])
    gsm8k = read(tmp_path / "math" / "gsm8k_test.jsonl")
    assert [r["answer"] for r in gsm8k] == ["1234", "5"]  # after ####, commas dropped
    assert gsm8k[0]["solution"].endswith("#### 1,234") and gsm8k[0]["id"] == "gsm8k_test_0"
    [math500] = read(tmp_path / "math" / "math500.jsonl")
    assert math500 == {"id": "test/algebra/1.json", "question": "What is $\\frac{1}{2}+0$?",
                       "answer": "\\frac12", "solution": "It is $\\boxed{\\frac12}$.",
                       "subject": "Algebra", "level": 1, "source": "math500"}
    [aime] = read(tmp_path / "math" / "aime24.jsonl")
    assert (aime["id"], aime["answer"]) == ("aime24_II_03", "25")
    assert [r["answer"] for r in read(tmp_path / "math" / "amc23.jsonl")] == ["27", "-1"]
    # FlashRAG: answers stripped and de-duplicated; a question with none is left out
    nq = read(tmp_path / "search" / "nq_open_test.jsonl")
    assert [r["answers"] for r in nq] == [["Ada Lovelace", "Countess of Lovelace"], ["Babbage"]]
    assert nq[0]["question"] == "who is in nq?" and nq[0]["id"] == "nq_test_0"
    assert next(f for f in fetched if f.name == "nq").dropped == 1
    # HotpotQA: its paragraphs once each in the corpus, the questions pointing into it
    corpus = read(tmp_path / "search" / "hotpotqa_dev_corpus.jsonl")
    assert [c["id"] for c in corpus] == [f"hotpotqa_dev_00000{i}" for i in range(3)]
    assert corpus[0] == {"id": "hotpotqa_dev_000000", "title": "Ada Lovelace",
                         "text": "Ada Lovelace was a mathematician. She wrote the first program."}
    assert corpus[1]["text"] == "Charles Babbage designed the Analytical Engine."
    first, second = read(tmp_path / "search" / "hotpotqa_dev_500.jsonl")
    assert first["answers"] == ["Ada Lovelace"] and first["type"] == "bridge"
    assert first["context_ids"] == [c["id"] for c in corpus]
    assert first["supporting_ids"] == ["hotpotqa_dev_000000"]
    assert second["supporting_ids"] == ["hotpotqa_dev_000001", "hotpotqa_dev_000002"]


@needs_datasets
def test_fetched_files_load_through_the_benchmark_path(data_env):
    fetch("gsm8k,aime24,hotpotqa,nq", default_fetch_dir(), loader=fixture_loader,
          log=lambda line: None)
    assert default_fetch_dir() == fetched_data_dir() == data_env / "cache" / "data"
    # no --data-dir and no $SRPO_DATA_DIR: srpo eval finds them in the cache
    math = TrainConfig(env="SRPO-Math-v0", workflow="single", model="x")
    for name, config in benchmark_configs(math, "gsm8k,aime24"):
        envs, indices = held_out(config)
        tasks = [envs[0].task(i) for i in indices]
        expected = read(fetched_data_dir() / registry.get("SRPO-Math-v0").benchmarks[name][0])
        assert [(t.task_id, t.question, t.answer) for t in tasks] == [
            (r["id"], r["question"], r["answer"]) for r in expected]
    # HotpotQA with its own corpus: an oracle that searches the supporting titles finds
    # every supporting paragraph and answers right
    search = TrainConfig(env="SRPO-Search-v0", workflow="single", model="x", max_turns=3)
    [(_, config)] = benchmark_configs(search, "hotpotqa")
    assert config.corpus == str(fetched_data_dir() / "search" / "hotpotqa_dev_corpus.jsonl")
    envs, indices = held_out(config)
    env = envs[0]
    for index in indices:
        observations, _ = env.reset(options={"task_index": index})
        while env.agents:
            observations, *_ = env.step(OracleSearchTeam().act(env, observations))
        last = env.transitions[-1]
        assert last.reward == 1.0
        retrieved = {i for t in env.transitions
                     for ids in t.info.get("retrieved_ids", {}).values() for i in ids}
        assert set(env.current_task.supporting_ids) <= retrieved
    # an open-domain set: the search env's own loader reads it
    [(_, nq_path, corpus)] = resolve("SRPO-Search-v0", "nq")
    assert corpus is None
    assert [t.answers for t in load_search_tasks(nq_path)] == [
        ("Ada Lovelace", "Countess of Lovelace"), ("Babbage",)]


def hub_copy(root, configs, write):
    """A folder laid out like a hub dataset repository: a README whose YAML names each
    config's data files per split, and the files (``write(path, rows)``)."""
    lines = ["---", "configs:"]
    for config, split, path, rows in configs:
        lines += [f"- config_name: {config}", "  data_files:",
                  f"  - split: {split}", f"    path: {path}"]
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        write(root / path, rows)
    (root / "README.md").write_text("\n".join(lines + ["---", ""]))
    return root


@needs_datasets
def test_the_real_datasets_library_on_local_copies_of_the_hub(tmp_path):
    def jsonl(path, rows):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def parquet(path, rows):
        datasets.Dataset.from_list(rows).to_parquet(str(path))

    # HotpotQA's context as a list of {title, sentences}, the other shape datasets may give
    hotpot_rows = [{**row, "context": [{"title": t, "sentences": s} for t, s in
                                       zip(CONTEXT["title"], CONTEXT["sentences"], strict=True)]}
                   for row in HUB["hotpotqa/hotpot_qa", "distractor", "validation"]]
    local = {
        FLASHRAG: hub_copy(tmp_path / "flashrag", [
            (c, s, f"{c}/{s}.jsonl", HUB[FLASHRAG, c, s])
            for c, s in (("nq", "test"), ("musique", "dev"), ("bamboogle", "test"))], jsonl),
        "openai/gsm8k": hub_copy(tmp_path / "gsm8k", [
            ("main", "test", "main/test-00000-of-00001.parquet",
             HUB["openai/gsm8k", "main", "test"])], parquet),
        "hotpotqa/hotpot_qa": hub_copy(tmp_path / "hotpot", [
            ("distractor", "validation", "distractor/validation-00000-of-00001.parquet",
             hotpot_rows)], parquet),
    }
    calls = []

    def local_loader(path, name=None, split=None):
        calls.append((path, name, split))
        return datasets.load_dataset(str(local[path]), name, split=split,
                                     cache_dir=str(tmp_path / "hf-cache"))

    out = tmp_path / "data"
    fetched = fetch("nq,musique,bamboogle,gsm8k,hotpotqa", out, loader=local_loader,
                    log=lambda line: None)
    assert calls == [(s.dataset, s.config, s.split) for s in
                     (SOURCES[n] for n in ("nq", "musique", "bamboogle", "gsm8k", "hotpotqa"))]
    assert [f.files[0][1] for f in fetched] == [2, 2, 2, 2, 2]
    assert read(out / "math" / "gsm8k_test.jsonl")[0]["answer"] == "1234"
    assert read(out / "search" / "musique_dev_512.jsonl")[1]["answers"] == ["Babbage"]
    hotpot = read(out / "search" / "hotpotqa_dev_500.jsonl")
    assert [q["supporting_ids"] for q in hotpot] == [
        ["hotpotqa_dev_000000"], ["hotpotqa_dev_000001", "hotpotqa_dev_000002"]]
    assert len(read(out / "search" / "hotpotqa_dev_corpus.jsonl")) == 3


def test_a_counted_file_keeps_a_fixed_sample_in_source_order():
    records = [{"id": str(i)} for i in range(20)]
    kept = sample(records, 5)
    assert kept == sample(records, 5) and len(kept) == 5
    assert [int(r["id"]) for r in kept] == sorted(int(r["id"]) for r in kept)
    assert sample(records, 50) == records and sample(records, None) == records
    assert SOURCES["popqa"].keep == 512 and SOURCES["hotpotqa"].keep == 500
    assert SOURCES["nq"].keep is None  # nq_open_test.jsonl: the whole test split


def test_unknown_names_and_bad_limits_say_what_is_valid(tmp_path):
    with pytest.raises(ValueError, match="benchmarks: 'gsm9k' is not known; expected names from gsm8k, math500, "):
        fetch("gsm8k,gsm9k", tmp_path, loader=fixture_loader)
    with pytest.raises(ValueError, match="'all'"):
        fetch(" , ", tmp_path, loader=fixture_loader)
    with pytest.raises(ValueError, match="limit=0"):
        fetch("gsm8k", tmp_path, loader=fixture_loader, limit=0)
    assert not any(tmp_path.iterdir())


def test_without_datasets_one_line_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets now fails
    with pytest.raises(ImportError, match=r"^srpo fetch-data needs the `datasets` library: "
                                          r"pip install 'srpo\[data\]'$"):
        fetch("gsm8k", tmp_path)


@needs_datasets
def test_a_failing_load_is_one_line_and_the_others_are_written(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)

    def flaky(path, name=None, split=None):
        if path == "HuggingFaceH4/MATH-500":
            raise ConnectionError("Couldn't reach 'HuggingFaceH4/MATH-500' on the Hub\n"
                                  "(LocalEntryNotFoundError)\nmore detail")
        return fixture_loader(path, name, split)

    logged = []
    with pytest.raises(FetchError) as caught:
        fetch("gsm8k,math500,aime24", tmp_path, loader=flaky, log=logged.append)
    [line] = caught.value.lines
    assert str(caught.value) == line and "\n" not in line
    assert line.startswith("math500: could not load HuggingFaceH4/MATH-500, split 'test' "
                           "(ConnectionError: Couldn't reach")
    assert "HF_HUB_OFFLINE=1" in line and "Traceback" not in line
    assert [f.name for f in caught.value.fetched] == ["gsm8k", "aime24"]
    assert (tmp_path / "math" / "gsm8k_test.jsonl").is_file()
    assert (tmp_path / "math" / "aime24.jsonl").is_file()
    assert not (tmp_path / "math" / "math500.jsonl").exists()
    assert sorted(p.name for p in (tmp_path / "math").iterdir()) == [
        "aime24.jsonl", "gsm8k_test.jsonl"]  # no temporary files left behind
    # a folder that cannot be written: one line too
    (tmp_path / "a-file").write_text("")
    with pytest.raises(FetchError, match=r"^amc23: could not write .*a-file/math/amc23.jsonl"):
        fetch("amc23", tmp_path / "a-file", loader=fixture_loader, log=logged.append)
    # offline on purpose: the hint says so
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FetchError, match="HF_HUB_OFFLINE is set, so only the local"):
        fetch("math500", tmp_path, loader=flaky, log=logged.append)


@needs_datasets
def test_a_dataset_that_changed_shape_fails_in_one_line_and_keeps_the_old_file(tmp_path):
    fetch("gsm8k", tmp_path, loader=fixture_loader, log=lambda line: None)
    before = (tmp_path / "math" / "gsm8k_test.jsonl").read_text()

    def renamed(path, name=None, split=None):
        return datasets.Dataset.from_list([{"query": "q", "answer": "a\n#### 1"}])

    with pytest.raises(FetchError, match=r"^gsm8k: row 0 of openai/gsm8k is not shaped as "
                                         r"expected \(KeyError: 'question'\)"):
        fetch("gsm8k", tmp_path, loader=renamed, overwrite=True, log=lambda line: None)
    assert (tmp_path / "math" / "gsm8k_test.jsonl").read_text() == before
    assert [p.name for p in (tmp_path / "math").iterdir()] == ["gsm8k_test.jsonl"]


@needs_datasets
def test_files_already_there_are_kept_unless_overwrite(tmp_path):
    (tmp_path / "math").mkdir()
    mine = tmp_path / "math" / "gsm8k_test.jsonl"
    mine.write_text('{"id": "a", "question": "1+1?", "answer": "2"}\n')

    def no_network(*args, **kwargs):
        raise AssertionError("nothing should be loaded")

    logged = []
    [kept] = fetch("gsm8k", tmp_path, loader=no_network, log=logged.append)
    assert not kept.written and kept.files == [(mine, 1)]
    assert logged == [f"gsm8k: kept {mine} (1 rows; already there, --overwrite fetches it "
                      f"again)"]
    [written] = fetch("gsm8k", tmp_path, loader=fixture_loader, overwrite=True,
                      log=lambda line: None)
    assert written.written and len(read(mine)) == 2
    # a corpus without its questions file is fetched again, both files together
    fetch("hotpotqa", tmp_path, loader=fixture_loader, log=lambda line: None)
    (tmp_path / "search" / "hotpotqa_dev_500.jsonl").unlink()
    [again] = fetch("hotpotqa", tmp_path, loader=fixture_loader, log=lambda line: None)
    assert again.written and len(again.files) == 2


def run_command(argv):
    parser = argparse.ArgumentParser(prog="srpo")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.run(args)


@needs_datasets
def test_cmd_fetch_data_prints_files_and_the_eval_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fetch_data, "default_loader", lambda: fixture_loader)
    out = tmp_path / "data"
    assert run_command(["fetch-data", "--benchmarks", "gsm8k,hotpotqa,nq",
                        "--data-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"gsm8k: wrote {out / 'math' / 'gsm8k_test.jsonl'} (2 rows)" in printed
    assert f"hotpotqa: wrote {out / 'search' / 'hotpotqa_dev_corpus.jsonl'} (3 rows)" in printed
    assert (f"srpo eval --checkpoint RUN_DIR --env SRPO-Math-v0 --benchmarks gsm8k "
            f"--data-dir {out}") in printed
    # nq has no corpus of its own: the line brings a retriever
    assert (f"srpo eval --checkpoint RUN_DIR --env SRPO-Search-v0 --benchmarks hotpotqa,nq "
            f"--data-dir {out} --retriever http://127.0.0.1:8000/retrieve") in printed


@needs_datasets
def test_cmd_fetch_data_defaults_limit_and_failure(data_env, monkeypatch, capsys):
    monkeypatch.setattr(fetch_data, "default_loader", lambda: fixture_loader)
    assert run_command(["fetch-data", "--benchmarks", "gsm8k", "--limit", "1"]) == 0
    written = data_env / "cache" / "data" / "math" / "gsm8k_test.jsonl"
    assert len(read(written)) == 1
    printed = capsys.readouterr().out
    assert f"--data-dir {data_env / 'cache' / 'data'}" in printed and "--limit 1" in printed
    # $SRPO_DATA_DIR is where it writes when set
    monkeypatch.setenv("SRPO_DATA_DIR", str(data_env / "mine"))
    assert run_command(["fetch-data", "--benchmarks", "amc23"]) == 0
    assert (data_env / "mine" / "math" / "amc23.jsonl").is_file()
    assert default_data_dir() == data_env / "mine"

    def offline(path, name=None, split=None):
        raise OSError("no network")

    monkeypatch.setattr(fetch_data, "default_loader", lambda: offline)
    assert run_command(["fetch-data", "--benchmarks", "amc23,math500", "--overwrite"]) == 1
    captured = capsys.readouterr()
    errors = captured.err.strip().splitlines()
    assert len(errors) == 2 and all(e.startswith("srpo fetch-data: error: ") for e in errors)
    assert "math500: could not load HuggingFaceH4/MATH-500" in captured.err


@needs_datasets
def test_eval_reads_the_data_dir_then_srpo_data_dir_then_fetched_then_shared(data_env,
                                                                             monkeypatch):
    fetch("amc23", fetched_data_dir(), loader=fixture_loader, log=lambda line: None)
    shared = data_env / "shared" / "data"
    fetch("amc23,aime24", shared, loader=fixture_loader, log=lambda line: None)
    (shared / "math" / "amc23.jsonl").write_text('{"question": "shared?", "answer": "1"}\n')
    # the fetched copy wins over the shared one; a file only in the shared data is found
    found = {n: q for n, q, _ in resolve("SRPO-Math-v0", "amc23,aime24")}
    assert found["amc23"] == fetched_data_dir() / "math" / "amc23.jsonl"
    assert found["aime24"].resolve() == (shared / "math" / "aime24.jsonl").resolve()
    with pytest.raises(FileNotFoundError) as caught:
        resolve("SRPO-Math-v0", "math500")
    message = str(caught.value)
    assert str(fetched_data_dir()) in message and "shared/data" in message
    assert "run `srpo fetch-data --benchmarks math500`" in message
    # $SRPO_DATA_DIR alone, and --data-dir alone, when given
    monkeypatch.setenv("SRPO_DATA_DIR", str(shared))
    assert resolve("SRPO-Math-v0", "amc23")[0][1] == shared / "math" / "amc23.jsonl"
    with pytest.raises(FileNotFoundError, match="not found under /nowhere; run"):
        resolve("SRPO-Math-v0", "amc23", "/nowhere")
