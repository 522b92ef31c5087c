"""lowbw.net: the network side -- an alpha-beta cost model and a real low-bandwidth testbed on one machine.

* :mod:`lowbw.net.costmodel` -- time of every collective on a star of per-worker full-duplex links
  (``collective_time``, ``calls_time``, ``lower_bound``, ``step_time``, crossovers, calibration);
* :mod:`lowbw.net.testbed` -- N network namespaces behind a bridge, each worker's link shaped with ``tc``
  (``Testbed`` context manager; ``python -m lowbw testbed``), rate schedules, guaranteed teardown; built
  from :mod:`~lowbw.net.link` (``LinkSpec``), :mod:`~lowbw.net.tc` (the ip/tc commands),
  :mod:`~lowbw.net.network` (the namespaces, links and shapers), :mod:`~lowbw.net.probe`,
  :mod:`~lowbw.net.namespaces`, :mod:`~lowbw.net.runner` and
  :mod:`~lowbw.net.linkemu` (delay, jitter and loss in userspace where the kernel has no netem),
  :mod:`~lowbw.net.trace` (bandwidth/delay traces) and :mod:`~lowbw.net.faults` (stragglers, failures,
  partitions); :mod:`~lowbw.net.costlinks` is the cost model on per-worker links, :mod:`~lowbw.net.tcploss`
  what random packet loss adds to a message under TCP's loss recovery;
* :mod:`lowbw.net.calibrated` -- E1's calibrated model of our collectives on the testbed's links (the
  alpha-beta model plus gloo's handshakes, refilled token buckets, the tree's window, per-step software cost);
* :mod:`lowbw.net.ratelimit` -- the ``loopback-ratelimit`` fallback (in-process pacing of our own sends);
* :mod:`lowbw.net.units` -- the one parser of rates and delays (``parse_rate("10mbit")``,
  ``parse_delay("20ms")``): an explicit, unambiguous unit, everywhere one is read;
  :mod:`lowbw.net.linkstats` -- what crossed each worker's link in a testbed run.

Nothing here imports torch at import time.
"""

from lowbw.net.costmodel import LinkParams, calls_time, collective_time, lower_bound, step_time
from lowbw.net.testbed import Testbed, TestbedUnavailable, netns_available

__all__ = ["LinkParams", "calls_time", "collective_time", "lower_bound", "step_time", "Testbed",
           "TestbedUnavailable", "netns_available"]
