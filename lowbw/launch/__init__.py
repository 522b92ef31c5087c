"""lowbw.launch: starting process groups whose rendezvous listens only where it was told.

* :mod:`lowbw.launch.rendezvous` -- the TCP store of every lowbw process group, bound to the group's address;
* :mod:`lowbw.launch.torchrun` -- torchrun with that store (``python -m lowbw.launch.torchrun ...``);
* :mod:`lowbw.launch.cluster` -- one torchrun per node of a multi-node job, its place read from where it runs
  (``python -m lowbw.launch.cluster -- -m lowbw.train.worker ...``).
"""
