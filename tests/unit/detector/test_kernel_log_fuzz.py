"""Hostile input: the parsers never raise and never invent a fault."""

from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoclusters.detector.dcgm import parse_health
from autoclusters.detector.kernel_log import KernelLogInterpreter, parse_line
from autoclusters.detector.pci import GpuIndex
from autoclusters.faults.catalog import load_catalog

GOOD = "3,10223,8123456801,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
SXID = "nvidia-nvswitch2: SXid (PCI:0000:c6:00.0): 24007, Fatal, Link 44 SOE"
INTERP = KernelLogInterpreter(load_catalog(), GpuIndex())


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_random_text_never_raises(line: str) -> None:
    p = parse_line(line)
    if p is not None:  # only a line that really has the driver's shape may parse
        assert "Xid (" in line and "): " in line


def test_truncated_lines_are_never_a_different_fault() -> None:
    for cut in range(len(GOOD) + 1):
        for line in (GOOD[:cut], GOOD[cut:]):
            p = parse_line(line)
            assert p is None or ((p.kind, p.bus_id) == ("xid", "0000:3b:00") and str(p.code) in "79")


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=300))
def test_garbled_bytes_decode_and_parse_safely(data: bytes) -> None:
    INTERP.record(data.decode("utf-8", "replace"))
    INTERP.record(GOOD[:40] + data.decode("latin-1") + GOOD[40:])


def test_seeded_mutations_of_real_lines() -> None:
    rng = random.Random(20261129)
    alphabet = "0123456789abcdefXid(): ,.;=NVRMPCIS\x00\n\t'\"<>[]{}\u202e\u0000"
    for base in (GOOD, SXID):
        for _ in range(10000):
            chars = list(base)
            for _ in range(rng.randint(1, 6)):
                op = rng.random()
                pos = rng.randrange(len(chars) + 1)
                if op < 0.4 and chars:
                    del chars[min(pos, len(chars) - 1)]
                elif op < 0.8:
                    chars.insert(pos, rng.choice(alphabet))
                elif chars:
                    chars[min(pos, len(chars) - 1)] = rng.choice(alphabet)
            rec = INTERP.record("".join(chars))
            if rec is not None:  # a mutation may still be a valid line; then it names real digits from it
                assert rec.code.isdigit() and rec.code in "".join(chars)


def test_huge_and_pathological_lines() -> None:
    assert parse_line("NVRM: Xid (" * 100000) is None
    assert parse_line("x" * 10_000_000 + GOOD) is None  # the fault is past the line limit: not read
    assert parse_line(GOOD + "A" * 10_000_000) is not None  # a long tail is cut, the fault stays
    assert parse_line("NVRM: Xid (PCI:0000:3b:00): " + "9" * 5000 + ", x") is None
    assert parse_line("NVRM: Xid (PCI:" + "0" * 5000 + ":3b:00): 79, x") is None


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=50),
                    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10),
                                                                                     children, max_size=5),
                    max_leaves=50))
def test_dcgm_parser_on_arbitrary_json(doc: object) -> None:
    try:
        found = parse_health(json.dumps(doc))
    except ValueError:
        return  # not an object: the source reports "cannot parse", never a fault
    for gpu, code, _ in found:
        assert code.startswith("DCGM_FR_") and (gpu is None or 0 <= gpu < 1000)


def test_dcgm_parser_on_deep_json() -> None:
    deep: object = "DCGM_FR_NVLINK_DOWN"
    for _ in range(200):
        deep = {"children": deep}
    assert parse_health(json.dumps(deep)) == []  # past the depth limit: not read, no crash
