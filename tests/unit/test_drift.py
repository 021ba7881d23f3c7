"""The drift analysis against hand-computed cases: a model equal to its construction has drifted nowhere; a known
perturbation is found in the block it was put in, with the cosine it must have; the report opens in a browser."""

import copy

import numpy as np
import pytest
import torch

from analysis.drift import analyse
from analysis.report.drift import drift_report
from analysis.drift.patterns import attention_patterns
from analysis.drift.weights import compare_circuit, compare_mlp, unit_roles
from browser import find_chromium, static_external_references
from circuits.blocks import ASSIGN, UPDATE
from circuits.training.model import ModelConfig, RecurrentKMeans
from circuits.training.tasks import make_tasks

D, K = 3, 4


def config_doc(model: RecurrentKMeans, n: int = 12) -> dict:
    return {"model": model.config.to_dict(), "dtype": "float64",
            "training": {"d": model.config.d, "k": model.config.k, "n": n, "steps": 0, "init": model.config.init}}


@pytest.fixture(scope="module")
def construction():
    return RecurrentKMeans(ModelConfig(D, K, "exact"), dtype=torch.float64)


def test_a_model_equal_to_its_construction_has_not_drifted(construction):
    for kind in (UPDATE, ASSIGN):
        for which in ("QK", "OV"):
            c = compare_circuit(construction, construction, kind, which)
            assert c.cosine == pytest.approx(1.0, abs=1e-12) and c.rel_frobenius == 0.0
            assert all(b[4] == 0.0 for b in c.blocks)
            np.testing.assert_allclose(c.sv_trained, c.sv_construction)
        assert all(r.max_rel_change == 0.0 for r in compare_mlp(construction, construction, kind))


def test_a_known_perturbation_is_found_where_it_was_put(construction):
    L = construction.layout
    trained = copy.deepcopy(construction)
    # Update head channel m reads X[m] + C[m] (value) and writes C_stage[m]; make it also write XB[0].
    m = 1
    W_O = trained.update_W_O
    with torch.no_grad():
        W_O[m, L.index("XB", 0)] += 0.5 / trained.update_W_O_scale[m, L.index("XB", 0)]
    c = compare_circuit(trained, construction, UPDATE, "OV")
    # Delta W_OV = (X[m] + C[m]) outer 0.5 e_XB0: two entries of 0.5, in blocks (X, XB) and (C, XB), both new.
    top = {(b[0], b[1]): b for b in c.blocks[:2]}
    assert set(top) == {("X", "XB"), ("C", "XB")}
    for b in top.values():
        assert b[3] == 0.0 and b[4] == pytest.approx(0.5)
    assert c.blocks[2][4] == 0.0
    # Disjoint supports: cos = |W0| / sqrt(|W0|^2 + |Delta|^2), distance = |Delta| / |W0|.
    w0 = np.linalg.norm(c.construction)
    delta = np.sqrt(2 * 0.5**2)
    assert c.cosine == pytest.approx(w0 / np.hypot(w0, delta), rel=1e-12)
    assert c.rel_frobenius == pytest.approx(delta / w0, rel=1e-12)
    assert compare_circuit(trained, construction, UPDATE, "QK").rel_frobenius == 0.0


def test_unit_roles_of_the_construction(construction):
    roles, eff = unit_roles(construction, UPDATE)
    count = {r: roles.count(r) for r in set(roles)}
    assert count["BETA x X -> XB"] == D and count["ONE x X -> XB"] == D and count["ONE x XB -> XB"] == D
    assert count["C_stage x C_stage -> N"] == 2 * D and count["N x ONE -> N"] == 1
    assert count["ONE x BETA -> BETA"] == 1 and count["ONE x IS_POINT -> BETA"] == 1
    eff_of = lambda role: eff[[i for i, r in enumerate(roles) if r == role]]  # noqa: E731
    np.testing.assert_allclose(eff_of("ONE x XB -> XB"), -1.0)  # erase the old XB
    np.testing.assert_allclose(eff_of("ONE x BETA -> BETA"), -1.0)  # growth 0: BETA <- 0 * BETA + 1
    np.testing.assert_allclose(eff_of("C_stage x C_stage -> N"), 1.0)  # relu(s) s + relu(-s)(-s) = s^2
    roles_a, eff_a = unit_roles(construction, ASSIGN)
    assert sorted(set(roles_a)) == ["Y x ONE -> Y", "Y_stage x IS_POINT -> Y", "Y_stage x ONE -> Y_stage"]


def test_patterns_from_the_hooked_transformer_are_the_fast_passes(construction):
    model = RecurrentKMeans(ModelConfig(D, K, "random", seed=2), dtype=torch.float64)
    t = make_tasks(1, 10, D, K, seed=3)
    pats = attention_patterns({"m": model}, t.X[0], t.C0[0], t.components[0], [0, 1])
    enc = model.encode(t.X, t.C0)
    seen = {}
    with torch.no_grad():
        r = model.step(enc.resid, 10, first=True, patterns=seen)
        np.testing.assert_allclose(pats.assign["m"][0], seen[ASSIGN][0][0, :, 1:].numpy()[pats.order], atol=1e-12)
        model.step(model.reembed(r, enc.resid), 10, patterns=seen)
        np.testing.assert_allclose(pats.update["m"][1], seen[UPDATE][1][0, 1:, 1:11].numpy()[:, pats.order], atol=1e-12)
        np.testing.assert_allclose(pats.assign["m"][1], seen[ASSIGN][0][0, :, 1:].numpy()[pats.order], atol=1e-12)


def test_the_sweep_point_at_the_initial_stiffness_is_the_construction(construction):
    """The sweep reuses the construction's measured ratio at its own stiffness: run anew, it is the same."""
    from analysis.drift.assemble import held_out
    from analysis.drift.behaviour import behaviour, stiffness_sweep, task_ratios
    from analysis.evaluation.metrics import objectives
    from analysis.evaluation.protocol import lloyd_trajectory

    batch = held_out(construction, 3, 12, 0, None).batch
    lloyd = objectives(batch.X, lloyd_trajectory(batch.X, batch.C0, 3)[-1][None])[0]
    fresh = stiffness_sweep(construction.config, batch, 3, lloyd, betas=(5.0,), dtype=torch.float64)[0]
    beh = behaviour({"construction": construction}, batch, 3)
    assert fresh["ratio"] == pytest.approx(beh.ratio["construction"][-1], rel=1e-12)
    assert fresh["ratio_std"] == pytest.approx(beh.spread["ratio"]["construction"][-1], rel=1e-9)
    assert fresh["ratio"] == pytest.approx(task_ratios(construction, batch, 3, lloyd).mean(), rel=1e-12)
    reused = stiffness_sweep(construction.config, batch, 3, lloyd, betas=(4.0, 5.0), dtype=torch.float64,
                             at_init=(0.25, 0.5))
    assert reused[1]["ratio"] == 0.25 and reused[1]["ratio_std"] == 0.5 and reused[0]["ratio"] != 0.25


@pytest.fixture(scope="module")
def untrained_analysis(construction):
    return analyse(construction, config_doc(construction), tasks=3, n=12, steps=3, pattern_steps=(0, 1))


def test_analysis_of_an_untrained_model(untrained_analysis):
    a = untrained_analysis
    assert a.behaviour.ratio["trained"] == a.behaviour.ratio["construction"]
    final = a.behaviour.ratio["trained"][-1]
    for row in a.ablations:  # nothing to revert: every ablation leaves the model as it is
        assert row["reverted"] == pytest.approx(final, rel=1e-12)
        assert row["only_this_trained"] == pytest.approx(final, rel=1e-12)
    assert a.knobs["trained"] == a.knobs["construction"]
    assert f"{final:.3g} x Lloyd's" in a.summary[0]
    sweep = {r["beta"]: r["ratio"] for r in a.sweep}
    assert sweep[5.0] == pytest.approx(final, rel=1e-12)  # the construction's own stiffness is in the sweep
    # Spreads: the per-step standard deviation over tasks (one task at a time) is the one of the ablations' and
    # the sweep's end points (all tasks in one chunk), for the same untouched model.
    std = a.behaviour.spread["ratio"]["trained"][-1]
    assert std > 0
    for row in a.ablations:
        assert row["reverted_std"] == pytest.approx(std, rel=1e-9)
    assert {r["beta"]: r["ratio_std"] for r in a.sweep}[5.0] == pytest.approx(std, rel=1e-9)


def test_drift_report_is_self_contained(untrained_analysis, tmp_path):
    path = drift_report(untrained_analysis).write(tmp_path / "drift.html")
    html = path.read_text()
    assert static_external_references(html) == []
    import html as html_lib

    for s in untrained_analysis.summary:
        assert html_lib.escape(s) in html


@pytest.mark.skipif(find_chromium() is None, reason="headless Chromium is not installed")
def test_drift_report_draws_every_figure_offline(untrained_analysis, tmp_path):
    from browser import check_page

    path = drift_report(untrained_analysis).write(tmp_path / "drift.html")
    check = check_page(path, timeout=120)
    assert check.problems() == []
    assert check.state["done"] and check.state["rendered"] == check.state["total"] >= 7
    assert all(f.svg for f in check.figures)
    assert check.external_requests == []


# ------------------------------------------------------------------------------------------------ figures


def test_drift_figures_titles_scales_and_labels(untrained_analysis):
    from analysis.views import drift as views
    from analysis.views.figure_parts import signed_log

    a = untrained_analysis
    # Behaviour and patterns: x-axis titles only under the bottom row (above it they overprint subplot titles).
    for view in (views.view_behaviour(a), views.view_patterns(a)):
        lay = view.figure.layout
        cols = len({t.xaxis for t in view.figure.data}) // 2
        titled = [f"xaxis{'' if i == 1 else i}" for i in range(1, 2 * cols + 1) if lay[f"xaxis{'' if i == 1 else i}"].title.text]
        assert titled == [f"xaxis{i}" for i in range(cols + 1, 2 * cols + 1)], titled
    # Patterns: every panel on its own bar, from 0 to its own largest weight (a shared bar let the exact head's
    # 1 / cluster size wash out a trained head's softer weights); each bar beside its own panel.
    view = views.view_patterns(a)
    fig = view.figure
    assert len(fig.data) > 0
    for t in fig.data:
        assert t.zmin == 0 and t.zmax == pytest.approx(float(np.max(t.z))) and t.zmax > 0, t.name
        assert t.showscale is not False and t.colorbar.title.text in ("assign", "update")
    assert len({(t.colorbar.x, t.colorbar.y) for t in fig.data}) == 4
    # Step 0 has no update attention (the update head first runs at step 1): no panel is drawn for it, a note says
    # so, and the page opens at step 1, the first step where every panel has non-zero attention.
    assert a.patterns.steps == [0, 1] and not np.any(a.patterns.update["trained"][0])
    assert view.data["active_step"] == 1 and fig.layout.sliders[0].active == 1
    assert {t.name for t in fig.data if t.visible} == {"exact (Lloyd's) assign", "trained assign",
                                                        "exact (Lloyd's) update", "trained update"}
    notes = [ann for ann in fig.layout.annotations if "no attention" in ann.text]
    assert len(notes) == 2 and not any(n.visible for n in notes)
    at_step_0 = fig.layout.sliders[0].steps[0].args[1]
    assert sum(at_step_0.values()) == 2
    # Circuits: linear colours, diverging at 0, each panel from minus to plus its own largest magnitude; the
    # signed log scale is one button away. Lines exactly between named subspaces.
    view = views.view_circuits(a)
    fig = view.figure
    linear, log = (b.args[0] for b in fig.layout.updatemenus[1].buttons)
    for i, c in enumerate(a.circuits):
        d = view.data["circuits"][i]
        rows, cols, floor = d["rows"], d["cols"], d["floor"]
        heat = fig.data[2 * i + 1]
        sub = c.trained[np.ix_(rows, cols)]
        np.testing.assert_array_equal(np.asarray(heat.customdata), sub)
        np.testing.assert_array_equal(np.asarray(heat.z), sub)
        assert heat.zmid == 0 and heat.zmax == -heat.zmin == np.abs(sub).max()
        np.testing.assert_array_equal(linear["z"][2 * i + 1], sub)
        np.testing.assert_allclose(log["z"][2 * i + 1], signed_log(sub, floor))
        assert log["zmax"][2 * i + 1] == pytest.approx(float(signed_log(np.array([np.abs(sub).max()]), floor)[0]))
        names = [a.layout.subspace_of(int(q))[0] for q in rows]
        cuts = sorted({s["y0"] for s in d["shapes"] if s["yref"] == "y"})
        assert cuts == [r + 0.5 for r in range(len(rows) - 1) if names[r] != names[r + 1]]
        assert fig.layout.updatemenus[0].buttons[i].args[1]["shapes"] == d["shapes"]
    # Behaviour: whole-step ticks; each mean has a band of its standard deviation over the tasks.
    fig = views.view_behaviour(a).figure
    assert all(ax.dtick == 1 and ax.tickformat == "d" for ax in (fig.layout.xaxis, fig.layout.xaxis4))
    bands = [t for t in fig.data if t.fill == "toself"]
    assert len(bands) == sum(len(getattr(a.behaviour, q)) for q in ("objective", "ari", "entropy", "stiffness"))
    # Stiffness sweep: each line's label sits on the line (annotation y is log10 of the value on a log axis).
    fig = views.view_sweep(a).figure
    ys = sorted(ann.y for ann in fig.layout.annotations)
    assert ys == pytest.approx(sorted([0.0, np.log10(a.behaviour.ratio["trained"][-1])]))


def test_similarity_axes_span_the_values_they_draw(untrained_analysis):
    """Cosines of 0.988 to 0.998 drawn on a 0..1 axis are one flat row (issue 39): each axis spans its values."""
    from dataclasses import replace

    from analysis.views.drift import view_similarity

    cosines, distances = [0.9925, 0.9904, 0.9965, 0.9885], [0.129, 0.138, 0.087, 0.159]
    a = copy.copy(untrained_analysis)
    assert len(a.circuits) == 4
    a.circuits = [replace(c, cosine=cos, rel_frobenius=r) for c, cos, r in zip(a.circuits, cosines, distances)]
    fig = view_similarity(a).figure
    for axis, values in ((fig.layout.yaxis, cosines), (fig.layout.yaxis2, distances)):
        lo, hi = axis.range
        span = max(values) - min(values)
        assert lo < min(values) and max(values) < hi and hi - lo <= 1.5 * span, (axis.range, values)
    assert [list(t.y) for t in fig.data] == [cosines, distances]
