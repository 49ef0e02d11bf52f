"""Times kanbench's training against its peers, pykan 0.2.8 and efficient-kan, on the same CPU.

    python3 tools/peer-compare.py [--install-pykan] [--efficient-kan PATH] [--repeats R]
                                  [--threads N] [--steps S] [--workload W] [--json PATH]

Two workloads, pykan's own examples:
  toy   KAN [2,5,1], G=3, k=3, exp(sin(pi x1) + x2^2), 1000 samples, float64, 50 LBFGS steps,
        lamb 0.001, grid updates at pykan's fit defaults (10 updates before step 50)
  deep  pykan's device tutorial: KAN [4,100,100,100,1], G=3, k=3,
        exp((sin(pi (x1^2 + x2^2)) + sin(pi (x3^2 + x4^2))) / 2), 1000 samples, float32,
        50 Adam steps at lr 1e-3, lamb 0.001, lamb_entropy 5, no grid updates
and, on request (--workload deep-noreg), deep without the regulariser (lamb 0).
Each run is its own process, and the tools take turns (kanbench, pykan, efficient-kan, then
again), so that a machine that slows down slows them all. Each tool's training alone is timed,
never the start of Python or the creation of the data and the model.

pykan runs in tools/pykan-reference/setup.sh's virtual environment, which --install-pykan
creates (pykan 0.2.8 from PyPI; torch is the project's own). efficient-kan is not on PyPI:
--efficient-kan takes its source (a clone of github.com/Blealtan/efficient-kan, or the folder
holding efficient_kan/) and runs it with the project's torch.

This file is also the worker that the virtual environments' Pythons run (--worker).
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOME = Path(os.environ.get("HOME", "/root"))
TORCH_VENV = Path(os.environ.get("KANBENCH_VENV", HOME / ".cache/kanbench/venv-torch-2.11.0"))
PYKAN_VENV = Path(os.environ.get("KANBENCH_PYKAN_VENV",
                                 HOME / ".cache/kanbench/venv-pykan-0.2.8"))

WORKLOADS = {
    "toy": dict(function="toy", width=[2, 5, 1], dtype="float64", opt="LBFGS", lr=1.0,
                lamb=0.001, lamb_entropy=2.0, update_grid=True),
    "deep": dict(function="exp_sin4", width=[4, 100, 100, 100, 1], dtype="float32", opt="Adam",
                 lr=1e-3, lamb=0.001, lamb_entropy=5.0, update_grid=False),
}
# deep without its regulariser (--workload deep-noreg): the work efficient-kan's steps do too,
# as its regulariser reads the weights alone, where pykan's and kanbench's read every edge's
# activations on every sample
WORKLOADS["deep-noreg"] = dict(WORKLOADS["deep"], lamb=0.0)
DEFAULT_WORKLOADS = ["toy", "deep"]
GRID, K, TRAIN_NUM, TEST_NUM, SEED = 3, 3, 1000, 1000, 0


# ---------------------------------------------------------------------------------------------
# Worker: runs inside a virtual environment with torch, prints one JSON line.

def target(name):
    import torch
    if name == "toy":
        return lambda x: torch.exp(torch.sin(torch.pi * x[:, [0]]) + x[:, [1]] ** 2)
    # kanbench's exp_sin4 (kan/src/data/dataset.cpp), pykan's device tutorial
    return lambda x: torch.exp((torch.sin(torch.pi * (x[:, [0]] ** 2 + x[:, [1]] ** 2)) +
                                torch.sin(torch.pi * (x[:, [2]] ** 2 + x[:, [3]] ** 2))) / 2)


def work_pykan(w, steps):
    import importlib.metadata
    import torch
    from kan import KAN, create_dataset
    torch.set_default_dtype(getattr(torch, w["dtype"]))
    dataset = create_dataset(target(w["function"]), n_var=w["width"][0], train_num=TRAIN_NUM,
                             test_num=TEST_NUM, seed=SEED)
    # auto_save=False: no checkpoint written at every change of the model
    model = KAN(width=w["width"], grid=GRID, k=K, seed=SEED, device="cpu", auto_save=False)
    # Objective evaluations: fit's closure is the only caller of backward.
    evaluations = 0
    backward = torch.Tensor.backward

    def counted_backward(*args, **kwargs):
        nonlocal evaluations
        evaluations += 1
        return backward(*args, **kwargs)

    torch.Tensor.backward = counted_backward
    start = time.perf_counter()
    results = model.fit(dataset, opt=w["opt"], steps=steps, lr=w["lr"], lamb=w["lamb"],
                        lamb_entropy=w["lamb_entropy"], update_grid=w["update_grid"])
    seconds = time.perf_counter() - start
    torch.Tensor.backward = backward
    return dict(seconds=seconds, evaluations=evaluations,
                train_rmse=float(results["train_loss"][-1]),
                version="pykan " + importlib.metadata.version("pykan"))


def work_efficient_kan(w, steps, source):
    import torch
    sys.path.insert(0, source)
    from efficient_kan import KAN
    dtype = getattr(torch, w["dtype"])
    torch.set_default_dtype(dtype)
    f = target(w["function"])
    generator = torch.Generator().manual_seed(SEED)
    train_x = torch.rand(TRAIN_NUM, w["width"][0], generator=generator) * 2 - 1
    test_x = torch.rand(TEST_NUM, w["width"][0], generator=generator) * 2 - 1
    train_y, test_y = f(train_x), f(test_x)
    torch.manual_seed(SEED)
    model = KAN(w["width"], grid_size=GRID, spline_order=K)
    optimizer = torch.optim.Adam(model.parameters(), lr=w["lr"])
    start = time.perf_counter()
    # pykan's Adam step, with efficient-kan's own regulariser (on the weights, not on the
    # activations of the samples as pykan's), and a test loss per step as pykan and kanbench
    for _ in range(steps):
        train_loss = loss = torch.mean((model(train_x) - train_y) ** 2)
        if w["lamb"] > 0:
            loss = loss + w["lamb"] * model.regularization_loss(
                regularize_activation=1.0, regularize_entropy=w["lamb_entropy"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            torch.mean((model(test_x) - test_y) ** 2)
    seconds = time.perf_counter() - start
    return dict(seconds=seconds, evaluations=steps, train_rmse=train_loss.item() ** 0.5,
                version="efficient-kan " + source_commit(source))


def source_commit(folder):
    done = subprocess.run(["git", "-C", folder, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "(not a git clone)"


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    w = WORKLOADS[args.workload[0]]
    os.chdir(tempfile.mkdtemp(prefix="peer-compare-"))  # whatever a peer writes lands there
    if args.worker == "pykan":
        result = work_pykan(w, args.steps)
    else:
        result = work_efficient_kan(w, args.steps, args.efficient_kan)
    result.update(torch=torch.__version__, threads=torch.get_num_threads())
    print(json.dumps(result))


# ---------------------------------------------------------------------------------------------
# Driver: plain python3, no packages.

def fail(message):
    print(f"peer-compare: {message}", file=sys.stderr)
    sys.exit(2)


def run(command, threads, what):
    # The same thread count for LibTorch's OpenMP pool (kanbench reads OMP_NUM_THREADS), MKL
    # and the Python workers (which also call torch.set_num_threads).
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"{what} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def time_kanbench(kanbench, workload, steps, threads):
    w = WORKLOADS[workload]
    with tempfile.TemporaryDirectory(prefix="peer-compare-") as out:
        command = [str(kanbench), "fit", "--function", w["function"],
                   "--width", ",".join(map(str, w["width"])), "--grid", str(GRID), "--k", str(K),
                   "--opt", w["opt"].lower(), "--lr", str(w["lr"]), "--steps", str(steps),
                   "--lamb", str(w["lamb"]), "--lamb-entropy", str(w["lamb_entropy"]),
                   "--dtype", w["dtype"], "--train-num", str(TRAIN_NUM),
                   "--test-num", str(TEST_NUM), "--seed", str(SEED),
                   "--trace-steps", "0",  # the operation trace would slow the first step down
                   "--out", out]
        if not w["update_grid"]:
            command.append("--no-update-grid")
        run(command, threads, f"kanbench fit ({workload})")
        record = json.loads(Path(out, "fit.json").read_text())
    steps = record["history"]["steps"]
    # The last step's time since fit() began: training only, before fit.json's device audit.
    return dict(seconds=steps[-1]["seconds"], train_rmse=steps[-1]["train_rmse"],
                evaluations=sum(s["evaluations"] for s in steps),
                version="kanbench", torch=record["environment"]["libtorch"],
                threads=record["environment"]["threads"])


def time_peer(python, tool, workload, steps, threads, efficient_kan=None):
    command = [str(python), __file__, "--worker", tool, "--workload", workload,
               "--steps", str(steps), "--threads", str(threads)]
    if efficient_kan:
        command += ["--efficient-kan", efficient_kan]
    return json.loads(run(command, threads, f"{tool} ({workload})").strip().splitlines()[-1])


def pykan_python(install):
    """The pykan environment's Python, or None with the reason printed."""
    if install:
        done = subprocess.run([str(ROOT / "tools/pykan-reference/setup.sh")],
                              stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            fail("tools/pykan-reference/setup.sh failed")
        return Path(done.stdout.strip())
    python = PYKAN_VENV / "bin/python"
    check = [str(python), "-c", "import kan"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    print(f"pykan: skipped, no pykan 0.2.8 in {PYKAN_VENV}; --install-pykan creates it "
          "(or run tools/pykan-reference/setup.sh once)\n")
    return None


def efficient_kan_source(path):
    """The folder to put on sys.path for `import efficient_kan`."""
    path = Path(path).resolve()
    for folder in (path / "src", path, path.parent):
        if (folder / "efficient_kan" / "__init__.py").exists():
            return str(folder)
    fail(f"--efficient-kan {path}: no efficient_kan/__init__.py in it, in its src/ or beside it")


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--install-pykan", action="store_true",
                        help="create pykan 0.2.8's virtual environment if it is missing")
    parser.add_argument("--efficient-kan", metavar="PATH",
                        help="efficient-kan's source: also time it (not on toy)")
    parser.add_argument("--kanbench", default=str(ROOT / "build/bin/kanbench"),
                        help="the kanbench executable (default: build/bin/kanbench)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each tool (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every tool "
                        "(default 2)")
    parser.add_argument("--steps", type=int, default=50, help="training steps (default 50)")
    parser.add_argument("--workload", action="append", choices=list(WORKLOADS),
                        help="only this workload (repeatable; default toy and deep)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--worker", choices=["pykan", "efficient-kan"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1 or args.threads < 1 or args.steps < 1:
        fail("--repeats, --threads and --steps must be at least 1")
    if args.worker:
        return worker(args)

    kanbench = Path(args.kanbench)
    if not kanbench.exists():
        fail(f"no kanbench at {kanbench}: build it first (bash tools/main.sh) or pass --kanbench")
    workloads = args.workload or DEFAULT_WORKLOADS
    tools = {"kanbench": lambda workload: time_kanbench(kanbench, workload, args.steps,
                                                        args.threads)}
    python = pykan_python(args.install_pykan)
    if python:
        tools["pykan"] = lambda workload: time_peer(python, "pykan", workload, args.steps,
                                                    args.threads)
    if args.efficient_kan:
        source = efficient_kan_source(args.efficient_kan)
        tools["efficient-kan"] = lambda workload: (
            time_peer(TORCH_VENV / "bin/python", "efficient-kan", workload, args.steps,
                      args.threads, source) if workload != "toy" else None)

    date = datetime.date.today().isoformat()
    print(f"kanbench peer comparison, {date}, {machine()}, {args.threads} threads, "
          f"{args.steps} steps, {args.repeats} interleaved runs", flush=True)
    # Other work on the machine slows every tool; the load average says how much there was.
    loads = [os.getloadavg()[0]]
    runs = {}  # (workload, tool) -> the results of its runs
    for r in range(args.repeats):
        for workload in workloads:
            for tool, time_it in tools.items():
                result = time_it(workload)
                if result is None:
                    continue
                runs.setdefault((workload, tool), []).append(result)
                loads.append(os.getloadavg()[0])
                print(f"  run {r + 1}/{args.repeats} {workload:10} {tool:13} "
                      f"{result['seconds']:8.3f} s", file=sys.stderr, flush=True)

    versions = {}
    for (workload, tool), results in runs.items():
        versions[tool] = f"{results[0]['version']} (torch {results[0]['torch']}, " \
                         f"{results[0]['threads']} threads)"
    print("; ".join(versions.values()))
    print(f"load average (1 min) between the runs: {min(loads):.2f} to {max(loads):.2f}")
    if max(loads) > os.cpu_count():  # docs/measuring.md: noisy machines say so
        print(f"the machine is busy (load above its {os.cpu_count()} cores): compare the ratios, "
              "not the times")
    torches = {results[0]["torch"].split("+")[0] for results in runs.values()}
    if len(torches) > 1:
        print(f"NOTE: the tools ran on different torch versions: {', '.join(sorted(torches))}")
    print("seconds of training alone: kanbench's fit.json (its training loop), pykan: "
          "model.fit, efficient-kan: the training loop; medians and minima over the runs")
    print("evals: objective evaluations (forward and backward on the training batch), median; "
          "evals/s its inverse; an LBFGS step's line search\nevaluates a tool-dependent number of times (rounding "
          "steers it), so 'x per eval' compares the work done at equal work")
    print()
    header = f"{'workload':10} {'tool':13} {'median s':>9} {'min s':>9} {'x kanbench':>10} " \
             f"{'evals':>6} {'ms/eval':>8} {'evals/s':>8} {'x per eval':>10} " \
             f"{'last train RMSE':>15}"
    print(header)
    print("-" * len(header))
    rows = []

    def per_eval(results):
        return statistics.median(r["seconds"] / r["evaluations"] for r in results)

    for workload in workloads:
        base = runs[(workload, "kanbench")]
        base_median = statistics.median(r["seconds"] for r in base)
        for tool in tools:
            results = runs.get((workload, tool))
            if not results:
                continue
            seconds = [r["seconds"] for r in results]
            median = statistics.median(seconds)
            row = dict(workload=workload, tool=tool, seconds=seconds, median=median,
                       min=min(seconds), ratio=median / base_median,
                       evaluations=[r["evaluations"] for r in results],
                       seconds_per_evaluation=per_eval(results),
                       evaluations_per_second=1 / per_eval(results),
                       ratio_per_evaluation=per_eval(results) / per_eval(base),
                       train_rmse=results[-1]["train_rmse"])
            rows.append(row)
            print(f"{workload:10} {tool:13} {median:9.3f} {row['min']:9.3f} "
                  f"{row['ratio']:10.2f} {statistics.median(row['evaluations']):6.0f} "
                  f"{1e3 * row['seconds_per_evaluation']:8.3f} "
                  f"{row['evaluations_per_second']:8.0f} "
                  f"{row['ratio_per_evaluation']:10.2f} {row['train_rmse']:15.3e}")
    if "efficient-kan" in tools:
        print("\nefficient-kan: not on toy; its regulariser is on the spline weights (pykan's and "
              "kanbench's on the samples' activations); deep-noreg has none for any tool")
    if args.json:
        Path(args.json).write_text(json.dumps(
            dict(date=date, machine=machine(), threads=args.threads, steps=args.steps,
                 repeats=args.repeats, load_average=[min(loads), max(loads)],
                 versions=versions, workloads=WORKLOADS, results=rows), indent=2) + "\n")


if __name__ == "__main__":
    main()
