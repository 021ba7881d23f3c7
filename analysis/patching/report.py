"""Patching results as a document: JSON for programs, a standalone HTML page, and a section of the circuit report.

* :func:`result_document` — everything a sweep measured, JSON-ready (what ``kmeans-circuits patch`` writes to
  ``patching.json``).
* :func:`patching_section` / :func:`add_patching_section` — the heatmaps, each under what the construction
  predicts for it, as a :class:`analysis.report.Section`, added to a report built by
  :func:`analysis.report.build_report`.
* :func:`patching_page` — the same section as a standalone page of the document engine
  (:mod:`analysis.report.document`: plotly.js embedded, no external URL).
"""

from __future__ import annotations

import html

import numpy as np

from analysis.patching.experiment import Patch, PatchingExperiment
from analysis.patching.unpatched import PLACEHOLDER_TOLERANCE, UnpatchedCheck
from analysis.patching.metrics import E_TOL
from analysis.patching.sweeps import RESTORED, SweepResult, heatmap_pair
from analysis.report.document import Badge, Fact, Header, Html, Report, Section, badges_html

#: What the construction predicts for each sweep, in words; shown above its heatmap.
READING = {
    "layer_position": (
        "Each cell is one run of the corrupted problem with the whole residual vector of the column's tokens "
        "replaced, as it enters the row's block, by the clean run's. The state of the algorithm lives in two "
        "places in turn: before an assign block (A) it is the centroids, held in `C` and `N` of the centroid "
        "tokens, so the `centroids` column restores everything there; before an update block (U) it is the "
        "assignment, held in `Y` of the point tokens (plus `X` if a point was moved), so the `points` column "
        "restores everything there. Single tokens restore partially: one centroid, or one point's vote."
    ),
    "layer_subspace": (
        "Each cell patches one named subspace of the residual stream on every token (the last column `C+N` both "
        "together). Before an assign block the state it reads is the points' `X` and the centroids' `C` and `N` "
        "(the score `2 beta x.c - beta |c|^2` reads both `C` and `N`), and the MLP of an assign "
        "block overwrites `Y`; before an update block the head reads `Y` (keys) and `X + C` (values) and its MLP "
        "overwrites `C` and `N`. Staging slots are empty between blocks, so patching them does nothing, and "
        "`ID`, `ONE` and the flags are the same in both runs."
    ),
    "components": (
        "Each cell patches what one block's head (`attn_out`) or MLP (`mlp_out`) wrote at the column's tokens. "
        "Heads write only into staging slots, which are empty in both runs when the head writes, so a head's "
        "output is the whole new state: patching it restores what its MLP then commits (assign heads write "
        "`Y_stage` of the points, update heads `C_stage` of the centroids). An MLP's output is a *change*, "
        "`new - old` for the committed slot and `-staged` for the staging slot; patched alone it adds the clean "
        "change to the corrupted values and leaves `corrupted staged - clean staged` behind in the staging slot, "
        "so MLP rows restore little and can push the run further from clean (negative cells)."
    ),
}


def _fraction_note() -> str:
    return (
        "Fraction restored = mean of `1 - L(patched)/L(corrupted)` over labels and `1 - E(patched)/E(corrupted)` "
        "over centroids, where `L` counts labels differing from the clean run and `E` is the unit-scaled "
        f"Frobenius distance of the centroids from the clean ones (distances below {E_TOL:g} x sqrt(k) are "
        "rounding and count as 0). 1 = the clean readout is back exactly, 0 = no effect, < 0 = further from "
        "clean. When the corruption does not change a readout the fraction is 0/0 and the cell is blank."
    )


def result_document(exp: PatchingExperiment, sweeps: list[SweepResult], check: UnpatchedCheck | None,
                    read_layer: int | None = None, problem: dict | None = None) -> dict:
    """Every sweep with every metric, the clean/corrupted summary, and the check of the unpatched runs."""
    return {
        "problem": problem or {},
        "corruption": exp.pair.to_dict(),
        "summary": exp.summary(read_layer),
        "schedule": [exp.layer_label(L) for L in range(exp.n_layers)],
        "token_labels": exp.token_labels,
        "unpatched": check.to_dict() if check is not None else None,
        "fraction_restored": _fraction_note(),
        "sweeps": [s.to_dict() for s in sweeps],
    }


def _code(text: str) -> str:
    """Plain text with `backticks` as HTML with <code>."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _intro(exp: PatchingExperiment, check: UnpatchedCheck | None, read_layer: int | None) -> str:
    s = exp.summary(read_layer)
    lines = [
        f"<p><b>Corruption:</b> {html.escape(exp.pair.description)}.</p>",
        f"<p><b>Read after</b> {html.escape(s['read_label'])}: {s['labels_differing']} label(s) differ between the "
        f"clean and corrupted runs, {s['labels_differing_up_to_renaming']} once the cluster ids are matched (the "
        "label metrics compare ids as they are: each centroid token keeps its identity, so a run that ends with "
        "two clusters' tokens exchanged flips every label of both); "
        f"|C<sub>clean</sub> - C<sub>corrupted</sub>| = {s['centroid_error']:.4g}; "
        f"objective on the clean points {s['clean']['objective']:.6g} (clean) vs {s['corrupted']['objective']:.6g}"
        " (corrupted).</p>",
    ]
    if not s["corruption_visible"]:
        lines.append("<p><b>The corruption does not change this readout</b>: every fraction restored is 0/0 and "
                     "the heatmaps are blank. Read an earlier layer (<code>--read</code>).</p>")
    if exp.pair.placeholder is not None:
        lines.append(f"<p>The clean run holds a placeholder in point slot {exp.pair.placeholder} (column "
                     f"<code>{html.escape(exp.token_labels[exp.sequence.point(exp.pair.placeholder)])}</code>): a "
                     "copy of the BOS sink, which no head reads, so both runs have the same token positions.</p>")
    if check is not None and check.placeholder_deviation is not None:
        inert = check.placeholder_deviation <= PLACEHOLDER_TOLERANCE
        lines.append(f"<p>The placeholder changes the clean run by at most {check.placeholder_deviation:.3g}"
                     f" (unit-scaled; {'within' if inert else 'ABOVE'} the tolerance {PLACEHOLDER_TOLERANCE:g} for"
                     " a zero-weighted key's rounding).</p>")
    lines.append(f"<p>{_code(_fraction_note())}</p>")
    return "\n".join(lines)


def run_badges(check: UnpatchedCheck) -> list[Badge]:
    """The verdict of each unpatched run, clean and corrupted, verified layer by layer against its reference: the
    verdict's own words, its cause included (:mod:`analysis.verify.verdict`)."""
    return [Badge(key, f"{key} run", rep.verdict, bool(rep.verified), bool(rep.verdict_record.exact),
                  rep.verdict_record.kind) for key, rep in (("clean", check.clean), ("corrupted", check.corrupted))]


def local_readout(exp: PatchingExperiment, sweep: SweepResult, metric: str = "restored") -> np.ndarray:
    """``metric`` of every cell of ``sweep`` read right after the block its row patches (not at the read layer).

    A patch at the input of block L is read after block L; later blocks can re-converge to the clean readout
    (Lloyd's iterations forget much of where they started), so the final readout alone overstates what a patch
    fixes at the block it enters. Rows patching ``resid_post`` of the read layer are read there.
    """
    out = np.full(sweep.shape, np.nan)
    for r, row in enumerate(sweep.rows):
        patches = [Patch.of(exp.site(row["component"], row["layer"], col["positions"],
                                     col.get("subspaces") or sweep.extra.get("subspaces")))
                   for col in sweep.cols]
        out[r] = exp.measure(patches, row["layer"]).scalar(metric)
    return out


def _cells_text(sweep: SweepResult, values: np.ndarray, col: str) -> str:
    c = sweep.col_labels.index(col)
    rows = [sweep.row_labels[r] for r in range(values.shape[0]) if values[r, c] >= RESTORED]
    blank = int(np.isnan(values[:, c]).sum())
    text = ", ".join(rows) if rows else "no row"
    return text + (f" ({blank} row(s) 0/0)" if blank else "")


def restoring_sentence(sweep: SweepResult, local: np.ndarray, columns: list[str] | None = None) -> str:
    """What the two heatmaps of ``sweep`` show, in words generated from the data: for each column (default: the
    subspace columns ``C``, ``N`` and ``C+N`` where present, else the token-type columns), the rows where it
    restores the clean readout fully, read right after the patched block and at the final read layer."""
    final = sweep.values["restored"].numpy()
    if columns is None:
        wanted = ("C", "N", "C+N") if sweep.name == "layer_subspace" else ("points", "centroids")
        columns = [c for c in wanted if c in sweep.col_labels]
    parts = []
    for col in columns:
        parts.append(f"Column `{col}` restores the clean readout fully right after the patched block in: "
                     f"{_cells_text(sweep, local, col)}; read after {sweep.read_label}, in: "
                     f"{_cells_text(sweep, final, col)}.")
    return " ".join(parts)


def patching_section(exp: PatchingExperiment, sweeps: list[SweepResult], check: UnpatchedCheck | None = None,
                     read_layer: int | None = None, with_badges: bool = True) -> Section:
    """The sweeps as a section of the circuit report (:class:`analysis.report.Section`, key ``"patching"``).

    Each sweep is drawn twice side by side: read right after the patched block (:func:`local_readout`) and at
    the read layer; a sentence generated from both says which columns restore the clean readout where."""
    # On a page of its own the badges head the page (patching_page); inside a circuit report they head the section.
    badges = badges_html(run_badges(check)) if check is not None and with_badges else ""
    items = [Html(badges + _intro(exp, check, read_layer))]
    for sw in sweeps:
        items.append(Html(f"<p>{_code(READING.get(sw.name, ''))}</p>"))
        local = local_readout(exp, sw)
        sentence = restoring_sentence(sw, local)
        if sentence:
            items.append(Html(f"<p><b>In this run:</b> {_code(sentence)}</p>"))
        items.append(heatmap_pair(sw, local))
    text = ("Activation patching: the corrupted run, with part of the clean run's activations copied in, cell "
            "by cell. The construction predicts where the state of the algorithm lives at every layer, so the "
            "heatmaps can be checked against the weights (tests/unit/test_patching_predictions.py does).")
    return Section("Activation patching", text, items, key="patching")


def patching_page(exp: PatchingExperiment, sweeps: list[SweepResult], check: UnpatchedCheck | None = None,
                  read_layer: int | None = None, problem: dict | None = None) -> str:
    """A standalone HTML page: the summary, and each sweep's explanation above its heatmap."""
    title = "Activation patching on the k-means circuit"
    if problem:
        title += f": {problem.get('source', '')}, k = {exp.pair.k}, {exp.pair.kind}"
    header = Header(title, badges=run_badges(check) if check is not None else [])
    if check is not None and check.placeholder_deviation is not None:
        header.groups["placeholder"] = [Fact(
            "clean run with and without it", f"differs by at most {check.placeholder_deviation:.3g}",
            f"unit-scaled, at every layer and shared token; inert within {PLACEHOLDER_TOLERANCE:g}")]
    return Report(header, [patching_section(exp, sweeps, check, read_layer, with_badges=False)]).to_html()


def add_patching_section(report, exp: PatchingExperiment, sweeps: list[SweepResult],
                         check: UnpatchedCheck | None = None, read_layer: int | None = None,
                         after: str | None = "verification"):
    """Add :func:`patching_section` to ``report`` (after the section ``after`` when it exists, else at the end)."""
    known = after is not None and any(s.key == after for s in report.sections)
    return report.add_section(patching_section(exp, sweeps, check, read_layer), after=after if known else None)
