"""The hand-built general constructions as users run them, beside Lloyd's circuit.

:mod:`~analysis.constructions.swap` runs the safeguarded swap (``cluster --construction swap``) and
:mod:`~analysis.constructions.learned` the learned safeguarded swap (``--construction learned``, ``--checkpoint``);
:mod:`~analysis.constructions.common` holds what both share: the exact Lloyd's reference they are compared with,
the check against their own numpy reference, the ``cluster --json`` document and the evaluation's model. The
circuits themselves are built in :mod:`circuits.swap` and :mod:`circuits.learned`.
"""
