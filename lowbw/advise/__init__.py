"""``lowbw advise``: which way of communicating reaches the user's target soonest on the user's own model,
workers and network, and by how much.

Time to target = predicted step time x predicted steps to the target. The two halves come from what the
suite measures separately: the step time from the alpha-beta cost model (:mod:`lowbw.net.costmodel`, held to
the testbed in E1, E8, E10) on the exact bytes each method puts on the wire for the model's parameter shapes;
the steps from an efficiency table that the workflow builds from the measured runs (steps to the target of
each method relative to dense training on the same workload and workers). Nothing is trained at advice time.

Modules, one idea each: ``workload`` (the model as parameter shapes, and its compute per step), ``candidates``
(the methods ranked, and the bytes each sends), ``steptime`` (compute + compression + communication per
step), ``efficiency`` (the table of measured steps-to-target ratios: build, read, look up), ``rank``
(combine into a ranking with reasons), ``cache`` (what is derived from code alone, kept between calls),
``rates`` (link rates and delays), ``cli`` (the command). How good the advice is on the suite's own runs is
E11 of the paper (:mod:`lowbw.report.e11`).
"""
