"""Rates and delays carry an explicit, unambiguous unit wherever they are read (issue 32, item 1): the one
parser (lowbw.net.units) behind the testbed's flags, run configs, traces and workflow configs."""

from __future__ import annotations

import sys

import pytest

from lowbw.net.units import check_config_tree, format_rate, keyed_number, parse_delay, parse_rate, parse_seconds


@pytest.mark.parametrize("text, bps", [
    ("10mbit", 1e7), ("10Mbit", 1e7), ("10 mbit", 1e7), ("10 Mbit/s", 1e7), ("1gbit", 1e9), ("1Gbit/s", 1e9),
    ("100kbit", 1e5), ("100Kbit", 1e5), ("500bit", 500.0), ("1e3kbit", 1e6), ("0.5gbit", 5e8), ("2tbit", 2e12),
    ("10MB/s", 8e7), ("10 kB/s", 8e4), ("10KB/s", 8e4), ("1GB/s", 8e9), ("100B/s", 800.0),
])
def test_accepted_rate_spellings(text, bps):
    assert parse_rate(text) == pytest.approx(bps)


# every bad rate a user could write, with the one line it gets (how tc would read it, what to write instead)
BAD_RATES = {
    "10 mbps": "--rate '10 mbps' is ambiguous: tc reads 'mbps' as bytes per second (80 Mbit/s); write 10mbit for "
               "10 Mbit/s, or 10MB/s if you mean bytes",
    "10mbps": "--rate '10mbps' is ambiguous: tc reads 'mbps' as bytes per second (80 Mbit/s); write 10mbit for "
              "10 Mbit/s, or 10MB/s if you mean bytes",
    "10Mbps": "--rate '10Mbps' is ambiguous: tc reads 'Mbps' as bytes per second (80 Mbit/s); write 10mbit for "
              "10 Mbit/s, or 10MB/s if you mean bytes",
    "10MBps": "--rate '10MBps' is ambiguous: tc reads 'MBps' as bytes per second (80 Mbit/s); write 10mbit for "
              "10 Mbit/s, or 10MB/s if you mean bytes",
    "1kbps": "--rate '1kbps' is ambiguous: tc reads 'kbps' as bytes per second (8 kbit/s); write 1kbit for "
             "1 kbit/s, or 1KB/s if you mean bytes",
    "1gbps": "--rate '1gbps' is ambiguous: tc reads 'gbps' as bytes per second (8 Gbit/s); write 1gbit for "
             "1 Gbit/s, or 1GB/s if you mean bytes",
    "100bps": "--rate '100bps' is ambiguous: tc reads 'bps' as bytes per second (800 bit/s); write 100bit for "
              "100 bit/s, or 100B/s if you mean bytes",
    "10 Mb/s": "--rate '10 Mb/s' is ambiguous (bits or bytes?): write 10mbit for 10 Mbit/s, or 10MB/s if you mean "
               "bytes",
    "10mb/s": "--rate '10mb/s' is ambiguous (bits or bytes?): write 10mbit for 10 Mbit/s, or 10MB/s if you mean bytes",
    "10": "--rate '10' has no unit: tc would read it as 10 bit/s; write 10mbit for 10 Mbit/s (or kbit, gbit)",
    "2.5": "--rate '2.5' has no unit: tc would read it as 2.5 bit/s; write 2.5mbit for 2.5 Mbit/s (or kbit, gbit)",
    "0": "--rate '0' must be a rate > 0 (with its unit: e.g. 100mbit, 1gbit, 500kbit, 10MB/s)",
    "0mbit": "--rate '0mbit' must be a rate > 0 (with its unit: e.g. 100mbit, 1gbit, 500kbit, 10MB/s)",
    "-1mbit": "--rate '-1mbit' must be a rate > 0 (with its unit: e.g. 100mbit, 1gbit, 500kbit, 10MB/s)",
    "fast": "--rate 'fast' is not a rate: write e.g. 100mbit, 1gbit, 500kbit, 10MB/s",
    "": "--rate '' is not a rate: write e.g. 100mbit, 1gbit, 500kbit, 10MB/s",
    "10 parsecs": "--rate '10 parsecs': unknown rate unit 'parsecs'; write e.g. 100mbit, 1gbit, 500kbit, 10MB/s",
    "5ms": "--rate '5ms' is a time, not a rate: write e.g. 100mbit, 1gbit, 500kbit, 10MB/s",
}


@pytest.mark.parametrize("text", list(BAD_RATES))
def test_ambiguous_or_unitless_rates_are_refused_in_one_line(text):
    with pytest.raises(ValueError) as e:
        parse_rate(text, "--rate")
    assert str(e.value) == BAD_RATES[text]


def test_numbers_from_code_are_base_units_and_text_needs_a_unit():
    assert parse_rate(1e8) == 1e8 and parse_delay(0.02) == 0.02 and parse_delay(None) == 0.0
    assert parse_delay("0") == 0.0  # no delay is unambiguous
    with pytest.raises(ValueError, match="must be a rate > 0"):
        parse_rate(0)
    with pytest.raises(ValueError, match="not a rate"):
        parse_rate(True)
    assert format_rate(8e7) == "80 Mbit/s" and format_rate(1e9) == "1 Gbit/s"
    assert parse_seconds("30") == 30.0 and parse_seconds("500ms") == 0.5  # run times: seconds by default


@pytest.mark.parametrize("text, s", [("20ms", 0.02), ("20 ms", 0.02), ("500us", 5e-4), ("0.2s", 0.2), ("1 sec", 1.0),
                                     ("5msec", 5e-3), ("100usec", 1e-4), ("0", 0.0)])
def test_accepted_delay_spellings(text, s):
    assert parse_delay(text) == pytest.approx(s)


BAD_DELAYS = {
    "20": "--delay '20' has no unit: tc would read it as 20 microseconds; write 20ms, 20us or 20s",
    "0.5": "--delay '0.5' has no unit: tc would read it as 0.5 microseconds; write 0.5ms, 0.5us or 0.5s",
    "-5ms": "--delay '-5ms' must be >= 0",
    "bogus": "--delay 'bogus' is not a delay: write e.g. 20ms, 500us, 0.2s",
    "5min": "--delay '5min' has an unknown delay unit 'min': write e.g. 20ms, 500us, 0.2s",
    "10mbit": "--delay '10mbit' is a rate, not a delay: write e.g. 20ms, 500us, 0.2s",
}


@pytest.mark.parametrize("text", list(BAD_DELAYS))
def test_unitless_or_bad_delays_are_refused_in_one_line(text):
    with pytest.raises(ValueError) as e:
        parse_delay(text, "--delay")
    assert str(e.value) == BAD_DELAYS[text]


# ------------------------------------------------------------------------------------ the testbed's flags
CLI_BAD = [
    (["--rate", "10 mbps"], BAD_RATES["10 mbps"]),
    (["--rate", "10mbps"], BAD_RATES["10mbps"]),
    (["--rate", "10Mbps"], BAD_RATES["10Mbps"]),
    (["--rate", "10"], BAD_RATES["10"]),
    (["--rates", "1gbit,10mbps"], BAD_RATES["10mbps"]),
    (["--up", "2Mbps"], "--up '2Mbps' is ambiguous: tc reads 'Mbps' as bytes per second (16 Mbit/s); write 2mbit "
                        "for 2 Mbit/s, or 2MB/s if you mean bytes"),
    (["--down", "5"], "--down '5' has no unit: tc would read it as 5 bit/s; write 5mbit for 5 Mbit/s (or kbit, gbit)"),
    (["--delay", "20"], BAD_DELAYS["20"]),
    (["--jitter", "1"], "--jitter '1' has no unit: tc would read it as 1 microsecond; write 1ms, 1us or 1s"),
    (["--down-delay", "3"], "--down-delay '3' has no unit: tc would read it as 3 microseconds; write 3ms, 3us or 3s"),
    (["--queue", "100"], "--queue '100' has no unit: tc would read it as 100 microseconds; write 100ms, 100us or "
                         "100s"),
    (["--schedule", "0:100mbit,10:10mbps"], "schedule rate '10mbps' is ambiguous: tc reads 'mbps' as bytes per "
                                            "second (80 Mbit/s); write 10mbit for 10 Mbit/s, or 10MB/s if you mean "
                                            "bytes"),
]


@pytest.mark.parametrize("argv, line", CLI_BAD, ids=[" ".join(a) for a, _ in CLI_BAD])
def test_testbed_flags_refuse_ambiguous_rates_before_any_work(argv, line, capsys):
    from lowbw.cli import main

    rc = main(["testbed", "--emulation", "loopback-ratelimit", *argv, "--", sys.executable, "-c", "pass"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"lowbw testbed: {line}"]


# ---------------------------------------------------------------------------------------------- run configs
RUN_BAD = [
    ("bandwidth_mbit", "10mbps", "bandwidth_mbit: '10mbps' is ambiguous (tc reads 'mbps' as bytes per second): "
                                 "write bandwidth_mbit: 10 for 10 Mbit/s, or bandwidth_mbit: 80 for 10 MB/s"),
    ("bandwidth_mbit", "10 Mbps", "bandwidth_mbit: '10 Mbps' is ambiguous (tc reads 'Mbps' as bytes per second): "
                                  "write bandwidth_mbit: 10 for 10 Mbit/s, or bandwidth_mbit: 80 for 10 MB/s"),
    ("bandwidth_mbit", "1gbit", "bandwidth_mbit: '1gbit' is not in the unit of bandwidth_mbit (Mbit/s): write "
                                "bandwidth_mbit: 1000"),
    ("bandwidth_mbit", "10MB/s", "bandwidth_mbit: '10MB/s' is not in the unit of bandwidth_mbit (Mbit/s): write "
                                 "bandwidth_mbit: 80"),
    ("bandwidth_mbit", "5ms", "bandwidth_mbit: '5ms' is a time, not a rate: write e.g. 100mbit, 1gbit, 500kbit, "
                              "10MB/s"),
    ("latency_ms", "0.2s", "latency_ms: '0.2s' is not in the unit of latency_ms (ms): write latency_ms: 200"),
    ("latency_ms", "10mbit", "latency_ms: '10mbit' is a rate, not a delay: write e.g. 20ms, 500us, 0.2s"),
    ("worker_bandwidth_mbit", ["10mbit", "10mbps"], "worker_bandwidth_mbit: '10mbps' is ambiguous (tc reads 'mbps' "
                                                    "as bytes per second): write worker_bandwidth_mbit: 10 for "
                                                    "10 Mbit/s, or worker_bandwidth_mbit: 80 for 10 MB/s"),
]


@pytest.mark.parametrize("key, value, line", RUN_BAD, ids=[f"{k}={v}" for k, v, _ in RUN_BAD])
def test_run_config_rate_and_delay_strings_must_agree_with_the_key(key, value, line):
    from lowbw.train.config import ConfigError, RunConfig

    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict({key: value, "workers": 2}, check_registries=False)
    assert str(e.value) == line


def test_run_config_numbers_and_strings_in_the_keys_own_unit_are_accepted():
    from lowbw.train.config import RunConfig

    c = RunConfig.from_dict({"bandwidth_mbit": "10mbit", "latency_ms": "0.5ms", "workers": 2,
                             "worker_uplink_mbit": ["2mbit", 3]}, check_registries=False)
    assert (c.bandwidth_mbit, c.latency_ms, c.worker_uplink_mbit) == (10.0, 0.5, [2.0, 3.0])
    assert RunConfig.from_dict({"bandwidth_mbit": 100, "latency_ms": "1e-3"}, check_registries=False).latency_ms == 1e-3


def test_keyed_numbers_and_workflow_configs():
    assert keyed_number("rates_mbit", "100") == 100.0 and keyed_number("name", "10mbps") == "10mbps"
    good = {"bench": {"collectives": {"rates_mbit": [10, 100], "delay_ms": [0, 5]}},
            "experiments": {"e1_x": {"base": {"bandwidth_mbit": 10}, "grid": {"latency_ms": [0, "5ms"]}}}}
    check_config_tree(good)
    for bad, line in [
        ({"bench": {"collectives": {"rates_mbit": [10, "100mbps"]}}},
         "bench.collectives.rates_mbit: '100mbps' is ambiguous (tc reads 'mbps' as bytes per second): write "
         "rates_mbit: 100 for 100 Mbit/s, or rates_mbit: 800 for 100 MB/s"),
        ({"experiments": {"e1_x": {"grid": {"latency_ms": [0, "1s"]}}}},
         "experiments.e1_x.grid.latency_ms: '1s' is not in the unit of latency_ms (ms): write latency_ms: 1000"),
        ({"report": {"focus_mbit": "1gbit"}},
         "report.focus_mbit: '1gbit' is not in the unit of focus_mbit (Mbit/s): write focus_mbit: 1000"),
    ]:
        with pytest.raises(ValueError) as e:
            check_config_tree(bad)
        assert str(e.value) == line


# ------------------------------------------------------------------------------------------------ traces
@pytest.mark.parametrize("text, line", [
    ("t_s,worker,mbit\n0,*,10mbps\n", "trace line 2: mbit '10mbps' is ambiguous (tc reads 'mbps' as bytes per "
                                     "second): write 10 for 10 Mbit/s, or 80 for 10 MB/s"),
    ("t_s,worker,mbit\n0,*,1gbit\n", "trace line 2: mbit '1gbit' is not in the unit of mbit (Mbit/s): write 1000"),
    ("t_s,worker,mbit,delay_ms\n0,*,10,0.1s\n", "trace line 2: delay_ms '0.1s' is not in the unit of delay_ms (ms): "
                                                "write 100"),
    ("t_s,worker,mbps\n0,*,10\n", "trace line 1: column 'mbps' is ambiguous (tc reads mbps as megabytes per "
                                  "second): name it mbit and give the values in Mbit/s"),
    ("t_s,worker,rate\n0,*,10\n", "trace line 1: header 't_s,worker,rate' is not t_s,worker,mbit[,delay_ms] (the "
                                  "values are read in those units)"),
])
def test_traces_refuse_values_in_other_units(text, line):
    from lowbw.net.trace import parse_csv

    with pytest.raises(ValueError) as e:
        parse_csv(text, workers=2)
    assert str(e.value) == line
    assert parse_csv("t_s,worker,mbit\n0,*,10mbit\n", 2).steps[0].bps == 1e7  # the column's own unit is fine


def test_every_benchmark_rate_flag_reads_units_as_the_testbed_does(capsys):
    """One reading of rates on every command: units accepted, bare numbers and tc's byte units refused."""
    import argparse

    from lowbw.bench import collectives, e2e, e2e_probe, hooks
    from lowbw.net.units import rate_mbit_arg

    parse = rate_mbit_arg("--rate")
    assert parse("10mbit") == 10.0 and parse("1gbit") == 1000.0 and parse("500kbit") == 0.5
    for bad in ("100", "100mbps", "100Mbps", "10ms"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"--rate '{bad}'"):
            parse(bad)
    for main, flag in ((collectives.main, "--rates"), (hooks.main, "--rates"), (e2e.main, "--rates"),
                       (e2e_probe.main, "--rate")):
        with pytest.raises(SystemExit) as ei:
            main([flag, "100mbps"])
        assert ei.value.code == 2
        assert f"{flag} '100mbps' is ambiguous" in capsys.readouterr().err
