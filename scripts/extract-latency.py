"""Single-page extraction latency: `sheaf extract STRIPE --relation REL --block N` for 21 pages
spread over the relation, whole process wall time (start, open the set, read one frame, write and
fsync the page), the first run dropped (it warms the cache). p50 and max.

    scripts/extract-latency.py STRIPE RELATION [BLOCKS]
"""
import os, subprocess, sys, tempfile, time, statistics
SHEAF = os.environ.get("SHEAF", os.path.join(os.path.dirname(__file__), "..", "target", "release", "sheaf"))
OUT = tempfile.mkdtemp(prefix="sheaf-extract-")
stripe, rel = sys.argv[1], sys.argv[2]
blocks = int(sys.argv[3]) if len(sys.argv) > 3 else 100000
ts = []
for i in range(21):
    b = (i * 7919) % blocks
    t = time.perf_counter()
    subprocess.run([SHEAF, "extract", stripe, "--relation", rel, "--block", str(b), "--to", OUT, "--json"], check=True, stdout=subprocess.DEVNULL)
    ts.append((time.perf_counter() - t) * 1000)
ts = ts[1:]  # first run warms the cache
print(f"{stripe}: p50 {statistics.median(ts):.1f} ms, max {max(ts):.1f} ms over {len(ts)} pages")
