#!/usr/bin/env python3
"""Checks the ABI versions of the CUDA entry-point table in driver_api.hpp.

cuGetProcAddress(name, request) hands back the newest ABI variant of `name` whose version is
<= request. For every row X(name, pfn_version, request_version, required) this verifies that
the newest PFN_<name>_v<N> in cudaTypedefs.h (or cudaProfilerTypedefs.h) with N <= request_version is pfn_version, i.e.
that the driver returns exactly the prototype the table calls through. (driver_api.cpp
static_asserts separately that each PFN type equals cuda.h's prototype.)

Usage: check_entry_points.py [CUDA_INCLUDE_DIR]   (default /usr/local/cuda/include)
"""
import pathlib
import re
import sys

here = pathlib.Path(__file__).resolve().parent
include = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda/include")
# cudaProfilerTypedefs.h: cuProfilerStart/Stop live in cudaProfiler.h, outside cudaTypedefs.h.
typedefs = "".join((include / h).read_text() for h in ("cudaTypedefs.h", "cudaProfilerTypedefs.h"))
table = (here / "driver_api.hpp").read_text()

rows = re.findall(r"X\((cu\w+),\s*(\d+),\s*(\d+),\s*(true|false)\)", table)
if not rows:
    sys.exit("no entry-point rows found in driver_api.hpp")
bad = 0
for name, pfn, request, _ in rows:
    versions = sorted({int(v) for v in re.findall(rf"PFN_{name}_v(\d+)\)", typedefs)})
    chosen = max((v for v in versions if v <= int(request)), default=None)
    if chosen != int(pfn):
        bad += 1
        print(f"MISMATCH {name}: table uses v{pfn}, request {request} returns v{chosen} "
              f"(known: {versions})")
print(f"{len(rows)} entry points checked, {bad} mismatch(es)")
sys.exit(1 if bad else 0)
