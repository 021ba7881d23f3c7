"""What training changed: a trained recurrent model next to the construction it started from, in the named basis.

Weights. For both heads (update, assign) the trained QK and OV circuits (``W_Q W_K^T`` and ``W_V W_O`` as
TransformerLens :class:`~transformer_lens.FactoredMatrix` objects) are compared with the construction's at the
run's initial sharpness (:mod:`circuits.training.construction`): cosine similarity and relative Frobenius distance
(basis-invariant), singular values, and the change of every (row subspace, column subspace) block — which blocks
of the named residual basis moved most, and which are new. The MLPs keep the construction's wiring; their
coefficients are compared unit role by unit role. The construction's knobs (stiffnesses, self weight, schedule
growth) are read back from the trained weights (:meth:`~circuits.training.model.RecurrentKMeans.knobs`).

Behaviour. On held-out tasks, step by step: the k-means objective of the trained model, of the construction at its
initial sharpness and of Lloyd's; how soft the assignments are (entropy of ``Y``); ARI against the generating
components; the stiffness the model applies (its ``BETA``). Attention patterns of the trained and the exact model
(the construction at Lloyd's sharpness) on one problem come from the exported ``HookedTransformer`` via
``run_with_cache``. Ablations put one group of trained weights back to the construction's and measure what is
lost; a sweep of the construction's own stiffness says how much of the gain a hand-tuned construction gets.

History. For a run, the training log holds the drift of each block from its initial weights, the knobs and the
validation ratio at every validation step.

:func:`analyse` (:mod:`analysis.drift.assemble`) computes all of this as numbers, one
:class:`~analysis.drift.record.DriftAnalysis` measured by :mod:`analysis.drift.weights`,
:mod:`analysis.drift.behaviour` (on the evaluation's observed forward pass and metrics, :mod:`analysis.evaluation`)
and :mod:`analysis.drift.patterns`; :func:`summarise` (:mod:`analysis.drift.summary`) puts them in plain words.
The figures are :mod:`analysis.views.drift`; :func:`analysis.report.drift.drift_report` draws the analysis as a
self-contained HTML report (the report reads this package; this package does not import the report).
"""

from analysis.drift.assemble import STAGES, DriftOptions, analyse, construction_of, stages_of
from analysis.drift.record import DriftAnalysis
from analysis.drift.summary import summarise

__all__ = ["DriftAnalysis", "DriftOptions", "STAGES", "analyse", "construction_of", "stages_of", "summarise"]
