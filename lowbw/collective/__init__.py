"""lowbw.collective: what a collective call is and what it carries, torch-free, for every layer above.

* :mod:`lowbw.collective.spec` -- :class:`~lowbw.collective.spec.CollectiveSpec` (one all-reduce algorithm:
  its run, cost, broadcast, volume and the testbed model's fields), its alpha-beta
  :class:`~lowbw.collective.spec.Cost`, and the per-link message primitives both cost models time with;
* :mod:`lowbw.collective.partition` -- how a flat tensor is cut into one segment per rank and into chunks;
* :mod:`lowbw.collective.buckets` -- which tensors of a model travel together, one call per bucket (DDP's).

It imports nothing of lowbw and no torch: the compressors, the collectives of :mod:`lowbw.comm`, the cost models
and the advisor read it alike.
"""
