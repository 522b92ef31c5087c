"""The System section's recorded engineering checks (paper/measured/system.json -> the Sys macros)."""

from __future__ import annotations

import json

import pytest

from lowbw.report.catalog import SYSTEM
from lowbw.report.system import SYSTEM_RECORD, numbers


def test_the_record_gives_every_catalogued_macro():
    out = numbers()
    assert set(out) == set(SYSTEM)
    assert all(v and "[" not in v for v in out.values())
    assert out["SysCubicS"].count("--") == 1  # a range keeps its recorded digits: low--high


def test_every_check_names_its_commit():
    for check in json.loads(SYSTEM_RECORD.read_text(encoding="utf-8"))["checks"]:
        assert len(check["commit"]) == 40 and check["what"] and check["values"]


@pytest.mark.parametrize("values, err", [({"SysBbrFastS": "fast"}, "number string"),
                                         ({"SysBbrFastS": ["1", "2", "3"]}, "number string"),
                                         ({"SysNotCatalogued": "1"}, "differ")])
def test_a_bad_record_fails(tmp_path, values, err):
    rec = json.loads(SYSTEM_RECORD.read_text(encoding="utf-8"))
    rec["checks"].append({"what": "x", "commit": "0" * 40, "values": values})
    if "SysBbrFastS" in values:  # replace the recorded value rather than record it twice
        for c in rec["checks"][:-1]:
            c["values"].pop("SysBbrFastS", None)
    p = tmp_path / "system.json"
    p.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match=err):
        numbers(p)
