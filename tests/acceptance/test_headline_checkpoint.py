"""The committed headline checkpoint: the docs' tables are its evaluation files, and it still beats Lloyd's.

``checkpoints/evaluate_headline.sh`` writes ``checkpoints/headline/eval/*.json``; ``docs/training.md`` quotes
them. The first test ties every quoted ratio to those files, so the tables cannot drift from the runs; the second
evaluates the committed weights afresh on held-out tasks, so a checkpoint that no longer loads or no longer beats
Lloyd's fails.
"""

import json
import re
from pathlib import Path

import pytest
from command_server import run_command

ROOT = Path(__file__).resolve().parents[2]
HEADLINE = ROOT / "checkpoints" / "headline"

TASK_ROWS = {
    "in distribution (none), n=512": "in_distribution",
    "`--init k-means++`, n=512": "kmeanspp",
    "`--n 128`, n=128": "n128",
    "`--n 2048`, n=2048": "n2048",
    "`--family laplace`, n=512": "family_laplace",
    "`--family gumbel`, n=512": "family_gumbel",
    "`--family lognormal`, n=512": "family_lognormal",
    "`--family cauchy`, n=512": "family_cauchy",
}


def table_rows() -> dict[str, list[str]]:
    rows = {}
    for line in (ROOT / "docs" / "training.md").read_text().splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def number(cell: str) -> float:
    return float(re.search(r"[-\d.]+", cell.replace("*", "")).group())


def test_training_page_tables_are_the_committed_evaluations():
    rows = table_rows()
    for label, name in TASK_ROWS.items():
        final = json.loads((HEADLINE / "eval" / f"{name}.json").read_text())["tasks"]["final"]
        model, lloyd, ratios = rows[label][:3]
        mean, median = (number(part) for part in ratios.split("/"))
        assert mean == round(final["ratio_mean"], 3), label
        assert median == round(final["ratio_median"], 3), label
        assert number(model) == pytest.approx(final["model_objective"], rel=5e-4), label
        assert number(lloyd) == pytest.approx(final["lloyd_objective"], rel=5e-4), label
    datasets = json.loads((HEADLINE / "eval" / "datasets.json").read_text())["datasets"]
    assert len(datasets) == 5
    for entry in datasets:
        label = next(key for key in rows if key.startswith(f"{entry['name']}, n=") or
                     (entry["name"] == "blobs" and key.startswith("make_blobs")))
        ratio = number(rows[label][3])
        final = entry["per_step"][-1]
        assert ratio == round(final["ratio_mean"], 3), entry["name"]


def test_committed_checkpoint_still_beats_lloyds_on_fresh_held_out_tasks():
    res = run_command("evaluate", "--checkpoint", HEADLINE, "--tasks", "16", "--datasets", "none", "--json",
                      timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    final = doc["tasks"]["final"]
    assert doc["tasks"]["count"] == 16 and final["step"] == 20
    assert final["ratio_mean"] < 1 and final["model_ari"] > final["lloyd_ari"]
