"""tools/peer-compare.py runs end to end on a few steps: it times kanbench (and pykan, where
tools/pykan-reference/setup.sh made its environment), writes its JSON and prints the table.
Usage: python3 tests/peer_compare_smoke.py KANBENCH WORK_DIR"""
import json
import math
import pathlib
import subprocess
import sys

kanbench, work = sys.argv[1], pathlib.Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
results_path = work / "peer.json"
script = pathlib.Path(__file__).resolve().parent.parent / "tools" / "peer-compare.py"
run = subprocess.run([sys.executable, str(script), "--kanbench", kanbench, "--workload", "toy",
                      "--steps", "2", "--repeats", "1", "--threads", "1", "--json",
                      str(results_path)], capture_output=True, text=True, timeout=600)
print(run.stdout, run.stderr)
assert run.returncode == 0, f"peer-compare.py exited {run.returncode}"
assert "x kanbench" in run.stdout, "no table printed"
results = json.loads(results_path.read_text())["results"]
tools = {r["tool"]: r for r in results if r["workload"] == "toy"}
ours = tools["kanbench"]
assert ours["median"] > 0 and ours["ratio"] == 1.0, ours
assert min(ours["evaluations"]) >= 2, ours  # 2 LBFGS steps evaluate at least once each
assert math.isfinite(ours["train_rmse"]), ours
assert ours["evaluations_per_second"] > 0, ours
for tool, r in tools.items():
    assert r["ratio"] > 0 and r["median"] > 0, r
print("peer comparison ran:", ", ".join(f"{t} {r['median']:.3f} s" for t, r in tools.items()))
