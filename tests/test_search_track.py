"""benchmarks/learning/search_track.py (its table: srpo_bench/search_track.py) keeps every workflow's committed row when it measures one."""

import argparse
import json

from srpo_agents.running.search_recipe import RECIPE
from srpo_bench import search_track


def _row(avg: float, command: str) -> dict:
    return {"warm_start": {"steps": 10, "seconds": 5.0}, "tasks": 500, "k": 4,
            "well_formed": 0.99, "well_formed_by_role": {"searcher": 0.99},
            "query_gold_in_top_k": 0.8, "question_gold_in_top_k": 0.8, "avg_at_k": avg,
            "avg_at_k_stderr": 0.016, "pass_at_k": 0.6, "command": command, "machine": "m"}


def test_a_run_of_one_workflow_keeps_the_others_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(search_track, "RESULTS", tmp_path)
    (tmp_path / "search_track_run.json").write_text(json.dumps(
        {"search_answer_verify": _row(0.385, "build sav")}))
    results = {**search_track.stored_results(), "routed": _row(0.301, "build routed")}
    args = argparse.Namespace(**{k.removeprefix("warmstart_"): v
                                 for k, v in RECIPE.items()})
    lines = search_track.track_lines(args, results)
    rows = [line for line in lines if line.startswith("| search_answer_verify")
            or line.startswith("| routed")]
    assert len(rows) == 2 and "0.385 ± 0.016" in rows[0] and "0.301 ± 0.016" in rows[1]
    assert "- search_answer_verify: `build sav` on m" in lines
    assert "- routed: `build routed` on m" in lines
    assert any("routed's build begins from search_answer_verify's" in line for line in lines)


def test_well_formed_reads_each_role_s_action():
    from srpo_envs.envs.search_env import well_formed

    assert well_formed("router", "ROUTE: 2", k_max=2)
    assert not well_formed("router", "ROUTE: 3", k_max=2)
    assert not well_formed("router", "<search>Kuhi</search>", k_max=2)
    assert well_formed("searcher", "<search>Kuhi</search>")
    assert not well_formed("searcher", "<search>Kuhi")
    assert well_formed("answerer", "<answer>Kayo Co</answer>")
    assert not well_formed("answerer", "<search>Kuhi</search>")
    assert well_formed("verifier", "<verdict>accept</verdict>")
    assert not well_formed("verifier", "accept")
