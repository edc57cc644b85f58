"""Every message the detector writes reads back, through the catalog, to the same fault."""

from autoclusters.detector.conditions import message_for, reason_for
from autoclusters.detector.source_records import Record
from autoclusters.faults.catalog import FaultClass, load_catalog
from autoclusters.names import Names
from tests.conftest import known_fault

SUBJECTS = {FaultClass.GPU: "GPU 3", FaultClass.NVSWITCH: "NVSwitch", FaultClass.DCGM: "GPU 5",
            FaultClass.INTERCONNECT: "HCA mlx5_0 port 1"}


def condition_for(rec: Record, names: Names) -> dict[str, str]:
    ctype = names.interconnect_condition if rec.fault_class == FaultClass.INTERCONNECT else names.gpu_condition
    return {"type": ctype, "status": "True", "reason": reason_for(rec), "message": message_for(rec)}


def test_every_catalogued_code_reads_back_to_itself() -> None:
    cat = load_catalog()
    names = Names()
    for entry in cat.entries.values():
        rec = Record("test", entry.fault_class, entry.code, SUBJECTS[entry.fault_class], entry.severity, entry.name)
        ref = cat.fault_from_condition(condition_for(rec, names), names)
        assert ref is not None, entry
        assert (ref.fault_class, ref.code, ref.known, ref.action) == (entry.fault_class, entry.code, True,
                                                                      entry.action), entry


def test_unknown_codes_read_back_with_their_number() -> None:
    cat = load_catalog()
    names = Names(domain="crusoe.ai", prefix="Crusoe")
    for fc, code in ((FaultClass.GPU, "999"), (FaultClass.NVSWITCH, "31337"), (FaultClass.DCGM, "DCGM_FR_NEW"),
                     (FaultClass.GPU, "SOMETHING_NEW")):
        entry = cat.entry_or_unknown(fc, code)
        rec = Record("test", fc, code, SUBJECTS[fc], entry.severity, entry.name, known=False)
        ref = cat.fault_from_condition(condition_for(rec, names), names)
        assert ref is not None and (ref.fault_class, ref.code, ref.known) == (fc, code, False)


def test_spec_examples_word_for_word() -> None:
    cat = load_catalog()
    x79 = known_fault(cat, "gpu", 79)
    xid = Record("kmsg", FaultClass.GPU, "79", "GPU 3", x79.severity, x79.name)
    assert message_for(xid) == "GPU 3 reported Xid 79 (GPU has fallen off the bus)."
    sx = Record("kmsg", FaultClass.NVSWITCH, "24007", "NVSwitch", known_fault(cat, "nvswitch", 24007).severity, "x")
    assert message_for(sx) == "NVSwitch reported SXID 24007."
    dc = Record("dcgm", FaultClass.DCGM, "DCGM_FR_NVLINK_DOWN", "GPU 5", known_fault(cat, "dcgm", "DCGM_FR_NVLINK_DOWN")
                .severity, "x")
    assert (message_for(dc), reason_for(dc)) == ("GPU 5 reported DCGM_FR_NVLINK_DOWN.", "NvidiaDCGMError")
    ib = Record("infiniband", FaultClass.INTERCONNECT, "port_down", "HCA mlx5_0 port 1", xid.severity, "x")
    assert (message_for(ib), reason_for(ib)) == ("HCA mlx5_0 port 1 reported port_down.", "InterconnectError")
    nv = Record("nvml", FaultClass.GPU, "ROW_REMAP_FAILURE", "GPU 2", xid.severity, "x")
    assert (message_for(nv), reason_for(nv)) == ("GPU 2 reported ROW_REMAP_FAILURE.", "GpuError")


def test_an_unmapped_gpu_still_reads_back_and_the_health_condition_is_never_a_fault() -> None:
    from autoclusters.detector.conditions import health_condition

    cat = load_catalog()
    names = Names()
    x79 = known_fault(cat, "gpu", 79)
    rec = Record("kmsg", FaultClass.GPU, "79", "GPU PCI:0000:3b:00", x79.severity, x79.name)
    ref = cat.fault_from_condition(condition_for(rec, names), names)
    assert ref is not None and (ref.fault_class, ref.code) == (FaultClass.GPU, "79")
    degraded = health_condition({"nvml": "NVML init failed: Driver Not Loaded"}, names)
    assert degraded.status == "True"
    as_dict = {"type": degraded.type, "status": degraded.status, "reason": degraded.reason,
               "message": degraded.message}
    assert cat.fault_from_condition(as_dict, names) is None
