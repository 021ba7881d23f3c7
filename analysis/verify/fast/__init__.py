"""Fast forms of the reference: the certified run at the data's precision (:mod:`~analysis.verify.fast.certified`)
and the exact cluster sums it reads (:mod:`~analysis.verify.fast.exact_sums`), each held to its textbook form
(:mod:`circuits.precision`) by the tests."""
