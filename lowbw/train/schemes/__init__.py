"""Sync schemes: one class per scheme behind one interface (:mod:`lowbw.train.schemes.base`, whose
docstring says how to add one)."""
