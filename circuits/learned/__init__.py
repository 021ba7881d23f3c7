"""Learned safeguarded swap: the safeguarded swap (:mod:`circuits.swap`) with one more, *trained*, candidate.

* :mod:`circuits.learned.reference`: the algorithm in numpy (each step keeps the best of Lloyd's step, the swap
  step, the learned step, Lloyd's own trajectory and the untrained safeguarded swap's own trajectory);
* :mod:`circuits.learned.checkpoint`: the trained parameters as a small JSON file, validated as untrusted input;
* :mod:`circuits.learned.train`: the derivative-free training on the general and paper task families.

The trained part is a handful of numbers (one extrapolation factor per step), so it is read directly: see
``docs/training.md``.
"""
