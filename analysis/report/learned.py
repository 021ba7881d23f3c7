"""The learned safeguarded swap's drift report: :class:`analysis.drift.learned.LearnedDrift` as a self-contained
HTML page (:mod:`analysis.report.document`): the trained factors read back from the weights against the untrained
construction's, where the one trained layer per step writes, and what the learned candidate does on held-out tasks.
"""

from __future__ import annotations

import plotly.graph_objects as go

from analysis.report.document import Fact, Header, Report, Section, Table


#: Marker of each candidate of the ratio figure, largest first so that every one shows where their values coincide.
_MARKERS = ({"symbol": "circle-open", "size": 13, "line": {"width": 2}}, {"symbol": "diamond", "size": 8},
            {"symbol": "x", "size": 6})


def factors_figure(drift) -> go.Figure:
    """Per step: the checkpoint's factor, the one read from the weights, the untrained 1 and Lloyd's 0. The two
    factors coincide where the weights hold the checkpoint's: the checkpoint's are open rings, those read from the
    weights small crosses inside them, and the reference lines are drawn first, under both."""
    steps = [s.step for s in drift.steps]
    fig = go.Figure()
    fig.add_scatter(x=steps, y=[1.0] * len(steps), mode="lines", name="untrained construction (1)",
                    line={"dash": "dash"})
    fig.add_scatter(x=steps, y=[0.0] * len(steps), mode="lines", name="Lloyd's step (0)", line={"dash": "dot"})
    fig.add_scatter(x=steps, y=[s.alpha for s in drift.steps], mode="lines+markers", name="checkpoint alpha_t",
                    marker={"symbol": "circle-open", "size": 16, "line": {"width": 2}})
    fig.add_scatter(x=steps, y=[s.alpha_read for s in drift.steps], mode="markers", name="read from the weights",
                    marker={"symbol": "x", "size": 8})
    fig.update_layout(title="Extrapolation factor per step", xaxis_title="step", yaxis_title="alpha",
                      template="plotly_white", height=380)
    fig.update_xaxes(tick0=0, dtick=max(1, -(-len(steps) // 10)), tickformat="d")
    return fig


def ratio_figure(drift) -> go.Figure:
    """Mean objective over Lloyd's per step, for each variant of :attr:`LearnedDrift.ratio_per_step`, with error
    bars of one standard deviation over the tasks (:attr:`LearnedDrift.ratio_spread`). The variants' means are close,
    so each has its own marker (largest first) and its error bars sit a little beside the others' at each step;
    hover gives the step and the values."""
    fig = go.Figure()
    names = list(drift.ratio_per_step)
    for i, name in enumerate(names):
        values = drift.ratio_per_step[name]
        std = drift.ratio_spread.get(name)
        offset = 0.12 * (i - (len(names) - 1) / 2)
        steps = list(range(len(values)))
        fig.add_scatter(x=[t + offset for t in steps], y=values, mode="lines+markers", name=name,
                        marker=_MARKERS[i % len(_MARKERS)], customdata=steps,
                        hovertemplate=f"{name}, step %{{customdata}}: %{{y:.4g}}<extra></extra>",
                        error_y=dict(type="data", array=std, thickness=1) if std is not None else None)
    fig.update_layout(title="Objective over Lloyd's on held-out tasks (lower is better; mean, bars: std over the"
                      " tasks)", xaxis_title="step (the candidates side by side at each step)",
                      yaxis_title="objective / Lloyd's", template="plotly_white", height=380)
    fig.update_xaxes(tick0=0, dtick=max(1, -(-len(next(iter(drift.ratio_per_step.values()), [])) // 10)),
                     tickformat="d")
    return fig


def learned_drift_report(drift, title: str = "What training changed: the learned safeguarded swap") -> Report:
    """The page (module docstring) for ``drift`` (a :class:`~analysis.drift.learned.LearnedDrift`)."""
    exact = max(abs(s.alpha - s.alpha_read) for s in drift.steps) == 0 and drift.other_layers_max_change == 0
    header = Header(title, verdict=("the weights hold exactly the checkpoint's factors, in one layer per step"
                                    if exact else "the weights differ from the checkpoint's factors"),
                    verified=exact, exact=exact,
                    groups={"checkpoint": [Fact("alphas", ", ".join(f"{a:g}" for a in drift.alphas),
                                                "per step; the last one for every later step")]},
                    messages=list(drift.summary))
    weights = Section("Factors in the weights", (
        "The trained part of the learned safeguarded swap is one extrapolation factor alpha_t per step, part of that"
        " step's `extrapolate` layer: its head's W_O is Lloyd's update head's times alpha_t and its MLP adds"
        " (1 - alpha_t) C. Each factor here is read back from the stacked model's W_O in the named basis"
        " (`LearnedCircuit.factors_in`) and compared with the untrained construction's, alpha = 1 (two Lloyd's steps,"
        " where training started), and alpha = 0 (Lloyd's step). The weights are read at d=2, k=3: the factors do"
        " not depend on the shape."))
    weights.add(factors_figure(drift))
    weights.add(Table(["step", "alpha (checkpoint)", "alpha (read from W_O)", "|dW_O| vs alpha=1",
                       "|dMLP| vs alpha=1", "|dW_O| vs alpha=0", "W_O change writes to"],
                      [[s.step, f"{s.alpha:g}", f"{s.alpha_read:g}", f"{s.w_o_change_vs_untrained:.4g}",
                        f"{s.mlp_change_vs_untrained:.4g}", f"{s.w_o_change_vs_lloyd:.4g}", ", ".join(s.writes_to)]
                       for s in drift.steps],
                      caption="every other layer " + (
                          "is identical to the untrained construction's" if drift.other_layers_max_change == 0 else
                          f"differs from the untrained construction's by at most {drift.other_layers_max_change:.3g}")))
    report = Report(header, [weights])
    if drift.ratio_per_step:
        t = drift.tasks
        behaviour = Section("What the learned candidate does", (
            f"{t['count']} held-out tasks of the general family (n={t['n']}, {t['steps']} steps, seed {t['seed']}):"
            " the numpy reference with the trained factors, with the untrained candidate (all factors 1), and without"
            " the learned candidate (the untrained safeguarded swap). Every variant keeps Lloyd's and the swap's"
            " trajectories as candidates, so none is above either at any step."))
        behaviour.add(ratio_figure(drift))
        behaviour.add(Table(["candidate", "share of steps kept"], [[c, f"{v:.1%}"] for c, v in drift.kept.items()],
                            caption="ties after convergence go to the first candidate in tie order (lloyd)"))
        report.add_section(behaviour)
    return report
