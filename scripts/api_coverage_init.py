"""One-off generator of docs/api-coverage.md rows from the seed (kept for re-generation of
new sections; the doc itself is hand-maintained afterwards and checked by
tests/python/test_api_coverage.py)."""
import re
import sys

seed = open(sys.argv[1]).read()
mod = "torch.cuda"
rows = []
in_auto = False
for ln in seed.split("\n"):
    m = re.search(r"currentmodule:: (\S+)", ln)
    if m:
        mod = m.group(1)
    if "autosummary::" in ln:
        in_auto = True
        continue
    if in_auto:
        s = ln.strip()
        if s.startswith(":") or not s:
            continue
        if s.startswith("```") or s.startswith(".."):
            in_auto = False
            m = re.search(r"currentmodule:: (\S+)", s)
            if m:
                mod = m.group(1)
            continue
        rows += [(mod, n) for n in s.split()]
    m = re.search(r"autofunction:: (\S+)", ln)
    if m:
        rows.append((mod, m.group(1)))
    m = re.search(r"autoclass:: (\S+)", ln)
    if m:
        rows.append(("torch.cuda", m.group(1).split(".")[-1]))
for mod, n in rows:
    full = n if n.startswith("torch.") else f"{mod}.{n}"
    py = full.replace("torch.cuda", "cudakit")
    print(f"| `{full}` | `{py}` | | missing |")
