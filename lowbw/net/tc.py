"""Pure builders of the ``ip`` and ``tc`` commands that make the testbed's network (no side effects: each
returns the commands, :mod:`lowbw.net.testbed` runs them). Unit-testable without root.

Topology (nothing is created or changed in the root namespace)::

    <tag>-br  (namespace)           <tag>-w0 .. <tag>-w{N-1}  (namespaces)
      br0 (bridge)
       +-- p0 <=== veth ===> lbw0   10.231.0.1/24   rank 0 (MASTER_ADDR)
       +-- p1 <=== veth ===> lbw0   10.231.0.2/24   rank 1
       ...

Worker ``r`` (address ``SUBNET.(r+1)``) is shaped by a tbf on ``lbw0`` (its uplink, worker egress) and one
on the bridge port ``p<r>`` (its downlink, bridge egress towards the worker). With fair queueing
(``ack_priority``) each tbf's queue is an HTB used as a scheduler, as fq_codel schedules a Linux host's
queue: pure TCP ACKs and short non-TCP frames leave first, data waits in one queue per peer, the queues
served round robin one frame at a time (:func:`queue_classifier_bpf`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lowbw.net.link import FRAME_BYTES, LinkSpec

__all__ = [
    "Command", "Shaper", "SUBNET", "WORKER_IF", "BRIDGE", "worker_address", "port_name",
    "queue_classifier_bpf", "random_drop_bpf", "bridge_commands", "worker_commands", "tbf_args",
    "shaper_commands", "change_shaper_commands", "netem_args", "uplink_commands", "downlink_commands",
    "UPLINK_ROOT", "DOWNLINK_ROOT",
]

SUBNET = "10.231.0"  # only ever configured inside our own namespaces
WORKER_IF = "lbw0"  # the worker's end of its link
BRIDGE = "br0"
QUANTUM = FRAME_BYTES  # bytes a bulk queue may send per round-robin turn (one full frame, as fq_codel)
FAST = "40gbit"  # rate of the scheduler's HTB classes: far above any shaped rate, so only tbf shapes
# Byte offsets from the Ethernet header of the last octet of the IPv4 destination (uplink: the peer is
# the destination) and source (downlink: the peer is the source) address.
DST_OCTET, SRC_OCTET = 33, 29


@dataclass(frozen=True)
class Command:
    """One command: its argv, and the text fed to its stdin (``tc -batch -``) or None."""

    argv: tuple[str, ...]
    stdin: str | None = None


@dataclass(frozen=True)
class Shaper:
    """Where a link direction's tbf sits, so its rate can be changed later: its parent (``("root",)`` or
    ``("parent", "1:1")``), its handle major, and whether its queue is the fair-queueing HTB."""

    parent: tuple[str, ...]
    major: int
    fair: bool


UPLINK_ROOT = Shaper(("root",), 1, True)
DOWNLINK_ROOT = Shaper(("root",), 1, True)


def worker_address(rank: int) -> str:
    return f"{SUBNET}.{rank + 1}"


def port_name(rank: int) -> str:
    """The bridge port of worker ``rank``'s link (in the bridge namespace)."""
    return f"p{rank}"


def _ip(ns: str, *args: str) -> Command:
    return Command(("ip", "-n", ns, *args))


def _tc(ns: str, *args: str) -> Command:
    return Command(("ip", "netns", "exec", ns, "tc", *args))


def _tc_batch(ns: str, lines: list[str]) -> Command:
    """Several tc commands in one ``tc -batch`` process."""
    return Command(("ip", "netns", "exec", ns, "tc", "-batch", "-"), "\n".join(lines) + "\n")


# ----------------------------------------------------------------------------------------- classifiers
def queue_classifier_bpf(h: int, octet_offset: int) -> str:
    """Classic BPF for cls_bpf (the packet from its Ethernet header) on the HTB with handle ``h``:

    * pure TCP ACKs (IPv4 TCP with no payload: total length = IP header + TCP header) and short (< 128 bytes)
      frames that are not TCP: ``-1``, the filter's classid (the priority class ``h:1``);
    * every other IPv4 frame: class ``h:(0x100 + the peer's last address octet, at octet_offset)``, one
      queue per peer, served round robin;
    * anything else: no match (the HTB's default class).

    Short TCP *data* segments stay in their peer's queue: a segment that overtook its own connection's
    queued data would arrive out of order and make the sender retransmit spuriously. One queue per peer
    (rather than one for all bulk data) keeps each connection in order while a short message to one peer
    waits at most one round-robin round behind data to the others.
    """
    base = (h << 16) | 0x100
    prog = [
        "40 0 0 12",      # 0  ldh [12]             ethertype
        "21 0 17 2048",   # 1  jeq #0x800 ? 2 : 19   IPv4
        "48 0 0 23",      # 2  ldb [23]             IP protocol
        "21 0 10 6",      # 3  jeq #6 ? 4 : 14       TCP
        "40 0 0 16",      # 4  ldh [16]             IP total length
        "2 0 0 0",        # 5  st M[0]
        "177 0 0 14",     # 6  ldxb 4*([14]&0xf)    X = IP header length
        "80 0 0 26",      # 7  ldb [x+26]           TCP data offset (high nibble)
        "116 0 0 4",      # 8  rsh #4
        "100 0 0 2",      # 9  lsh #2               A = TCP header length
        "12 0 0 0",       # 10 add x                A = IP + TCP header length
        "7 0 0 0",        # 11 tax
        "96 0 0 0",       # 12 ld M[0]
        "29 7 2 0",       # 13 jeq x ? 21 : 16      no payload: priority; else per peer
        "128 0 0 0",      # 14 ld len               IPv4, not TCP
        "53 0 5 128",     # 15 jge #128 ? 16 : 21
        f"48 0 0 {octet_offset}",  # 16 ldb [peer octet]
        f"68 0 0 {base}",  # 17 or #(h << 16 | 0x100)
        "22 0 0 0",       # 18 ret a                 classid h:(100 + octet)
        "128 0 0 0",      # 19 ld len               not IPv4
        "53 1 0 128",     # 20 jge #128 ? 22 : 21
        "6 0 0 4294967295",  # 21 ret -1 (the filter's classid: priority)
        "6 0 0 0",        # 22 ret 0 (no match: default class)
    ]
    return ",".join([str(len(prog)), *prog])


def random_drop_bpf(loss: float) -> str:
    """Classic BPF matching a fraction ``loss`` of packets at random: ``A = random u32`` (the ancillary
    load at offset SKF_AD_OFF + SKF_AD_RANDOM = -4096 + 56); ``A < loss * 2**32``: match (-1), else 0."""
    thr = min(2**32 - 1, int(loss * 2**32))
    return f"4,32 0 0 {2**32 - 4096 + 56},53 1 0 {thr},6 0 0 {2**32 - 1},6 0 0 0"


# ------------------------------------------------------------------------------------------- topology
def bridge_commands(bridge_ns: str) -> list[Command]:
    """Create the bridge namespace and its bridge."""
    return [Command(("ip", "netns", "add", bridge_ns)), _ip(bridge_ns, "link", "set", "lo", "up"),
            _ip(bridge_ns, "link", "add", BRIDGE, "type", "bridge"), _ip(bridge_ns, "link", "set", BRIDGE, "up")]


def worker_commands(bridge_ns: str, ns: str, rank: int, lossy: bool = False,
                    congestion_control: str | None = None, tap: bool = False) -> list[Command]:
    """Create worker ``rank``'s namespace and its veth link to the bridge, addressed and up. ``lossy``:
    one packet per GSO segment (loss then drops single packets); ``congestion_control`` is set per route
    (RTAX_CC_ALGO), which works where the namespace's sysctl is read-only. ``tap``: the namespace and the
    link's two ends (TAP devices ``lbw0`` and ``p<rank>``, :mod:`lowbw.net.linkemu`) exist already."""
    addr, port = worker_address(rank), port_name(rank)
    create = [] if tap else [
        Command(("ip", "netns", "add", ns)),
        _ip(bridge_ns, "link", "add", port, "type", "veth", "peer", "name", WORKER_IF, "netns", ns)]
    cmds = [*create, _ip(bridge_ns, "link", "set", port, "master", BRIDGE), _ip(bridge_ns, "link", "set", port, "up"),
            _ip(ns, "addr", "add", f"{addr}/24", "dev", WORKER_IF)]
    if lossy:
        cmds.append(_ip(ns, "link", "set", WORKER_IF, "gso_max_segs", "1"))
    cmds.append(_ip(ns, "link", "set", WORKER_IF, "up"))
    if congestion_control:
        cmds.append(_ip(ns, "route", "replace", f"{SUBNET}.0/24", "dev", WORKER_IF, "proto", "kernel", "scope",
                        "link", "src", addr, "congctl", congestion_control))
    cmds.append(_ip(ns, "link", "set", "lo", "up"))
    return cmds


# ------------------------------------------------------------------------------------------- shapers
def tbf_args(bps: float, link: LinkSpec) -> list[str]:
    p = link.tbf_params(bps)
    return ["tbf", "rate", f"{int(round(bps))}bit", "burst", str(p["burst"]), "limit", str(p["limit"])]


def _bulk_queues(h: int, workers: int) -> list[tuple[str, str]]:
    """(classid, qdisc handle) of the bulk queues under HTB ``h``: the default class, then one per peer
    (worker r's address octet is r + 1)."""
    out = [(f"{h:x}:2", f"{h + 0x20:x}:")]
    for octet in range(1, workers + 1):
        out.append((f"{h:x}:{0x100 + octet:x}", f"{(h << 8) | octet:x}:"))
    return out


def shaper_commands(ns: str, dev: str, shaper: Shaper, bps: float, link: LinkSpec, workers: int,
                    peer_octet: int = DST_OCTET) -> list[Command]:
    """tbf (handle ``major:``) at the shaper's place; if the shaper is ``fair``, its queue is an HTB
    scheduler (handle ``0xA0 + major``): a strict-priority class for pure ACKs and short non-TCP frames,
    then one bfifo of the tbf's limit per peer (the address octet at ``peer_octet``), served round robin
    ``QUANTUM`` bytes at a time."""
    cmds = [_tc(ns, "qdisc", "add", "dev", dev, *shaper.parent, "handle", f"{shaper.major}:", *tbf_args(bps, link))]
    if not shaper.fair:
        return cmds
    h = 0xA0 + shaper.major
    limit = str(link.tbf_params(bps)["limit"])
    lines = [f"qdisc add dev {dev} parent {shaper.major}:1 handle {h:x}: htb default 2 r2q 100000",
             f"class add dev {dev} parent {h:x}: classid {h:x}:1 htb rate {FAST} quantum 200000 prio 0",
             f"qdisc add dev {dev} parent {h:x}:1 handle {h + 0x10:x}: pfifo limit 10000"]
    for cid, qh in _bulk_queues(h, workers):
        lines += [f"class add dev {dev} parent {h:x}: classid {cid} htb rate {FAST} quantum {QUANTUM} prio 1",
                  f"qdisc add dev {dev} parent {cid} handle {qh} bfifo limit {limit}"]
    lines.append(f"filter add dev {dev} parent {h:x}: protocol all prio 1 bpf bytecode "
                 f'"{queue_classifier_bpf(h, peer_octet)}" classid {h:x}:1')
    return cmds + [_tc_batch(ns, lines)]


def change_shaper_commands(ns: str, dev: str, shaper: Shaper, bps: float, link: LinkSpec,
                           workers: int) -> list[Command]:
    """Change a shaper's rate in place; tbf leaves a non-fifo child alone, so a fair shaper's bulk queues
    are resized to the new rate's limit too."""
    cmds = [_tc(ns, "qdisc", "change", "dev", dev, *shaper.parent, "handle", f"{shaper.major}:",
                *tbf_args(bps, link))]
    if shaper.fair:
        limit = link.tbf_params(bps)["limit"]
        cmds.append(_tc_batch(ns, [f"qdisc change dev {dev} parent {cid} handle {qh} bfifo limit {limit}"
                                   for cid, qh in _bulk_queues(0xA0 + shaper.major, workers)]))
    return cmds


def netem_args(link: LinkSpec) -> list[str]:
    """The uplink's netem: delay with normal jitter, and loss (microsecond resolution)."""
    netem = ["netem", "limit", "1000000"]
    if link.delay_s or link.jitter_s:
        netem += ["delay", f"{link.delay_s * 1e6:.0f}us"]
        if link.jitter_s:
            netem += [f"{link.jitter_s * 1e6:.0f}us", "distribution", "normal"]
    if link.loss:
        netem += ["loss", f"{link.loss * 100:.6f}%"]
    return netem


def uplink_commands(ns: str, link: LinkSpec, workers: int, ack_priority: bool, netem: bool
                    ) -> tuple[list[Command], Shaper, str | None]:
    """The qdiscs of a worker's uplink (``lbw0`` egress). Returns the commands, where the shaper sits
    (for later rate changes) and the loss method (None without loss).

    1. Delay/jitter/loss and ``netem``: a tbf at the root with netem as its child (no fair queueing).
    2. Loss without netem: an HTB whose class 1:2 ends in a zero-length fifo, fed by a random BPF
       classifier (:func:`random_drop_bpf`); the shaper hangs under class 1:1.
    3. Otherwise the shaper is the root.
    """
    bps = link.up_bps
    if link.impaired and netem:
        loss_method = "netem" if link.loss else None
        if bps is None:
            return [_tc(ns, "qdisc", "add", "dev", WORKER_IF, "root", "handle", "10:", *netem_args(link))], \
                Shaper(("root",), 1, False), loss_method
        shaper = Shaper(("root",), 1, False)
        return [_tc(ns, "qdisc", "add", "dev", WORKER_IF, "root", "handle", "1:", *tbf_args(bps, link)),
                _tc(ns, "qdisc", "add", "dev", WORKER_IF, "parent", "1:1", "handle", "10:", *netem_args(link))], \
            shaper, loss_method
    if link.loss:
        cmds = [_tc(ns, "qdisc", "add", "dev", WORKER_IF, "root", "handle", "1:", "htb", "default", "1",
                    "r2q", "100000")]
        cmds += [_tc(ns, "class", "add", "dev", WORKER_IF, "parent", "1:", "classid", cid, "htb", "rate", FAST,
                     "quantum", "200000") for cid in ("1:1", "1:2")]
        cmds += [_tc(ns, "qdisc", "add", "dev", WORKER_IF, "parent", "1:2", "handle", "20:", "pfifo", "limit", "0"),
                 _tc(ns, "filter", "add", "dev", WORKER_IF, "parent", "1:", "protocol", "all", "prio", "1", "bpf",
                     "bytecode", random_drop_bpf(link.loss), "classid", "1:2")]
        shaper = Shaper(("parent", "1:1"), 2, ack_priority)
        if bps is not None:
            cmds += shaper_commands(ns, WORKER_IF, shaper, bps, link, workers)
        return cmds, shaper, "cbpf-random-drop"
    shaper = Shaper(("root",), 1, ack_priority)
    return (shaper_commands(ns, WORKER_IF, shaper, bps, link, workers) if bps is not None else []), shaper, None


def downlink_commands(bridge_ns: str, rank: int, link: LinkSpec, workers: int, ack_priority: bool
                      ) -> tuple[list[Command], Shaper]:
    """The shaper of worker ``rank``'s downlink: the bridge port's egress towards the worker, its fair
    queues keyed by the packet's source (the peer that sent it)."""
    shaper = Shaper(("root",), 1, ack_priority)
    if link.down_bps is None:
        return [], shaper
    return shaper_commands(bridge_ns, port_name(rank), shaper, link.down_bps, link, workers,
                           peer_octet=SRC_OCTET), shaper
