"""Views of a captured k-means circuit: each returns its data and a plotly figure (a :class:`View`).

Every view takes a run (:class:`~analysis.pipeline.RunResult`, or a :class:`~analysis.capture.Capture`; the
weight views also a :class:`~circuits.build.KMeansCircuit`) and labels every axis with the layout's names
(``circuit.layout.labels``, ``encoded.sequence.token_labels``). They are the building blocks of the HTML report
(:mod:`analysis.report`) and are meant to be called from notebooks as well::

    from analysis.views import assign_attention
    view = assign_attention(run)      # view.data: arrays over every point; view.figure: a plotly Figure
    view.figure.show()

One view per module:

==========================  ==============================================================================
:func:`assign_attention`    assignment heads: point queries x centroid keys per layer, with margins
:func:`update_attention`    update heads: centroid queries x point keys (who is averaged into which centroid)
:func:`attention_pattern`   every block's whole pattern: each query token x each key token, labelled
:func:`residual_norms`      residual stream per layer as (token type x named subspace) norms
:func:`residual_tokens`     the full residual of chosen tokens, labelled by the layout
:func:`qk_circuit`          QK circuits (``FactoredMatrix``) in the named basis, grouped by subspace
:func:`ov_circuit`          OV circuits, likewise
:func:`centroid_trajectories`  data and centroid paths across iterations (PCA above 2-D), slider over iterations
:func:`verification_table`  the verification report as a table
:func:`objective_plot`      objective per iteration, circuit vs reference, with the margins
:func:`ties_table`          ties and mismatches listed by the verifier
==========================  ==============================================================================

The views of what training changed (:mod:`analysis.views.drift`) take a drift analysis instead of a run; import
them from that module (they need the training code, which the views of a run do not).
"""

from analysis.views._common import View
from analysis.views.sampling import DEFAULT_MAX_POINTS, PointSample, point_sample
from analysis.views.assign_attention import assign_attention
from analysis.views.attention_pattern import attention_pattern
from analysis.views.head_circuits import head_circuit, head_matrices, ov_circuit, qk_circuit
from analysis.views.residual import ResidualStreams, residual_norms, residual_streams, residual_tokens
from analysis.views.trajectories import centroid_trajectories
from analysis.views.update_attention import update_attention
from analysis.views.verification import objective_plot, ties_table, verification_table

__all__ = [
    "DEFAULT_MAX_POINTS",
    "PointSample",
    "ResidualStreams",
    "View",
    "assign_attention",
    "attention_pattern",
    "centroid_trajectories",
    "head_circuit",
    "head_matrices",
    "objective_plot",
    "ov_circuit",
    "point_sample",
    "qk_circuit",
    "residual_norms",
    "residual_streams",
    "residual_tokens",
    "ties_table",
    "update_attention",
    "verification_table",
]
