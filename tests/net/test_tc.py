"""The testbed's ip/tc command builders and link parameters: exact commands, no root needed."""

from __future__ import annotations

import pytest

from lowbw.net import tc
from lowbw.net.link import MIN_QUEUE_BYTES, LinkSpec, parse_loss
from lowbw.net.tc import Command, Shaper


def argvs(cmds: list[Command]) -> list[list[str]]:
    return [list(c.argv) for c in cmds]


def test_bridge_and_worker_commands_are_exact():
    assert argvs(tc.bridge_commands("t-br")) == [
        ["ip", "netns", "add", "t-br"], ["ip", "-n", "t-br", "link", "set", "lo", "up"],
        ["ip", "-n", "t-br", "link", "add", "br0", "type", "bridge"], ["ip", "-n", "t-br", "link", "set", "br0", "up"]]
    assert argvs(tc.worker_commands("t-br", "t-w1", 1)) == [
        ["ip", "netns", "add", "t-w1"],
        ["ip", "-n", "t-br", "link", "add", "p1", "type", "veth", "peer", "name", "lbw0", "netns", "t-w1"],
        ["ip", "-n", "t-br", "link", "set", "p1", "master", "br0"], ["ip", "-n", "t-br", "link", "set", "p1", "up"],
        ["ip", "-n", "t-w1", "addr", "add", "10.231.0.2/24", "dev", "lbw0"],
        ["ip", "-n", "t-w1", "link", "set", "lbw0", "up"], ["ip", "-n", "t-w1", "link", "set", "lo", "up"]]
    lossy = argvs(tc.worker_commands("t-br", "t-w0", 0, lossy=True, congestion_control="reno"))
    assert ["ip", "-n", "t-w0", "link", "set", "lbw0", "gso_max_segs", "1"] in lossy
    assert ["ip", "-n", "t-w0", "route", "replace", "10.231.0.0/24", "dev", "lbw0", "proto", "kernel", "scope",
            "link", "src", "10.231.0.1", "congctl", "reno"] in lossy


def test_plain_uplink_is_one_tbf_without_fair_queueing():
    link = LinkSpec.parse("40mbit")
    cmds, shaper, loss = tc.uplink_commands("ns", link, 2, ack_priority=False, netem=False)
    assert argvs(cmds) == [["ip", "netns", "exec", "ns", "tc", "qdisc", "add", "dev", "lbw0", "root", "handle", "1:",
                            "tbf", "rate", "40000000bit", "burst", "15140", "limit", "500000"]]
    assert shaper == Shaper(("root",), 1, False) and loss is None and cmds[0].stdin is None


def test_fair_shaper_batch_has_a_priority_class_and_one_queue_per_peer():
    link = LinkSpec.parse("10mbit")
    cmds = tc.shaper_commands("ns", "p0", Shaper(("root",), 1, True), 1e7, link, 3, peer_octet=tc.SRC_OCTET)
    assert len(cmds) == 2 and cmds[1].argv == ("ip", "netns", "exec", "ns", "tc", "-batch", "-")
    lines = cmds[1].stdin.splitlines()
    assert lines[:3] == ["qdisc add dev p0 parent 1:1 handle a1: htb default 2 r2q 100000",
                         "class add dev p0 parent a1: classid a1:1 htb rate 40gbit quantum 200000 prio 0",
                         "qdisc add dev p0 parent a1:1 handle b1: pfifo limit 10000"]
    # the default queue, then peers 1..3 (address octets), each a bfifo of the 256-frame floor
    assert [ln.split()[7] for ln in lines if ln.startswith("class") and "prio 1" in ln] == \
        ["a1:2", "a1:101", "a1:102", "a1:103"]
    assert sum(f"bfifo limit {MIN_QUEUE_BYTES}" in ln for ln in lines) == 4
    assert lines[-1].startswith("filter add dev p0 parent a1: protocol all prio 1 bpf bytecode \"23,")
    assert f"48 0 0 {tc.SRC_OCTET}," in lines[-1] and lines[-1].endswith("classid a1:1")


def test_change_resizes_the_bulk_queues():
    link = LinkSpec.parse("100mbit")
    cmds = tc.change_shaper_commands("ns", "lbw0", Shaper(("parent", "1:1"), 2, True), 1e8, link, 2)
    assert list(cmds[0].argv) == ["ip", "netns", "exec", "ns", "tc", "qdisc", "change", "dev", "lbw0", "parent",
                                  "1:1", "handle", "2:", "tbf", "rate", "100000000bit", "burst", "15140",
                                  "limit", "1250000"]
    assert cmds[1].stdin.splitlines() == [f"qdisc change dev lbw0 parent {c} handle {h} bfifo limit 1250000"
                                          for c, h in (("a2:2", "c2:"), ("a2:101", "a201:"), ("a2:102", "a202:"))]


def test_loss_without_netem_is_a_random_bpf_drop_class_above_the_shaper():
    link = LinkSpec.parse("50mbit", loss="5%")
    cmds, shaper, loss = tc.uplink_commands("ns", link, 2, ack_priority=True, netem=False)
    assert loss == "cbpf-random-drop" and shaper == Shaper(("parent", "1:1"), 2, True)
    flt = argvs(cmds)[4]
    assert flt[:5] == ["ip", "netns", "exec", "ns", "tc"] and flt[-2:] == ["classid", "1:2"]
    assert flt[flt.index("bytecode") + 1] == f"4,32 0 0 4294963256,53 1 0 {int(0.05 * 2**32)},6 0 0 4294967295,6 0 0 0"
    tce = ["ip", "netns", "exec", "ns", "tc"]
    assert argvs(cmds)[:4] == [
        [*tce, "qdisc", "add", "dev", "lbw0", "root", "handle", "1:", "htb", "default", "1", "r2q", "100000"],
        [*tce, "class", "add", "dev", "lbw0", "parent", "1:", "classid", "1:1", "htb", "rate", "40gbit",
         "quantum", "200000"],
        [*tce, "class", "add", "dev", "lbw0", "parent", "1:", "classid", "1:2", "htb", "rate", "40gbit",
         "quantum", "200000"],
        [*tce, "qdisc", "add", "dev", "lbw0", "parent", "1:2", "handle", "20:", "pfifo", "limit", "0"]]
    # the shaper hangs under class 1:1 with handle 2:
    assert argvs(cmds)[5][9:13] == ["parent", "1:1", "handle", "2:"]


def test_netem_sits_under_the_tbf_and_carries_delay_jitter_and_loss():
    link = LinkSpec.parse("50mbit", delay="20ms", jitter="1ms", loss="0.1%")
    cmds, shaper, loss = tc.uplink_commands("ns", link, 2, ack_priority=True, netem=True)
    assert shaper == Shaper(("root",), 1, False) and loss == "netem"
    tce = ["ip", "netns", "exec", "ns", "tc", "qdisc", "add", "dev", "lbw0"]
    assert argvs(cmds) == [
        [*tce, "root", "handle", "1:", "tbf", "rate", "50000000bit", "burst", "15140", "limit", "625000"],
        [*tce, "parent", "1:1", "handle", "10:", "netem", "limit", "1000000", "delay", "20000us", "1000us",
         "distribution", "normal", "loss", "0.100000%"]]


def test_downlink_unshaped_gives_no_commands():
    assert tc.downlink_commands("br", 0, LinkSpec(), 2, True)[0] == []
    cmds, shaper = tc.downlink_commands("br", 1, LinkSpec.parse(up="1gbit", down="10mbit"), 2, True)
    assert "p1" in cmds[0].argv and "10000000bit" in cmds[0].argv and shaper.fair


def test_linkspec_rules_and_bad_values():
    link = LinkSpec.parse("100mbit", queue="2s")
    assert link.up_bps == link.down_bps == 1e8 and link.tbf_params(1e8) == {"burst": 15_140, "limit": 25_000_000}
    assert LinkSpec.parse("10mbit", up="1mbit").up_bps == 1e6 and not LinkSpec().shaped
    assert LinkSpec.parse(None, delay="5ms").delayed and LinkSpec.parse(None, loss="1%").impaired
    assert parse_loss("0.5%") == 0.005 and parse_loss(None) == 0.0
    for bad, msg in (({"loss": "150%"}, "loss"), ({"queue": "0ms"}, "queue"), ({"loss": "lots"}, "'lots'"),
                     ({"rate": "fast"}, "'fast'"), ({"delay": "-1ms"}, "delay '-1ms' must be >= 0"),
                     ({"delay": "20"}, "delay '20' has no unit"), ({"rate": "10mbps"}, "rate '10mbps' is ambiguous")):
        with pytest.raises(ValueError, match=msg):
            LinkSpec.parse(**bad)
    with pytest.raises(ValueError, match="delay_s must be >= 0"):
        LinkSpec(delay_s=-1.0)
    with pytest.raises(AttributeError):
        link.up_bps = 1.0  # frozen
