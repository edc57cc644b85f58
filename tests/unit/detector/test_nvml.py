"""The NVML source through NVIDIA's real ``pynvml``, against the stand-in ``libnvidia-ml.so.1``
(tests/nvml_stub: compiled here, loaded the way the driver's library is), and the library
search, the state and the inventory around it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autoclusters.deploy.nvml_reach import DEFAULT_SEARCH, LIBRARY, LOADER
from autoclusters.detector.node import NodePaths, advertises_gpus, nvml_source
from autoclusters.detector.nvml import NO_BINDINGS, TURNED_OFF, NvmlSource
from autoclusters.detector.nvml_library import candidates, preload
from autoclusters.detector.source_records import SourceStatus
from autoclusters.faults.catalog import load_catalog
from tests.nvml_stub import REPO, STATE_ENV, State, build, gpus, run_python
from tests.unit.fakeapi import FakeApi

CAT = load_catalog()
DRIVER_DIR = "run/nvidia/driver/usr/lib/x86_64-linux-gnu"  # the GPU Operator's driver root, Ubuntu layout


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("nvml-stub"))


def host_with_driver_root(tmp: Path, stub: Path) -> Path:
    """A host root whose only libnvidia-ml.so.1 is in the GPU Operator's driver root."""
    root = tmp / "host"
    (root / DRIVER_DIR).mkdir(parents=True)
    (root / DRIVER_DIR / LIBRARY).write_bytes(stub.read_bytes())
    return root


# --- finding the library ---------------------------------------------------------------
def test_a_library_loaded_by_path_is_what_pynvml_finds_by_soname(tmp_path: Path, stub: Path) -> None:
    """glibc answers pynvml's CDLL("libnvidia-ml.so.1") with the object preloaded from a
    directory the loader does not search; without the preload pynvml finds nothing."""
    root = host_with_driver_root(tmp_path, stub)
    state = tmp_path / "state"
    State(gpus(2), driver="550.90.07").write(state)
    out = run_python(f"""
import json, pynvml
from autoclusters.detector.nvml_library import preload
try:
    pynvml.nvmlInit()
    before = "loaded"
except pynvml.NVMLError as e:
    before = e.value
found = preload(("/run/nvidia/driver", "/"), {str(root)!r})
pynvml.nvmlInit()
print(json.dumps({{"before": before, "found": found.path, "driver": pynvml.nvmlSystemGetDriverVersion(),
                   "count": pynvml.nvmlDeviceGetCount()}}))
""", state)
    res = json.loads(out)
    assert res == {"before": 12, "found": str(root / DRIVER_DIR / LIBRARY), "driver": "550.90.07", "count": 2}


def test_the_search_order_is_the_setting_s_order(tmp_path: Path) -> None:
    root = tmp_path / "host"
    for d in ("run/nvidia/driver/usr/lib64", "usr/lib/aarch64-linux-gnu"):
        (root / d).mkdir(parents=True)
        (root / d / LIBRARY).write_bytes(b"")
    loaded: list[str] = []

    def dlopen(path: str) -> object:
        loaded.append(path)
        if path == LIBRARY:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")
        return object()

    f = preload(DEFAULT_SEARCH, str(root), dlopen)
    assert f.path == str(root / "run/nvidia/driver/usr/lib64" / LIBRARY)
    assert loaded == [LIBRARY, f.path]  # the loader first, then the first file that exists
    loaded.clear()
    f = preload(("/", "/run/nvidia/driver"), str(root), dlopen)
    assert f.path == str(root / "usr/lib/aarch64-linux-gnu" / LIBRARY) and loaded == [f.path]
    assert preload((LOADER, "/"), str(root), lambda p: object()).path == LOADER  # injected by the runtime
    # every usual directory of each root, in order
    assert candidates(("/run/nvidia/driver",), "/host")[:3] == [
        f"/host/run/nvidia/driver/usr/lib/x86_64-linux-gnu/{LIBRARY}",
        f"/host/run/nvidia/driver/usr/lib/aarch64-linux-gnu/{LIBRARY}", f"/host/run/nvidia/driver/usr/lib64/{LIBRARY}"]
    assert candidates(("/",), "/")[0] == f"/usr/lib/x86_64-linux-gnu/{LIBRARY}"


def test_an_absolute_symlink_is_followed_inside_the_host_root(tmp_path: Path) -> None:
    root = tmp_path / "host"
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libnvidia-ml.so.550.90.07").write_bytes(b"")
    (lib / LIBRARY).symlink_to("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.90.07")  # dangling in here
    loaded: list[str] = []

    def dlopen(path: str) -> object:
        loaded.append(path)
        return object()

    f = preload(("/",), str(root), dlopen)
    assert f.path == str(lib / LIBRARY) and loaded == [str(lib / "libnvidia-ml.so.550.90.07")]


def test_nothing_found_names_every_place_searched(tmp_path: Path) -> None:
    def dlopen(path: str) -> object:
        raise OSError(f"{path}: cannot open shared object file")

    f = preload(DEFAULT_SEARCH, str(tmp_path), dlopen)
    assert f.path is None
    text = f.describe()
    assert text.startswith(f"no {LIBRARY} in reach: tried the loader's path, {tmp_path}/run/nvidia/driver, "
                           f"{tmp_path} (each root in usr/lib/x86_64-linux-gnu"), text


# --- the source through the real pynvml ----------------------------------------------
POLLS = """
import json
from autoclusters.detector.nvml import NvmlSource, load_library
from autoclusters.faults.catalog import load_catalog
from tests.nvml_stub import State, gpus
state_path, root = {state!r}, {root!r}
lib, found = load_library(("/run/nvidia/driver",), root)
src = NvmlSource(lib, load_catalog(), expect_gpus=True, found=found)
def codes(p):
    return {{"ok": p.ok, "snapshot": p.snapshot, "error": p.error,
             "codes": sorted([r.code, r.subject, r.detail] for r in p.records)}}
"""


def polls(tmp_path: Path, stub: Path, body: str) -> Any:
    """``body`` after ``POLLS`` (``src``: the source; ``State``/``gpus`` to change the GPUs),
    in a fresh interpreter; returns what it prints as JSON."""
    root = host_with_driver_root(tmp_path, stub)
    state = tmp_path / "state"
    return json.loads(run_python(POLLS.format(state=str(state), root=str(root)) + body, state))


def test_faults_through_pynvml(tmp_path: Path, stub: Path) -> None:
    res = polls(tmp_path, stub, """
st = State(gpus(4, links="1,1,1,1"))
st.write(state_path)
out = [codes(src.poll()), src.gpu_index().index_of("0000:20:00")]
st.gpus[0].ecc_volatile = "3"
st.gpus[1].remap = "0,2,0,1"
st.gpus[2].remap = "0,1,1,0"
st.gpus[3].links = "1,1,0,1"
st.write(state_path)
out.append(codes(src.poll()))
st.gpus[2].lost = True
st.gpus[2].retired_pending = "1"
st.write(state_path)
out.append(codes(src.poll()))
st = State(gpus(4, links="1,1,1,1"))  # all healthy again: a snapshot clears every fault
st.write(state_path)
out.append(codes(src.poll()))
print(json.dumps(out))
""")
    healthy, index, faults, lost, recovered = res
    assert healthy == {"ok": True, "snapshot": True, "error": None, "codes": []}
    assert index == 1  # the kernel log's PCI -> index map comes from NVML
    assert faults["codes"] == [["NVLINK_DOWN", "GPU 3", "links [2] not active"],
                               ["ROW_REMAP_FAILURE", "GPU 1", ""], ["ROW_REMAP_PENDING", "GPU 2", ""],
                               ["VOLATILE_UNCORRECTABLE_ECC", "GPU 0", "3 uncorrected ECC errors"]]
    assert lost["codes"] == [["GPU_LOST", "GPU 2", ""], ["NVLINK_DOWN", "GPU 3", "links [2] not active"],
                             ["ROW_REMAP_FAILURE", "GPU 1", ""],
                             ["VOLATILE_UNCORRECTABLE_ECC", "GPU 0", "3 uncorrected ECC errors"]]
    assert recovered == healthy


def test_retired_pages_and_unsupported_queries(tmp_path: Path, stub: Path) -> None:
    """A GPU without remapped rows (pre-Ampere) or NVLink (PCIe) answers Not Supported: no fault."""
    res = polls(tmp_path, stub, """
st = State(gpus(2, remap="-", ecc_volatile="-"))
st.gpus[1].retired_pending = "1"
st.write(state_path)
print(json.dumps(codes(src.poll())))
""")
    assert res == {"ok": True, "snapshot": True, "error": None, "codes": [["RETIRED_PAGES_PENDING", "GPU 1", ""]]}


def test_an_nvml_error_is_the_source_s_error_not_a_fault(tmp_path: Path, stub: Path) -> None:
    res = polls(tmp_path, stub, """
st = State(gpus(2))
st.write(state_path)
out = [codes(src.poll())]
st.count_error = 999
st.write(state_path)
out.append(codes(src.poll()))
print(json.dumps(out))
""")
    assert res[0]["ok"] and res[1] == {"ok": False, "snapshot": False, "error": "NVML query failed: Unknown Error",
                                       "codes": []}


# --- the state --------------------------------------------------------------------------
STATE = """
import json
from autoclusters.detector.nvml import NvmlSource, load_library
from autoclusters.faults.catalog import load_catalog
lib, found = load_library({search!r}, {root!r})
src = NvmlSource(lib, load_catalog(), expect_gpus={expect}, found=found)
s = src.state()
p = src.poll()
print(json.dumps({{"status": str(s.status), "reason": s.reason, "expected": s.expected, "error": p.error}}))
"""


def state_of(tmp_path: Path, stub: Path, st: State, *, expect: bool, search: tuple[str, ...] = ("/run/nvidia/driver",),
             ld_path: Path | None = None) -> dict[str, Any]:
    root = host_with_driver_root(tmp_path, stub)
    path = tmp_path / "state"
    st.write(path)
    return json.loads(run_python(STATE.format(search=search, root=str(root), expect=expect), path,
                                 ld_path=ld_path))


def test_state_on(tmp_path: Path, stub: Path) -> None:
    assert state_of(tmp_path, stub, State(gpus(1)), expect=True) == {
        "status": "on", "reason": "", "expected": True, "error": None}


def test_state_unavailable_names_what_is_missing(tmp_path: Path, stub: Path) -> None:
    # no library where the search looks (only under the driver root, which is not searched)
    res = state_of(tmp_path, stub, State(gpus(1)), expect=True, search=("/",))
    assert res["status"] == "unavailable" and res["expected"] is True and res["error"] is None
    assert res["reason"].startswith(f"no {LIBRARY} in reach: tried {tmp_path}/host (each root in "), res
    # the library is there but no driver is loaded: on a GPU node also the source's error
    gpu_node = state_of(tmp_path / "a", stub, State(gpus(1), init_error=9), expect=True)
    assert gpu_node == {"status": "unavailable", "reason": "NVML init failed: Driver Not Loaded", "expected": True,
                        "error": "NVML init failed: Driver Not Loaded"}
    plain = state_of(tmp_path / "b", stub, State(init_error=9), expect=False)
    assert plain == {"status": "unavailable", "reason": "NVML init failed: Driver Not Loaded", "expected": False,
                     "error": None}


def test_a_driver_root_that_comes_up_later_is_found_at_a_later_poll(tmp_path: Path, stub: Path) -> None:
    """The GPU Operator's driver container may start after the detector: until NVML answers,
    every poll searches again; the GPUs become expected once the driver lists them."""
    root, proc, state = tmp_path / "host", tmp_path / "proc-gpus", tmp_path / "state"
    root.mkdir()
    State(gpus(1)).write(state)
    res = json.loads(run_python(f"""
import json, pathlib, shutil
from autoclusters.detector.node import NodePaths, nvml_source
from autoclusters.faults.catalog import load_catalog
paths = NodePaths(nvidia_proc={str(proc)!r}, nvml_search=("/run/nvidia/driver",), host_root={str(root)!r})
src = nvml_source(load_catalog(), paths, advertised=False)
def now():  # a poll, then the state as of that poll
    ok = src.poll().ok
    s = src.state()
    return [str(s.status), s.expected, ok]
out = [now()]
pathlib.Path({str(proc / "0000:10:00.0")!r}).mkdir(parents=True)  # the driver loaded ...
lib = pathlib.Path({str(root / DRIVER_DIR)!r})
lib.mkdir(parents=True)
shutil.copy({str(stub)!r}, lib / {LIBRARY!r})  # ... and its root mounted
out.append(now())
print(json.dumps(out))
""", state))
    assert res == [["unavailable", False, True], ["on", True, True]]


def test_state_from_the_loader_s_path(tmp_path: Path, stub: Path) -> None:
    """What the NVIDIA container runtime injects is on the loader's path: ``loader`` finds it."""
    res = state_of(tmp_path, stub, State(gpus(1)), expect=False, search=(LOADER,), ld_path=stub.parent)
    assert res["status"] == "on", res


def test_state_off_and_without_bindings() -> None:
    off = NvmlSource(None, CAT, expect_gpus=True, enabled=False)
    assert (off.state().status, off.state().reason, off.state().expected) == (SourceStatus.OFF, TURNED_OFF, True)
    assert off.poll().ok and off.poll().records == ()
    bare = NvmlSource(None, CAT, expect_gpus=False)
    assert (bare.state().status, bare.state().reason) == (SourceStatus.UNAVAILABLE, NO_BINDINGS)


def test_the_node_s_source_is_expected_where_the_driver_lists_gpus_or_the_node_advertises_them(
        tmp_path: Path) -> None:
    proc = tmp_path / "gpus"
    paths = NodePaths(nvidia_proc=str(proc), nvml_search=("/",), host_root=str(tmp_path / "empty"))
    assert nvml_source(CAT, paths, advertised=False).state().expected is False
    assert nvml_source(CAT, paths, advertised=True).state().expected is True
    (proc / "0000:3b:00.0").mkdir(parents=True)
    assert nvml_source(CAT, paths, advertised=False).state().expected is True
    off = nvml_source(CAT, NodePaths(use_nvml=False), advertised=False).state()
    assert off.status == SourceStatus.OFF
    api = FakeApi()
    try:
        kube = api.kube()
        nodes = (("gpu", {"nvidia.com/gpu": "8"}), ("cpu", {"cpu": "4"}), ("zero", {"nvidia.com/gpu": "0"}))
        for name, capacity in nodes:
            api.put(f"/api/v1/nodes/{name}", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                                             "status": {"capacity": capacity}})
        assert [advertises_gpus(kube, n) for n in ("gpu", "cpu", "zero", "absent")] == [True, False, False, False]
    finally:
        api.close()


# --- the inventory ------------------------------------------------------------------------
def test_inventory_command_prints_what_nvml_read(tmp_path: Path, stub: Path) -> None:
    root = host_with_driver_root(tmp_path, stub)
    state = tmp_path / "state"
    st = State(gpus(2, links="1,0"), driver="550.90.07", nvml="12.550.90.07")
    st.gpus[0].ecc_volatile, st.gpus[0].ecc_aggregate, st.gpus[0].remap = "1", "4", "3,1,1,0"
    st.gpus[1].remap = "-"
    st.write(state)
    env = {**os.environ, STATE_ENV: str(state), "PYTHONPATH": str(REPO)}
    cli = [sys.executable, "-m", "autoclusters.cli.main", "detector", "inventory", "--host-root", str(root),
           "--nvidia-proc", str(tmp_path / "no-proc")]
    res = subprocess.run([*cli, "-o", "json"], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    inv = data["inventory"]
    assert data["state"] == {"status": "on", "reason": "", "expected": False}
    assert data["library"] == f"{LIBRARY} from {root / DRIVER_DIR / LIBRARY}"
    assert (inv["driverVersion"], inv["nvmlVersion"], inv["gpuCount"]) == ("550.90.07", "12.550.90.07", 2)
    g0, g1 = inv["gpus"]
    assert g0 == {"index": 0, "pciBusId": "00000000:10:00.0", "uuid": "GPU-00000000-0000-0000-0000-000000000000",
                  "name": "NVIDIA H100 80GB HBM3", "eccUncorrected": {"volatile": 1, "aggregate": 4},
                  "remappedRows": {"correctable": 3, "uncorrectable": 1, "pending": 1, "failure": 0},
                  "retiredPagesPending": False, "nvlink": ["active", "inactive"]}
    assert g1["remappedRows"] is None and inv["unreadable"] == ["GPU 1 remapped rows: Not Supported"]
    assert sorted(r["code"] for r in data["poll"]["records"]) == ["ROW_REMAP_PENDING", "VOLATILE_UNCORRECTABLE_ECC"]
    text = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=60)
    assert text.returncode == 0, text.stderr
    assert "driver version: 550.90.07" in text.stdout and "NVLink: 1/2 active (active, inactive)" in text.stdout
    assert "unreadable: GPU 1 remapped rows: Not Supported" in text.stdout
    # no library in reach: the command says where it looked and exits 1
    missing = subprocess.run([*cli[:-4], "--nvml-search", "/", "--host-root", str(tmp_path / "empty")],
                             capture_output=True, text=True, env=env, timeout=60)
    assert missing.returncode == 1 and "NVML source: unavailable (no libnvidia-ml.so.1 in reach" in missing.stdout


def test_the_node_agent_always_has_the_nvml_source_and_logs_its_state(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``build_agent`` registers NVML whatever its state, so the state can be reported."""
    from autoclusters.clock import FakeClock
    from autoclusters.detector.agent_config import AgentConfig
    from autoclusters.detector.node import build_agent
    from autoclusters.names import Names

    api = FakeApi()
    try:
        api.put("/api/v1/nodes/n1", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                                     "status": {"capacity": {"nvidia.com/gpu": "8"}}})
        for use_nvml, status in ((False, SourceStatus.OFF), (True, SourceStatus.UNAVAILABLE)):
            paths = NodePaths(kernel_log_file=str(tmp_path / "kmsg"), infiniband=str(tmp_path / "no-ib"),
                              nvidia_proc=str(tmp_path / "no-proc"), dcgm_command=("no-such-dcgmi",),
                              use_nvml=use_nvml, nvml_search=("/",), host_root=str(tmp_path / "empty"))
            caplog.clear()
            with caplog.at_level("INFO", logger="autoclusters.detector.node"):
                agent, _, _ = build_agent("n1", api.kube(), FakeClock(), CAT, Names(), AgentConfig(), paths)
            (nvml,) = [s.source for s in agent.sources if s.source.name == "nvml"]
            state = nvml.state()
            assert state.status == status and state.expected is True  # the node advertises nvidia.com/gpu
            assert f"NVML source: {status}" in caplog.text
    finally:
        api.close()
