"""The DCGM sources against their real formats: ``dcgmi health -c -j`` as dcgmi's JSON writer
lays it out, and dcgm-exporter metrics pages with its label set."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoclusters.detector.dcgm import GPU_OPERATOR_HOST, DcgmSource, health_output, parse_health
from autoclusters.detector.dcgm_exporter import DcgmExporterSource, ExporterConfig
from autoclusters.detector.pci import GpuIndex
from autoclusters.detector.source_records import SourceStatus
from autoclusters.faults.catalog import FaultClass, Severity, load_catalog

CAT = load_catalog()

# --- dcgmi health -c -j -----------------------------------------------------------------
# dcgmi writes its JSON with JsonCpp's toStyledString (keys in order, three-space indent);
# Health::GenerateOutputFromResponse puts each entity under its group ("GPU") by id, each
# system under "Errors" with its health as "value" and its message in "overflow" lines of
# at most 54 characters (NVIDIA/DCGM dcgmi/Health.cpp, dcgmi/DcgmiOutput.cpp); the messages
# are dcgm_errors.h's.
HEALTHY = """{
   "body" : {
      "Overall Health" : {
         "value" : "Healthy"
      }
   },
   "header" : [ "Health Monitor Report" ]
}
"""

ONE_WARNING = """{
   "body" : {
      "GPU" : {
         "children" : {
            "0" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "PCIe system" : {
                           "overflow" : [
                              "Detected more than 8 PCIe replays per minute for GPU",
                              "0 : 23"
                           ],
                           "value" : "Warning"
                        }
                     }
                  }
               },
               "value" : "Warning"
            }
         }
      },
      "Overall Health" : {
         "value" : "Warning"
      }
   },
   "header" : [ "Health Monitor Report" ]
}
"""

ONE_FAILURE = """{
   "body" : {
      "GPU" : {
         "children" : {
            "2" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "Memory system" : {
                           "overflow" : [ "Detected 2 volatile double-bit ECC error(s) in GPU 2." ],
                           "value" : "Failure"
                        }
                     }
                  }
               },
               "value" : "Failure"
            }
         }
      },
      "Overall Health" : {
         "value" : "Failure"
      }
   },
   "header" : [ "Health Monitor Report" ]
}
"""

SEVERAL_GPUS = """{
   "body" : {
      "GPU" : {
         "children" : {
            "1" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "NVLINK system" : {
                           "overflow" : [ "GPU 1's NvLink link 3 is currently down" ],
                           "value" : "Failure"
                        }
                     }
                  }
               },
               "value" : "Failure"
            },
            "5" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "Memory system" : {
                           "overflow" : [
                              "GPU 5 had uncorrectable memory errors and row",
                              "remapping failed., Detected 1 volatile double-bit",
                              "ECC error(s) in GPU 5."
                           ],
                           "value" : "Failure"
                        },
                        "Thermal system" : {
                           "overflow" : [
                              "There were thermal violations totaling 12.0 seconds",
                              "for GPU 5"
                           ],
                           "value" : "Warning"
                        }
                     }
                  }
               },
               "value" : "Failure"
            },
            "7" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "InfoROM system" : {
                           "overflow" : [ "Something DCGM says that no template knows." ],
                           "value" : "Failure"
                        }
                     }
                  }
               },
               "value" : "Failure"
            }
         }
      },
      "Overall Health" : {
         "value" : "Failure"
      }
   },
   "header" : [ "Health Monitor Report" ]
}
"""


def incidents(text: str) -> list[tuple[int | None, str]]:
    return sorted(((g, c) for g, c, _ in parse_health(text)), key=str)


def test_dcgmi_healthy_output_has_no_incident() -> None:
    assert parse_health(HEALTHY) == []


def test_dcgmi_one_warning_is_named_by_dcgms_message() -> None:
    assert incidents(ONE_WARNING) == [(0, "DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION")]


def test_dcgmi_one_failure_on_one_gpu() -> None:
    (gpu, code, message), = parse_health(ONE_FAILURE)
    assert (gpu, code) == (2, "DCGM_FR_VOLATILE_DBE_DETECTED")
    assert message == "Detected 2 volatile double-bit ECC error(s) in GPU 2."


def test_dcgmi_several_gpus_each_incident_of_a_system_and_an_unknown_failure() -> None:
    """The lines of one message are read as one text, the incidents dcgmi joins with ", " are
    each their own, and a Failure no template knows is DCGM_FR_UNKNOWN, not dropped."""
    assert incidents(SEVERAL_GPUS) == [
        (1, "DCGM_FR_NVLINK_DOWN"), (5, "DCGM_FR_ROW_REMAP_FAILURE"), (5, "DCGM_FR_THERMAL_VIOLATIONS"),
        (5, "DCGM_FR_VOLATILE_DBE_DETECTED"), (7, "DCGM_FR_UNKNOWN")]


def test_the_simulated_output_has_dcgmis_layout_and_reads_back() -> None:
    text = health_output([(3, "DCGM_FR_NVLINK_DOWN", "GPU 3's NvLink link 0 is currently down")])
    assert incidents(text) == [(3, "DCGM_FR_NVLINK_DOWN")]
    assert incidents(health_output([])) == []


def fake_dcgmi(tmp_path: Path, script: str) -> Path:
    fake = tmp_path / "dcgmi"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    return fake


def test_dcgmi_is_asked_of_the_configured_hostengine(tmp_path: Path) -> None:
    args = tmp_path / "args"
    out = tmp_path / "out.json"
    out.write_text(ONE_FAILURE)
    fake = fake_dcgmi(tmp_path, f'echo "$@" > {args}\ncat {out}')
    src = DcgmSource(CAT, command=(str(fake), "health", "-c", "-j"), host=GPU_OPERATOR_HOST)
    assert src.state().status == SourceStatus.ON
    p = src.poll()
    assert args.read_text().split() == ["health", "-c", "-j", "--host", GPU_OPERATOR_HOST]
    (rec,) = p.records
    assert (rec.fault_class, rec.code, rec.subject, rec.severity) == (
        FaultClass.DCGM, "DCGM_FR_VOLATILE_DBE_DETECTED", "GPU 2", Severity.FATAL)


def test_dcgmi_that_cannot_reach_the_hostengine_is_a_read_error(tmp_path: Path) -> None:
    """dcgmi says why on stdout; the error keeps it."""
    fake = fake_dcgmi(tmp_path, 'echo "Error: unable to establish a connection to the specified host: '
                                f'{GPU_OPERATOR_HOST}"\nexit 255')
    p = DcgmSource(CAT, command=(str(fake),), host=GPU_OPERATOR_HOST).poll()
    assert not p.ok and p.records == ()
    assert "exited 255" in str(p.error) and "unable to establish a connection" in str(p.error)


def test_dcgmi_without_a_hostengine_is_off_and_without_the_binary_unavailable() -> None:
    off = DcgmSource(CAT)
    assert off.state().status == SourceStatus.OFF and "--dcgm-host" in off.state().reason
    assert off.poll().ok and off.poll().records == ()
    missing = DcgmSource(CAT, command=("no-such-dcgmi-binary",), host=GPU_OPERATOR_HOST)
    state = missing.state()
    assert state.status == SourceStatus.UNAVAILABLE and state.expected
    assert "no no-such-dcgmi-binary in the image" in state.reason
    assert missing.poll().ok  # nothing read, nothing concluded: the state says why


# --- dcgm-exporter ----------------------------------------------------------------------
BUS = ("00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0")
GPUS = GpuIndex({b: i for i, b in enumerate(BUS)})
UUIDS = ("GPU-15704b32-f531-14ce-0530-1ac21e4b68e6", "GPU-edc718f8-e593-6468-b9f9-563d508366ed",
         "GPU-0781f3bb-da15-f334-d5db-37b3f19542d0", "GPU-41cc2907-3249-5a6b-f0e4-d04063b183a9")
FIELDS = (  # dcgm-exporter's default-counters.csv, plus the ECC and NVLink lines it ships commented out
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink flow-control CRC errors."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
)


def page(values: dict[tuple[str, int], float], *, pod_labels: bool = False) -> str:
    """A page as dcgm-exporter writes it: HELP and TYPE per field, one series per GPU with its
    labels (a GPU in use by a pod gets the pod's labels too, in Kubernetes mode)."""
    lines = []
    for name, kind, help_text in FIELDS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for i, bus in enumerate(BUS):
            labels = (f'gpu="{i}",UUID="{UUIDS[i]}",pci_bus_id="{bus}",device="nvidia{i}",'
                      f'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-7",DCGM_FI_DRIVER_VERSION="550.127.05"')
            if pod_labels and i == 1:
                labels += ',container="train",namespace="ml",pod="train-0"'
            value = values.get((name, i), 1365 if name == "DCGM_FI_DEV_SM_CLOCK" else 0)
            lines.append(f"{name}{{{labels}}} {value:g}")
    return "\n".join(lines) + "\n"


class Pages:
    """The exporter's answers in turn: a page, or an error it raises."""

    def __init__(self, *answers: str | OSError) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    def __call__(self, url: str, timeout_s: float) -> str:
        self.asked.append(url)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, OSError):
            raise answer
        return answer


URL = "http://10.0.0.7:9400/metrics"


def exporter(read: Pages, gpus: GpuIndex = GPUS) -> DcgmExporterSource:
    return DcgmExporterSource(CAT, lambda: gpus, ExporterConfig(url=URL), read)


def faults(src: DcgmExporterSource) -> list[tuple[str, str, str]]:
    p = src.poll()
    assert p.ok and p.snapshot, p.error
    return sorted((str(r.fault_class), r.code, r.subject) for r in p.records)


def test_a_healthy_page_of_four_gpus_has_no_fault() -> None:
    assert faults(exporter(Pages(page({}, pod_labels=True)))) == []


def test_the_xid_gauge_is_the_kernel_logs_fault_for_that_gpu() -> None:
    """Xid 79 on the GPU at 0000:4e:00 is GPU 3's Xid 79, the record the kernel log's line makes."""
    src = exporter(Pages(page({("DCGM_FI_DEV_XID_ERRORS", 3): 79})))
    (rec,) = src.poll().records
    assert (rec.fault_class, rec.code, rec.subject, rec.severity, rec.known) == (
        FaultClass.GPU, "79", "GPU 3", Severity.FATAL, True)
    assert rec.name == CAT.entry_or_unknown(FaultClass.GPU, "79").name


def test_gauges_are_faults_by_value() -> None:
    src = exporter(Pages(page({("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0): 1, ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2): 4})))
    assert faults(src) == [("dcgm", "DCGM_FR_ROW_REMAP_FAILURE", "GPU 0"),
                           ("dcgm", "DCGM_FR_VOLATILE_DBE_DETECTED", "GPU 2")]


def test_counters_are_faults_when_they_rise_over_their_threshold_since_the_start() -> None:
    """A count the GPU had before the source started is not a fault; a rise of 100 is not yet, of
    101 is; a counter that falls (the driver reloaded) counts again from its new value."""
    replay, nvlink = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
    pages = Pages(page({(replay, 1): 5000, (nvlink, 2): 7}),
                  page({(replay, 1): 5100, (nvlink, 2): 107}),
                  page({(replay, 1): 5101, (nvlink, 2): 108}),
                  page({(replay, 1): 3, (nvlink, 2): 108}),
                  page({(replay, 1): 90, (nvlink, 2): 108}))
    src = exporter(pages)
    assert faults(src) == []
    assert faults(src) == []
    assert faults(src) == [("dcgm", "DCGM_FR_NVLINK_ERROR_THRESHOLD", "GPU 2"),
                           ("dcgm", "DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION", "GPU 1")]
    assert faults(src) == [("dcgm", "DCGM_FR_NVLINK_ERROR_THRESHOLD", "GPU 2")]
    assert faults(src) == [("dcgm", "DCGM_FR_NVLINK_ERROR_THRESHOLD", "GPU 2")]


def test_a_gpu_is_told_by_its_bus_id_or_by_dcgms_id_where_the_node_has_no_map() -> None:
    text = page({("DCGM_FI_DEV_XID_ERRORS", 1): 48})
    assert faults(exporter(Pages(text), GpuIndex({BUS[1]: 6}))) == [("gpu", "48", "GPU 6")]
    assert faults(exporter(Pages(text), GpuIndex())) == [("gpu", "48", "GPU 1")]
    # a map that lacks the bus: the kernel log's words for an unmapped GPU
    assert faults(exporter(Pages(text), GpuIndex({BUS[0]: 0}))) == [("gpu", "48", "GPU PCI:0000:0f:00")]


def test_an_exporter_that_does_not_answer_is_a_read_error_never_a_fault() -> None:
    src = exporter(Pages(ConnectionRefusedError(111, "Connection refused")))
    p = src.poll()
    assert not p.ok and p.records == ()
    assert URL in str(p.error) and "Connection refused" in str(p.error)
    broken = exporter(Pages("DCGM_FI_DEV_XID_ERRORS{gpu=\"0\" 79\n"))
    p = broken.poll()
    assert not p.ok and p.records == () and "cannot parse" in str(p.error)


def test_without_a_url_the_source_is_off() -> None:
    src = DcgmExporterSource(CAT, lambda: GPUS, ExporterConfig(), Pages(page({("DCGM_FI_DEV_XID_ERRORS", 0): 79})))
    assert src.state().status == SourceStatus.OFF and "--dcgm-exporter-url" in src.state().reason
    assert src.poll().records == ()


@pytest.fixture
def served() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback serving the page in ``body[0]``."""
    body = [page({("DCGM_FI_DEV_XID_ERRORS", 0): 94})]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = body[0].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", body
    finally:
        server.shutdown()
        server.server_close()


def test_the_page_is_fetched_over_http(served: tuple[str, list[str]]) -> None:
    url, body = served
    src = DcgmExporterSource(CAT, lambda: GPUS, ExporterConfig(url=url))
    assert faults(src) == [("gpu", "94", "GPU 0")]
    body[0] = page({})
    assert faults(src) == []  # a snapshot: the fault is gone with the value


def test_a_closed_port_is_a_read_error() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound and not listening: the connection is refused
        src = DcgmExporterSource(CAT, lambda: GPUS, ExporterConfig(url=f"http://127.0.0.1:{port}/metrics",
                                                                   timeout_s=2.0))
        p = src.poll()
    assert not p.ok and "cannot read dcgm-exporter" in str(p.error)
