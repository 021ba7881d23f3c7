"""Safeguarded swap as an exact transformer: Lloyd's step, Lloyd's step after a swap, and Lloyd's own trajectory,
keeping the best; never above Lloyd's, never rising. :mod:`circuits.swap.reference` is the numpy algorithm."""
