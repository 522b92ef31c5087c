"""The netns + tc testbed: environment, shaping, schedules, exit status and guaranteed teardown.

Tests marked ``netns`` need root and iproute2 (``ip``, ``tc``); they are skipped only when one of those is
missing (CI runs as root and installs iproute2, see .ci/run). Every test uses its own name prefix, so
parallel runs and leftovers of other testbeds do not interfere.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lowbw.net import testbed as T
from lowbw.net.testbed import Testbed, TestbedUnavailable
from tests.conftest import netns
from tests.helpers import refused, wait_for

ROOT = Path(__file__).resolve().parents[2]


def _prefix() -> str:
    return "lbwt" + secrets.token_hex(3)


def _ours(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].startswith(prefix + "-")]


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "lowbw", "testbed", *args], env=env, cwd=ROOT, **kw)


def _ns_pids(ns: str) -> list[str]:
    return subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()


# ------------------------------------------------------------------------------------------ netns
@pytest.mark.netns
@netns
def test_workers_get_torchrun_env_links_and_reach_each_other(tmp_path):
    script = textwrap.dedent(f"""
        import json, os, socket, sys, time
        r = int(os.environ["RANK"])
        keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "GLOO_SOCKET_IFNAME", "LOWBW_EMULATION"]
        info = {{k: os.environ.get(k) for k in keys}}
        info["if_exists"] = os.path.exists("/sys/class/net/" + os.environ["GLOO_SOCKET_IFNAME"])
        info["host_ifs"] = sorted(os.listdir("/sys/class/net"))
        json.dump(info, open(r"{tmp_path}/rank%d.json" % r, "w"))
        addr = (os.environ["MASTER_ADDR"], 29611)
        if r == 0:
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(addr); s.listen(8)
            got = sorted(int(s.accept()[0].recv(8)) for _ in range(int(os.environ["WORLD_SIZE"]) - 1))
            sys.exit(0 if got == list(range(1, int(os.environ["WORLD_SIZE"]))) else 5)
        for _ in range(100):
            try:
                c = socket.create_connection(addr, timeout=2); c.sendall(str(r).encode()); c.close(); break
            except OSError:
                time.sleep(0.1)
        else:
            sys.exit(6)
    """)
    p = _prefix()
    with Testbed(3, rate="50mbit", prefix=p, master_port=29612) as tb:
        assert tb.emulation == "netns-tc"
        assert len(_ours(p)) == 4  # bridge + 3 workers
        codes = tb.run([sys.executable, "-c", script], timeout=60)
        assert "tbf" in tb.qdiscs() and tb.qdiscs().count("rate 50Mbit") == 6  # up + down per worker
    assert codes == [0, 0, 0]
    import json

    for r in range(3):
        info = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert info["RANK"] == str(r) and info["WORLD_SIZE"] == "3" and info["LOCAL_RANK"] == "0"
        assert info["LOCAL_WORLD_SIZE"] == "1" and info["MASTER_ADDR"] == "10.231.0.1"
        assert info["MASTER_PORT"] == "29612" and info["GLOO_SOCKET_IFNAME"] == "lbw0" and info["if_exists"]
        assert info["LOWBW_EMULATION"] == "netns-tc"
        assert info["host_ifs"] == ["lbw0", "lo"]  # a private namespace: no host interface is visible
    assert _ours(p) == []


RECV_SCRIPT = textwrap.dedent("""
    import os, socket, sys, time
    r = int(os.environ["RANK"]); n = int(sys.argv[1]); addr = ("10.231.0.2", 29621)
    if r == 1:
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(addr); s.listen(1)
        c, _ = s.accept(); got = 0; t0 = None
        while got < n:
            b = c.recv(1 << 20)
            if not b: break
            t0 = t0 or time.perf_counter(); got += len(b)
        print("MBIT", got * 8 / (time.perf_counter() - t0) / 1e6, flush=True)
    else:
        for _ in range(100):
            try:
                c = socket.create_connection(addr, timeout=2); break
            except OSError:
                time.sleep(0.1)
        print("CC", c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode(), flush=True)
        c.sendall(b"x" * n); c.close()
""")


def _tbf_stats(ns: str) -> dict[str, int]:
    """Bytes sent and overlimits (packets held back for lack of tokens) of the tbf on ``ns``'s lbw0."""
    stats = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show", "dev", "lbw0"],
                           capture_output=True, text=True, check=True).stdout
    blk = stats[stats.index("qdisc tbf"):]
    return {"sent": int(blk.split("Sent ")[1].split()[0]), "overlimits": int(blk.split("overlimits ")[1].split()[0])}


@pytest.mark.netns
@netns
def test_rate_is_really_limited(tmp_path):
    out = tmp_path / "out.txt"
    with Testbed(2, rate="40mbit", prefix=_prefix()) as tb, open(out, "w") as f:
        codes = tb.run([sys.executable, "-c", RECV_SCRIPT, str(4_000_000)], timeout=60, stdout=f)
        assert tb.describe()["tbf"] == {"burst": 15_140, "limit": 500_000}  # 100 ms of queue at 40 Mbit/s
        tbf = _tbf_stats(tb.worker_ns(0))
    assert codes == [0, 0]
    mbit = float(out.read_text().split("MBIT")[1].split()[0])
    # never more than the rate, however busy the machine (a slower one only lowers the goodput)
    assert mbit < 1.02 * 40, mbit
    # the uplink's tbf passed all of it and was the bottleneck: it had to hold packets back (counted by tc)
    assert tbf["sent"] >= 4_000_000 and tbf["overlimits"] > 0, tbf


@pytest.mark.netns
@netns
@pytest.mark.timing
def test_rate_goodput_reaches_the_rate(tmp_path):
    """A wall-clock lower bound: a busy machine can fail it (pytest --timing or LOWBW_TIMING_TESTS=1 runs it)."""
    out = tmp_path / "out.txt"
    with Testbed(2, rate="40mbit", prefix=_prefix()) as tb, open(out, "w") as f:
        assert tb.run([sys.executable, "-c", RECV_SCRIPT, str(4_000_000)], timeout=60, stdout=f) == [0, 0]
    mbit = float(out.read_text().split("MBIT")[1].split()[0])
    # TCP goodput through a 40 Mbit/s tbf: 1448/1514 of the rate (headers), never more than the rate
    assert 0.85 * 40 < mbit < 1.02 * 40, mbit


@pytest.mark.netns
@netns
@pytest.mark.parametrize("cc", ["reno", "cubic"])
def test_congestion_control_is_set_on_the_workers_links(tmp_path, cc):
    if cc not in T.available_congestion_controls():
        pytest.skip(f"kernel without TCP {cc}")
    out = tmp_path / "out.txt"
    with Testbed(2, rate="100mbit", prefix=_prefix(), congestion_control=cc) as tb, open(out, "w") as f:
        codes = tb.run([sys.executable, "-c", RECV_SCRIPT, "1000"], timeout=60, stdout=f)
        assert tb.describe()["congestion_control"] == cc
    assert codes == [0, 0] and f"CC {cc}" in out.read_text()


@pytest.mark.netns
@netns
def test_rate_schedule_changes_tc_while_running():
    with Testbed(2, rate="50mbit", schedule="0:50mbit,0.4:10mbit", prefix=_prefix()) as tb:
        codes = tb.run(["sleep", "1.2"], timeout=30)
        q = tb.qdiscs()
        assert q.count("rate 10Mbit") == 4 and "50Mbit" not in q
        assert [r for _, r in tb.rate_log] == [50e6, 50e6, 10e6]
        # bulk queues (4 shapers x (default + one per worker)) at the 256-frame floor
        assert q.count("bfifo") == 12 and q.count("limit 387584b") == 12
        tb.set_rate("20mbit", ranks=[1])
        assert tb.qdiscs().count("rate 20Mbit") == 2 and tb.qdiscs().count("limit 387584b") == 12  # floor again
    assert codes == [0, 0]


@pytest.mark.netns
@netns
def test_small_packets_take_the_priority_band_and_can_be_turned_off(tmp_path):
    with Testbed(2, rate="40mbit", prefix=_prefix()) as tb:
        assert tb.describe()["ack_priority"] is True
        assert tb.run([sys.executable, "-c", RECV_SCRIPT, str(2_000_000)], timeout=60,
                      stdout=subprocess.DEVNULL) == [0, 0]
        # rank 1 received the data: its uplink carried the ACKs, all in the priority class a1:1
        stats = subprocess.run(["ip", "netns", "exec", tb.worker_ns(1), "tc", "-s", "class", "show", "dev", "lbw0"],
                               capture_output=True, text=True).stdout
        sent = {blk.split()[1]: int(blk.split("Sent ")[1].split()[2]) for blk in stats.split("class ")[1:]
                if "Sent " in blk and blk.startswith("htb")}
        assert sent["a1:1"] > 100 and sent["a1:1"] > 10 * sent["a1:2"], stats
    with Testbed(2, rate="40mbit", prefix=_prefix(), ack_priority=False) as tb:
        assert "htb" not in tb.qdiscs() and tb.describe()["ack_priority"] is False


# Crafted frames sent through the worker's link with an AF_PACKET socket (so they pass its qdisc): which
# htb class each kind lands in. Payloads are never delivered to any socket (no port listens).
FRAMES_SCRIPT = textwrap.dedent("""
    import socket, struct, sys
    kind, count, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    src, dst = socket.inet_aton("10.231.0.1"), socket.inet_aton(dst)

    def ipv4(body, proto=6, opts=b""):
        ihl = 5 + len(opts) // 4
        return struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 4 * ihl + len(body), 0, 0, 64, proto, 0, src, dst) \\
            + opts + body

    def tcp(payload, opt_words=3):  # opt_words * 4 bytes of NOP options (3: as with timestamps)
        hdr = struct.pack("!HHIIBBHHH", 40000, 29500, 1, 1, (5 + opt_words) << 4, 0x10, 512, 0, 0)
        return hdr + b"\\x01" * (4 * opt_words) + payload

    frames = {
        "pure_ack": ipv4(tcp(b"")),
        "pure_ack_ip_options": ipv4(tcp(b""), opts=b"\\x01" * 4),
        "short_data": ipv4(tcp(b"z")),  # 67-byte frame: short, but data
        "bulk_data": ipv4(tcp(b"z" * 1400)),
        "short_udp": ipv4(b"\\0" * 20, proto=17),
        "long_udp": ipv4(b"\\0" * 400, proto=17),
    }
    eth_ip = b"\\xff" * 6 + b"\\x02\\0\\0\\0\\0\\x01" + b"\\x08\\x00"
    eth_arp = b"\\xff" * 6 + b"\\x02\\0\\0\\0\\0\\x01" + b"\\x08\\x06"
    frame = eth_arp + b"\\0" * 28 if kind == "arp" else eth_ip + frames[kind]
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind(("lbw0", 0))
    for _ in range(count):
        s.send(frame)
""")


@pytest.mark.netns
@netns
@pytest.mark.parametrize("kind, band", [("pure_ack", "a1:1"), ("pure_ack_ip_options", "a1:1"), ("arp", "a1:1"),
                                        ("short_udp", "a1:1"), ("short_data", "peer"), ("bulk_data", "peer"),
                                        ("long_udp", "peer")])
def test_priority_band_takes_pure_acks_and_data_queues_per_peer(kind, band):
    """Short TCP *data* segments must queue with their connection's data (else they overtake it and the
    receiver's out-of-order reports trigger spurious retransmissions); payload-free ACKs jump the queue;
    data queues per peer (class a1:1xx, xx = the peer's address octet in hex), unknown peers in a1:2."""
    with Testbed(3, rate="100mbit", prefix=_prefix()) as tb:
        ns = tb.worker_ns(0)

        def sent() -> dict[str, int]:
            stats = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "class", "show", "dev", "lbw0"],
                                   capture_output=True, text=True, check=True).stdout
            return {blk.split()[1]: int(blk.split("Sent ")[1].split()[2]) for blk in stats.split("class ")[1:]
                    if "Sent " in blk and blk.startswith("htb")}

        for dst, want in (("10.231.0.3", "a1:103"), ("10.231.0.250", "a1:2")):
            want = band if band != "peer" else want
            before = sent()
            subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", FRAMES_SCRIPT, kind, "50", dst],
                           check=True, timeout=30)
            after = sent()
            delta = {c: after[c] - before.get(c, 0) for c in after}
            assert delta[want] >= 50 and sum(delta.values()) - delta[want] <= 5, (kind, dst, delta)


@pytest.mark.netns
@netns
def test_realtime_runs_the_workers_under_sched_rr_and_is_recorded(tmp_path):
    # One write(2) per worker: both workers share the file, and under PYTHONUNBUFFERED print() writes each
    # field separately, so two workers' lines could interleave (seen in CI).
    script = "import os; p = os.sched_getparam(0).sched_priority; " \
             "os.write(1, f\"{os.environ['RANK']} {os.sched_getscheduler(0) == os.SCHED_RR} {p}\\n\".encode())"
    if not T.realtime_available():
        with pytest.raises(T.RealtimeUnavailable, match="realtime=7"):
            Testbed(2, rate=None, prefix=_prefix(), realtime=7).start()
        return
    for rt, want in ((7, "True 7"), (None, "False 0")):
        out = tmp_path / f"rt{rt}.txt"
        with Testbed(2, rate=None, prefix=_prefix(), realtime=rt) as tb, open(out, "w") as f:
            assert tb.run([sys.executable, "-c", script], timeout=60, stdout=f) == [0, 0]
            assert tb.describe()["scheduling"] == ("fair (SCHED_OTHER)" if rt is None else "SCHED_RR priority 7")
        assert sorted(out.read_text().split("\n")[:2]) == [f"0 {want}", f"1 {want}"]


def test_realtime_unavailable_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(T, "realtime_available", lambda: False)
    with pytest.raises(T.RealtimeUnavailable, match="realtime=5: .*SCHED_RR.*CAP_SYS_NICE"):
        Testbed(2, emulation="loopback-ratelimit", realtime=5).start()


@pytest.mark.netns
@netns
def test_exit_status_is_nonzero_if_any_worker_fails_and_the_others_are_stopped():
    p = _prefix()
    with Testbed(2, rate="10mbit", prefix=p) as tb:
        codes = tb.run(["sh", "-c", 'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 60'], grace=0.5)
    assert codes == [-signal.SIGKILL, 3]  # rank 0 was killed after the grace, not left to sleep its 60 s
    proc = _cli("--workers", "2", "--prefix", p, "--grace", "0.5", "--", "sh", "-c",
                'if [ "$RANK" = 1 ]; then exit 4; fi; sleep 60')
    assert proc.wait(timeout=60) == 4
    assert _ours(p) == []


@pytest.mark.netns
@netns
def test_teardown_on_exception_and_killed_worker():
    p = _prefix()
    procs = []
    with pytest.raises(RuntimeError, match="boom"), Testbed(2, rate="10mbit", prefix=p) as tb:
        procs = tb.launch(["sleep", "60"])
        assert len(_ours(p)) == 3
        raise RuntimeError("boom")
    assert _ours(p) == [] and all(pr.poll() is not None for pr in procs)

    with Testbed(2, rate="10mbit", prefix=p) as tb:
        procs = tb.launch(["sleep", "60"])
        os.kill(procs[0].pid, signal.SIGKILL)
        codes = tb.wait(grace=0.5)
    assert codes[0] == -signal.SIGKILL and codes[1] != 0
    assert _ours(p) == []


@pytest.mark.netns
@netns
@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_tear_down(sig, rc):
    p = _prefix()
    proc = _cli("--workers", "2", "--prefix", p, "--", "sleep", "60")
    try:
        assert wait_for(lambda: len(_ours(p)) == 3), "testbed did not come up"
        assert wait_for(lambda: all(_ns_pids(ns) for ns in _ours(p) if not ns.endswith("-br"))), "no workers"
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == rc
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _ours(p) == []


@pytest.mark.netns
@netns
def test_cleanup_removes_leftovers_of_a_killed_testbed():
    p = _prefix()
    proc = _cli("--workers", "2", "--prefix", p, "--", "sleep", "60")
    assert wait_for(lambda: len(_ours(p)) == 3)
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait()
    assert len(_ours(p)) == 3
    assert T.list_leftovers(p) == sorted(_ours(p))
    out = _cli("--cleanup", "--prefix", p, stdout=subprocess.PIPE, text=True)
    assert out.wait(timeout=30) == 0 and "removed 3" in out.stdout.read()
    assert _ours(p) == []


@pytest.mark.netns
@netns
def test_cleanup_leaves_live_testbeds_alone():
    p = _prefix()
    with Testbed(2, rate="10mbit", prefix=p):
        assert T.cleanup(p) == []  # its creator (this process) is alive
        assert len(_ours(p)) == 3
    assert _ours(p) == []


@pytest.mark.netns
@netns
def test_loss_drops_packets(tmp_path):
    with Testbed(2, rate="50mbit", loss="5%", prefix=_prefix()) as tb:
        assert tb.loss == 0.05
        codes = tb.run([sys.executable, "-c", RECV_SCRIPT, str(1_000_000)], timeout=60, stdout=subprocess.DEVNULL)
        stats = subprocess.run(["ip", "netns", "exec", tb.worker_ns(0), "tc", "-s", "qdisc", "show", "dev", "lbw0"],
                               capture_output=True, text=True).stdout
        assert tb.loss_method in ("netem", "cbpf-random-drop")
    assert codes == [0, 0]
    drops = [int(x.split(",")[0]) for x in stats.split("dropped ")[1:]]
    assert max(drops) > 0, stats


@pytest.mark.netns
@netns
def test_delay_uses_netem_or_the_userspace_emulator_and_netem_on_request_says_so():
    with Testbed(2, rate="50mbit", delay="20ms", prefix=_prefix()) as tb:
        if T.has_netem():
            assert tb.impairment == "netem" and "netem" in tb.qdiscs() and "delay 20ms" in tb.qdiscs()
        else:
            assert tb.impairment == "userspace" and "netem" not in tb.qdiscs()
    if not T.has_netem():
        p = _prefix()
        with pytest.raises(TestbedUnavailable, match="netem"):
            Testbed(2, rate="50mbit", delay="20ms", prefix=p, link_emulator="netem").start()
        assert _ours(p) == []


# ------------------------------------------------------------------------------- no root needed
def test_missing_tools_give_a_clear_error_and_auto_falls_back(monkeypatch, capsys):
    from lowbw.net import probe

    monkeypatch.setitem(probe._PROBE, "caps", probe.Capabilities(
        ("root (...)", "the 'tc' command (package iproute2)"), netem=False))
    with pytest.raises(TestbedUnavailable) as e:
        Testbed(2, emulation="netns-tc").start()
    assert "root" in str(e.value) and "iproute2" in str(e.value) and "loopback-ratelimit" in str(e.value)
    with Testbed(2, rate="10mbit") as tb:
        assert tb.emulation == "loopback-ratelimit"
        env = tb.env(1)
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["GLOO_SOCKET_IFNAME"] == "lo" and env["RANK"] == "1"
        assert env["LOWBW_LINK_RATE_BPS"] == repr(1e7)
        assert tb.run(["sh", "-c", 'test "$LOWBW_EMULATION" = loopback-ratelimit']) == [0, 0]
        assert tb.describe()["emulation"] == "loopback-ratelimit"
    assert "falling back" in capsys.readouterr().err

    import argparse

    from lowbw.net import cli

    ap = argparse.ArgumentParser()
    cli.add_parser(ap.add_subparsers(dest="command"))
    args = ap.parse_args(["testbed", "--emulation", "netns-tc", "--", "true"])
    assert cli.main(args) == 1
    assert "needs: root" in capsys.readouterr().err


def test_queue_sets_the_tbf_limit_in_seconds_of_the_rate():
    tb = T.Testbed(2, rate="10mbit")
    assert tb.queue_s == 0.1 and tb.tbf_params(1e8) == {"burst": 15_140, "limit": 1_250_000}
    assert tb.tbf_params(1e7)["limit"] == T.MIN_QUEUE_BYTES == 256 * 1514  # 100 ms would be 125 KB: the floor
    assert T.Testbed(2, queue="2s").tbf_params(1e8)["limit"] == 25_000_000
    assert T.Testbed(2, queue="1ms").tbf_params(1e10)["limit"] == 2 * 1_250_000  # at least two bursts
    assert T.Testbed(2, limit=300_000).tbf_params(1e9)["limit"] == 300_000
    with pytest.raises(ValueError, match="queue"):
        T.Testbed(2, queue="0ms")


def test_bad_arguments():
    with pytest.raises(ValueError):
        Testbed(0)
    if T.available_congestion_controls():
        with pytest.raises(ValueError, match="'warp-drive'.*available"):
            Testbed(2, congestion_control="warp-drive")
    with pytest.raises(ValueError):
        Testbed(2, prefix="Bad-Prefix")
    with pytest.raises(ValueError):
        Testbed(2, loss="150%")
    with pytest.raises(ValueError):
        Testbed(2, emulation="wifi")
    for bad in (0, 100, "10"):
        with pytest.raises(ValueError, match=f"realtime must be .* got {bad!r}"):
            Testbed(2, realtime=bad)
    assert T.parse_schedule("0:100mbit, 10:10mbit") == [(0.0, 1e8), (10.0, 1e7)]
    assert T.parse_schedule([("500ms", "1gbit")]) == [(0.5, 1e9)]
    with pytest.raises(ValueError):
        T.parse_schedule("100mbit")


LOOPBACK_SCRIPT = textwrap.dedent("""
    import os, time, torch, torch.distributed as dist
    from lowbw.net.ratelimit import install_from_env
    lim = install_from_env()
    assert lim is not None
    slept = []
    sleep = lim._sleep
    lim._sleep = lambda s: (slept.append(s), sleep(s))  # what the limiter asked for, counted
    dist.init_process_group("gloo")
    x = torch.zeros(250_000)  # 1 MB
    dist.barrier()
    t = time.perf_counter()
    if dist.get_rank() == 0:
        dist.send(x, 1)
    else:
        dist.recv(x, 0)
    dt = time.perf_counter() - t
    dist.barrier()
    # 1 MB at 20 Mbit/s = 0.4 s: the sender's uplink holds it back that long (computed from the bytes and the
    # rate, not measured), and the wall time of the send is at least that (a busy machine only adds to it)
    if dist.get_rank() == 0:
        assert lim.sent_bytes == 1_000_000 and abs(sum(slept) - 0.4) < 0.01, (lim.sent_bytes, slept)
        assert dt >= 0.39, dt
    else:  # the receiver's downlink drains as the data arrives: no wait of its own
        assert lim.recv_bytes == 1_000_000 and sum(slept) < 0.01, (lim.recv_bytes, slept)
    dist.destroy_process_group()
""")


def test_loopback_ratelimit_limits_torch_distributed_sends():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with Testbed(2, rate="20mbit", emulation="loopback-ratelimit", master_port=29631) as tb:
        assert tb.run([sys.executable, "-c", LOOPBACK_SCRIPT], env=env, timeout=120) == [0, 0]


# ------------------------------------------------------------------- launch contract (issue 19, point 5)
ALLREDUCE_SCRIPT = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(200_000) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    with open(f"out-{os.environ['LOCAL_RANK']}.txt", "w") as f:
        f.write(f"{dist.get_rank()} {dist.get_world_size()} {t[0].item()}")
    dist.destroy_process_group()
""")


def _run_cli(tmp_path, *args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "lowbw", "testbed", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)


IDLE = "WARNING: every worker succeeded, but their shaped links carried almost nothing"
TINY_SCRIPT = ("import torch.distributed as d; d.init_process_group('gloo'); d.barrier(); "
               "d.destroy_process_group()")


@pytest.mark.netns
@netns
def test_idle_links_end_with_a_loud_warning_and_busy_ones_do_not(tmp_path):
    p = _prefix()
    idle = _run_cli(tmp_path, "--workers", "2", "--prefix", p, "--", sys.executable, "-c", "pass")
    assert idle.returncode == 0 and IDLE in idle.stderr
    (tmp_path / "s.py").write_text(ALLREDUCE_SCRIPT)
    busy = _run_cli(tmp_path, "--workers", "2", "--prefix", p, "--worker-dir", "wd/w{rank}", "--",
                    sys.executable, "s.py")
    assert busy.returncode == 0, busy.stderr
    assert "WARNING" not in busy.stderr
    # every namespace resolves every worker's address: c10d's store no longer warns 2-4 times a run
    assert "hostname of the client socket cannot be retrieved" not in busy.stderr, busy.stderr
    # each worker ran in its own directory (the script path was made absolute), both wrote out-0.txt
    assert [(tmp_path / f"wd/w{r}/out-0.txt").read_text() for r in range(2)] == ["0 2 3.0", "1 2 3.0"]
    assert _ours(p) == []


@pytest.mark.netns
@netns
@pytest.mark.parametrize("case, argv, rc", [
    ("crash", ["--", sys.executable, "-c", "import sys; sys.exit(3)"], 3),
    ("hang", ["--timeout", "1", "--grace", "1", "--", sys.executable, "-c", "import time; time.sleep(60)"], 124),
    ("tiny", ["--", sys.executable, "-c", TINY_SCRIPT], 0),
])
def test_the_idle_warning_fires_only_when_the_workers_succeeded_without_talking(tmp_path, case, argv, rc):
    """A crashing, hung or tiny run (a rendezvous and one barrier: ~5 KB a link) gets no idle warning: it
    would name the wrong cause. The link report is printed all the same."""
    res = _run_cli(tmp_path, "--workers", "2", "--prefix", _prefix(), *argv)
    assert res.returncode == rc, res.stderr
    assert "WARNING" not in res.stderr, res.stderr
    assert "lowbw testbed: what crossed each worker's link in" in res.stderr
    assert "  rank 0: sent " in res.stderr and "  rank 1: sent " in res.stderr


@pytest.mark.netns
@netns
def test_the_testbed_prints_and_writes_what_crossed_each_link(tmp_path):
    (tmp_path / "s.py").write_text(ALLREDUCE_SCRIPT)
    res = _run_cli(tmp_path, "--workers", "2", "--prefix", _prefix(), "--rate", "100mbit", "--link-stats",
                   "links.json", "--worker-dir", "w{rank}", "--", sys.executable, "s.py")
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "links.json").read_text())
    assert doc["exit_codes"] == [0, 0] and doc["idle_warning"] is False and doc["emulation"] == "netns-tc"
    payload = 200_000 * 4  # the all-reduce's fp32 tensor: with 2 workers each sends and receives it once
    for r, link in enumerate(doc["links"]):
        assert link["rank"] == r and link["up_bps"] == link["down_bps"] == 1e8
        for direction, busy in (("sent_bytes", "busy_up_s"), ("received_bytes", "busy_down_s")):
            # the payload plus TCP/IP/Ethernet headers (66 of 1514 bytes a frame), ACKs and the rendezvous
            assert payload < link[direction] < 1.15 * payload, link
            # busy: the time the link's rate needs for those bytes
            assert link[busy] == pytest.approx(link[direction] * 8 / 1e8, rel=0.02), link
        line = (f"  rank {r}: sent {link['sent_bytes'] / 1e3:.3g} kB (busy {link['busy_up_s']:.3g} s), received "
                f"{link['received_bytes'] / 1e3:.3g} kB (busy {link['busy_down_s']:.3g} s) at 100 Mbit/s")
        assert line in res.stderr.splitlines(), res.stderr


def test_testbed_help_shows_defaults_and_unknown_flags_get_the_testbeds_usage(tmp_path):
    res = _run_cli(tmp_path, "--help", timeout=60)
    assert res.returncode == 0 and "(default: 100mbit = 100 Mbit/s each way)" in " ".join(res.stdout.split())
    assert "(default: 29500)" in res.stdout and "(default: 30.0)" in res.stdout
    res = _run_cli(tmp_path, "--bogus", "--", "true", timeout=60)
    assert res.returncode == 2 and res.stderr.startswith("usage: lowbw testbed ")
    assert res.stderr.strip().splitlines()[-1] == "lowbw testbed: error: unrecognized arguments: --bogus"


@pytest.mark.netns
@pytest.mark.slow
@netns
def test_launcher_torchrun_runs_one_node_per_namespace(tmp_path):
    p = _prefix()
    (tmp_path / "s.py").write_text(ALLREDUCE_SCRIPT)
    res = _run_cli(tmp_path, "--workers", "2", "--prefix", p, "--launcher", "torchrun", "--worker-dir", "w{rank}",
                   "--", "python", "s.py")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "WARNING" not in res.stderr
    assert [(tmp_path / f"w{r}/out-0.txt").read_text() for r in range(2)] == ["0 2 3.0", "1 2 3.0"]
    assert _ours(p) == []


def test_launch_contract_helpers_and_bad_arguments(tmp_path):
    argv = T.torchrun_argv(["python3", "train.py", "--lr", "1"], 3, "10.0.0.1", 1234)
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"] and argv[-3:] == ["train.py", "--lr", "1"]
    assert argv[argv.index("--nnodes") + 1] == "3" and argv[argv.index("--master-addr") + 1] == "10.0.0.1"
    assert T.torchrun_argv(["-m", "pkg.mod"], 2, "a", 1)[-2:] == ["-m", "pkg.mod"]
    with pytest.raises(ValueError, match="needs a script"):
        T.torchrun_argv(["python"], 2, "a", 1)
    assert T.worker_dir(str(tmp_path / "w{rank}"), 3) == str(tmp_path / "w3") and (tmp_path / "w3").is_dir()
    assert T.worker_dir("same", 1) == "same" and T.worker_dir(None, 0) is None
    res = _run_cli(tmp_path, "--worker-dir", "shared", "--", "true", timeout=30)
    assert res.returncode == 2 and "--worker-dir 'shared' has no {rank}" in res.stderr
    res = _run_cli(tmp_path, "--emulation", "loopback-ratelimit", "--launcher", "torchrun", "--", "python",
                   timeout=30)
    assert res.returncode == 2 and "needs a script" in res.stderr


@refused({
    "--rate 0": "--rate '0' must be a rate > 0",
    "--rate fast": "--rate 'fast'",
    "--delay bogus": "--delay 'bogus' is not a delay",
    "--rate '10 mbps'": "--rate '10 mbps' is ambiguous: tc reads 'mbps' as bytes per second (80 Mbit/s)",
    "--rate 10": "--rate '10' has no unit: tc would read it as 10 bit/s",
})
def test_testbed_cli_bad_values_one_line_before_any_work(argv, culprit, capsys):
    from lowbw.cli import main

    rc = main(["testbed", *argv, "--", sys.executable, "-c", "pass"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and culprit in err[0]


def test_testbed_cli_says_when_its_timeout_fired(capsys):
    from lowbw.cli import main

    rc = main(["testbed", "--workers", "2", "--emulation", "loopback-ratelimit", "--timeout", "1", "--grace", "1",
               "--", sys.executable, "-c", "import time; time.sleep(30)"])
    err = capsys.readouterr().err
    assert rc == 124 and "--timeout 1s fired" in err
