#!/usr/bin/env bash
# The GPU check: the detector's NVML source against the real GPU, an illegal-address CUDA
# kernel and the driver's Xid line it leaves, parsed and classified by the detector
# (docs/benchmarks/detector.md, "The GPU check"). Steps: tools/gpu_check.py.
#
#   tools/gpu-check.sh prepare           here (with the venv): put the pure-Python packages
#                                        the detector's modules need and a GPU machine may
#                                        lack (PyYAML, nvidia-ml-py) into build/gpu-check/site
#   tools/gpu-check.sh run [RESULT]      on the GPU machine (python3 3.11+, nothing to
#                                        install): writes RESULT (default
#                                        $OUT/gpu-check.txt, else build/gpu-check/gpu-check.txt)
#
# On the device machine: run(command="tools/gpu-check.sh run", carry=["build/gpu-check"]).
# It finishes within 5 minutes (each step has its own timeout, the whole run 280 s), reads
# the kernel log read-only and never writes to it, and exits 0 whatever it could not read.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
site=$root/build/gpu-check/site

prepare() {
  local py=${PYTHON:-$root/.venv/bin/python}
  rm -rf "$site" && mkdir -p "$site"
  "$py" - "$site" <<'PY'
import os, shutil, sys
import pynvml, yaml
site = sys.argv[1]
# PyYAML's C extension is built for this interpreter: left out, yaml falls back to pure Python.
shutil.copytree(os.path.dirname(yaml.__file__), os.path.join(site, "yaml"),
                ignore=shutil.ignore_patterns("*.so", "__pycache__"))
shutil.copy(pynvml.__file__, site)
print(f"prepared {site}: yaml {yaml.__version__} (pure Python), pynvml from nvidia-ml-py")
PY
}

run() {
  local result=${1:-${OUT:+$OUT/gpu-check.txt}}
  result=${result:-$root/build/gpu-check/gpu-check.txt}
  mkdir -p "$(dirname "$result")"
  [ -d "$site" ] || echo "note: no $site (tools/gpu-check.sh prepare): the machine's own packages only"
  timeout -k 10 280 python3 "$root/tools/gpu_check.py" all 2>&1 | tee "$result"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && echo "the GPU check ran past 280 s and was stopped" | tee -a "$result"
  echo "results: $result"
  return "$rc"
}

case ${1:-run} in
prepare) prepare ;;
run) shift || true; run "$@" ;;
*) echo "usage: tools/gpu-check.sh prepare | run [RESULT]" >&2; exit 2 ;;
esac
