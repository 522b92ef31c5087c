"""The measurements kept in the repository (``paper/measured/<name>``) that a build's numbers rest on, in words.

A fresh clone cannot repeat everything the paper reports: GPU runs, the language model trained near convergence,
the scaling campaign, the nanoGPT anchor, the host's benchmarks (hours, root, the testbed), the advisor's
compression timings and the System section's one-off checks are kept in the repository, each with its machine,
date and commit. Each experiment records in its :class:`~lowbw.report.experiment.Context` the stores whose
contents entered its numbers (:meth:`~lowbw.report.experiment.Context.read_store`), and the build writes the list
(``BuildStores``) that the abstract prints: a store the build did not read (a profile that measured the same
thing itself, or did not run the experiment) is not named.
"""

from __future__ import annotations

__all__ = ["STORES", "words"]

# store (paper/measured/<name>) -> its words in the abstract's list, in the paper's order
STORES: dict[str, str] = {
    "gpu": "GPU training runs",
    "lm": "the language model's runs near convergence",
    "scaling": "the scaling campaign's runs",
    "anchor": "the nanoGPT anchor's runs",
    "host": "host benchmarks a build does not repeat",
    "compress_time": "the advisor's compression timings",
    "system": "the System section's one-off checks",
}


def words(read: set[str]) -> str:
    """The stores of ``read`` in the order of :data:`STORES`, as an English list ("a, b and c"); an unknown name is
    a one-line error naming it."""
    unknown = sorted(read - set(STORES))
    if unknown:
        raise ValueError(f"unknown measurement store(s) {unknown}; add them to lowbw.report.stores.STORES "
                         f"(known: {list(STORES)})")
    names = [w for s, w in STORES.items() if s in read]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1] if names else ""
