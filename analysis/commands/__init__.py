"""Subcommands of ``kmeans-circuits``, one module each (modules starting with ``_`` are shared helpers)."""
