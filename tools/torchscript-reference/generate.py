"""Regenerates the TorchScript fixtures in tests/reference/torchscript (README.md beside this file).

    generate.py              write every fixture into tests/reference/torchscript
    generate.py --out DIR    write into DIR instead
    generate.py --check      regenerate into a temporary folder and compare with the committed
                             files; exit 1 where they differ

Run it with the Python of setup.sh's virtual environment (torch, inkan 0.5.2; CPU only).
"""

import argparse
import concurrent.futures
import importlib.metadata
import json
import linecache
import os
import pickle
import re
import sys
import tempfile
import types
import zipfile
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # TorchScript writes a module's constants (__constants__, a set) in set order, which follows
    # string hashing: fixed, so that every run writes the same archives.
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})

import torch  # noqa: E402

INKAN_VERSION = "0.5.2"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REFERENCE_DIR = ROOT / "tests" / "reference" / "torchscript"

N = 32  # samples in every expected file
ADAM_LR = 1e-2

# --check: largest allowed |generated - committed| / max(|committed|, 1). The same torch on the
# same machine reproduces every number bit for bit; another CPU's vector kernels may not.
FLOAT64_TOLERANCE = 1e-12
FLOAT32_TOLERANCE = 1e-6


def load_model_file(name):
    """Imports HERE/NAME.py under its path from the repository root ("tools/torchscript-reference/
    NAME.py"), which is the file name TorchScript records for every op: the archives then name
    the same file wherever the checkout is. Its source goes into linecache, where TorchScript's
    inspect.getsource finds it."""
    path = HERE / f"{name}.py"
    display = path.relative_to(ROOT).as_posix()
    text = path.read_text()
    module = types.ModuleType(name)
    module.__file__ = display
    linecache.cache[display] = (len(text), None, text.splitlines(True), display)
    sys.modules[name] = module
    exec(compile(text, display, "exec"), module.__dict__)
    return module


models = load_model_file("models")
bug_models = load_model_file("bug_models")


def uniform(generator, rows, columns, dtype):
    """Seeded points, uniform in [-1, 1]."""
    return torch.rand(rows, columns, generator=generator, dtype=dtype) * 2 - 1


# --- the model fixtures ----------------------------------------------------------------------

def efficient_kan():
    torch.manual_seed(11)
    return models.KAN([3, 5, 2], grid_size=5, spline_order=3).double()


def fastkan():
    torch.manual_seed(12)
    model = models.FastKAN([3, 4, 2], grid_min=-2.0, grid_max=2.0, num_grids=8)
    with torch.no_grad():
        for layer in model.layers:  # LayerNorm starts at 1 and 0: drawn, so that both matter
            layer.layernorm.weight.uniform_(0.5, 1.5)
            layer.layernorm.bias.uniform_(-0.2, 0.2)
    return model


def chebykan():
    torch.manual_seed(13)
    return models.ChebyKAN([2, 6, 1], degree=4).double()


def inkan_network():
    from inkan import KANNetwork

    torch.manual_seed(14)
    # compile_basis=False: inkan's eager basis (its default wraps it in torch.compile).
    return KANNetwork([3, 4, 2], grid_size=5, compile_basis=False)


# name, build, style, how, dtype, inputs, outputs, source
MODELS = [
    ("efficient_kan", efficient_kan, "efficient-kan", "script", torch.float64, 3, 2,
     "written in the style of efficient-kan"),
    ("fastkan", fastkan, "fastkan", "script", torch.float32, 3, 2,
     "written in the style of fast-kan"),
    ("chebykan", chebykan, "chebyshev", "trace", torch.float64, 2, 1,
     "written in the style of ChebyKAN"),
    ("inkan_script", inkan_network, "inkan", "script", torch.float32, 3, 2,
     f"inkan=={INKAN_VERSION}"),
    ("inkan_trace", inkan_network, "inkan", "trace", torch.float32, 3, 2,
     f"inkan=={INKAN_VERSION}"),
]


def expected_values(module, x, targets):
    """What the C++ tests compare with: the (reloaded) module's outputs, the loss, its gradients
    and the parameters after one Adam step. A parameter with requires_grad False (FastKAN's RBF
    grid) has no gradient and keeps its value."""
    y = module(x)
    loss = ((y - targets) ** 2).mean()
    loss.backward()
    parameters = list(module.named_parameters())
    values = {"x": x, "y": y.detach(), "targets": targets, "loss": loss.detach()}
    for name, p in parameters:
        if p.grad is not None:
            values[f"grad.{name}"] = p.grad.clone()
    torch.optim.Adam([p for _, p in parameters], lr=ADAM_LR).step()
    for name, p in parameters:
        values[f"adam.{name}"] = p.detach().clone()
    return {k: v.detach().contiguous().cpu() for k, v in values.items()}


def trace(model, x):
    """torch.jit.trace in a worker thread. A traced op's debug information is the whole Python
    stack that ran it; this one's starts in the thread (Python's threading and concurrent.futures,
    then torch.jit), not in this file, so the archive does not change with this file's lines or
    the checkout's path."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(torch.jit.trace, model, x).result()


def write_model(out_dir, seed, name, build, style, how, dtype, inputs, outputs, source):
    model = build()
    generator = torch.Generator().manual_seed(seed)
    x = uniform(generator, N, inputs, dtype)
    targets = uniform(generator, N, outputs, dtype)
    with torch.no_grad():
        y_eager = model(x)
    compiled = torch.jit.script(model) if how == "script" else trace(model, x)
    torch.jit.save(compiled, str(out_dir / f"{name}.pt"))
    module = torch.jit.load(str(out_dir / f"{name}.pt"))
    values = expected_values(module, x, targets)
    torch.testing.assert_close(values["y"], y_eager, rtol=0, atol=0)
    assert values["y"].dtype == dtype and values["y"].shape == (N, outputs)

    parameters = [n for n, _ in module.named_parameters()]
    assert parameters == [n for n, _ in model.named_parameters()], name
    frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
    assert frozen == [n for n, p in model.named_parameters() if not p.requires_grad], name
    torch.save(values, out_dir / f"{name}.expected.pt")
    return {
        "name": name, "file": f"{name}.pt", "expected": f"{name}.expected.pt", "style": style,
        "how": how, "dtype": str(dtype).removeprefix("torch."), "inputs": inputs,
        "outputs": outputs, "parameters": parameters,
        "buffers": [n for n, _ in module.named_buffers()],
        "frozen_parameters": frozen, "source": source,
    }


# --- the planted-bug fixtures ----------------------------------------------------------------

# name (= kind), class in bug_models.py, is a bug on CUDA, outputs, the op the graph must show on
# the planted line (for plain_tensor_attribute the use: prim::GetAttr carries no source range)
BUGS = [
    ("factory_no_device", "FactoryNoDevice", True, 3, "aten::zeros"),
    ("plain_tensor_attribute", "PlainTensorAttribute", True, 3, "aten::mul"),
    ("cpu_call", "CpuCall", True, 3, "aten::cpu"),
    ("item_call", "ItemCall", True, 3, "aten::item"),
    ("cpu_index", "CpuIndex", True, 2, "aten::index_select"),
    ("cpu_scalar", "CpuScalar", False, 3, "aten::tensor"),
    ("clean", "Clean", False, 3, None),
]


def planted_lines():
    """kind -> the 1-based line of bug_models.py that ends with `# planted: <kind>...`."""
    lines = {}
    for number, line in enumerate((HERE / "bug_models.py").read_text().splitlines(), 1):
        match = re.search(r"# planted: (\w+)", line)
        if match:
            assert match.group(1) not in lines, f"two lines planted with {match.group(1)}"
            lines[match.group(1)] = number
    return lines


# A node line of a printed graph: its outputs, the op, its inputs, and where it came from.
GRAPH_NODE = re.compile(r"= ([\w:]+)(?:\[[^\]]*\])?\(.*# (\S*):(\d+):(\d+)$")


def ops_on_line(module, file, line):
    """The ops of the module's inlined forward graph whose source range starts at file:line."""
    ops = []
    for text in str(module.inlined_graph).splitlines():
        match = GRAPH_NODE.search(text)
        if (match and match.group(1) != "prim::Constant" and match.group(2) == file
                and int(match.group(3)) == line):
            ops.append(match.group(1))
    return ops


def write_bugs(out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = planted_lines()
    assert set(lines) == {kind for kind, *_ in BUGS} - {"clean"}, lines
    file = sys.modules["bug_models"].__file__
    manifest = []
    for index, (kind, class_name, is_bug, outputs, op) in enumerate(BUGS):
        torch.manual_seed(100 + index)
        module = torch.jit.script(getattr(bug_models, class_name)())
        torch.jit.save(module, str(out_dir / f"{kind}.pt"))
        loaded = torch.jit.load(str(out_dir / f"{kind}.pt"))
        line = lines.get(kind)
        ops = ops_on_line(loaded, file, line) if line else []
        if op is not None:
            # The saved archive kept the planted op's source line (its debug_pkl).
            assert op in ops, f"{kind}: {file}:{line} shows {ops}, not {op}"
            assert f"{file}:{line}:" in str(loaded.inlined_graph)
        generator = torch.Generator().manual_seed(200 + index)
        x = uniform(generator, N, 2, torch.float32)
        with torch.no_grad():
            y = loaded(x)
        assert y.shape == (N, outputs) and torch.isfinite(y).all()
        torch.save({"x": x, "y": y.contiguous()}, out_dir / f"{kind}.expected.pt")
        manifest.append({
            "name": kind, "file": f"{kind}.pt", "expected": f"{kind}.expected.pt", "kind": kind,
            "line": line, "source_file": "bug_models.py", "is_bug": is_bug, "inputs": 2,
            "outputs": outputs, "dtype": "float32", "ops": ops,
        })
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def write(out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = [write_model(out_dir, 1000 + index, *spec) for index, spec in enumerate(MODELS)]
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    write_bugs(out_dir / "bugs")


# --- --check ---------------------------------------------------------------------------------

def without_python_paths(value):
    """A debug_pkl's content with the paths of Python's library and site-packages cut off:
    torch's and inkan's files (and, in a traced op's stack, threading's) are named by where
    Python and the virtual environments live."""
    if isinstance(value, str):
        return re.sub(r"^.*/lib/python3\.\d+/(site-packages/)?", "<python>/", value)
    if isinstance(value, (tuple, list)):
        return type(value)(without_python_paths(v) for v in value)
    return value


def compare_archive(new, old):
    """TorchScript archives entry by entry: bytes equal, but for the random serialization_id and
    the paths of Python's files in the debug information."""
    problems = []
    with zipfile.ZipFile(new) as a, zipfile.ZipFile(old) as b:
        strip = lambda names: {n.split("/", 1)[1]: n for n in names}
        new_entries, old_entries = strip(a.namelist()), strip(b.namelist())
        if sorted(new_entries) != sorted(old_entries):
            return [f"entries {sorted(new_entries)}, committed {sorted(old_entries)}"]
        for entry in sorted(new_entries):
            if entry == ".data/serialization_id":
                continue
            x, y = a.read(new_entries[entry]), b.read(old_entries[entry])
            if entry.endswith(".debug_pkl"):
                x, y = (without_python_paths(pickle.loads(d)) for d in (x, y))
            if x != y:
                problems.append(f"{entry} differs")
    return problems


def compare_tensors(new, old):
    """expected files: the same keys in the same order, dtypes and shapes; values within the
    tolerance. Returns (problems, numbers not bit-identical, numbers, largest difference)."""
    problems, not_identical, numbers, largest = [], 0, 0, 0.0
    if list(new) != list(old):
        return [f"keys {list(new)}, committed {list(old)}"], 0, 0, 0.0
    for key in old:
        a, b = new[key], old[key]
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(f"{key}: {a.dtype} {tuple(a.shape)}, committed {b.dtype} "
                            f"{tuple(b.shape)}")
            continue
        numbers += a.numel()
        not_identical += int((a != b).sum())
        if a.is_floating_point():
            difference = ((a.double() - b.double()).abs() / b.double().abs().clamp_min(1.0))
            worst = float(difference.max()) if a.numel() else 0.0
            largest = max(largest, worst)
            tolerance = FLOAT32_TOLERANCE if a.dtype == torch.float32 else FLOAT64_TOLERANCE
            if not worst <= tolerance:
                problems.append(f"{key}: differs by {worst:.3g} (tolerance {tolerance:g})")
        elif not torch.equal(a, b):
            problems.append(f"{key}: differs")
    return problems, not_identical, numbers, largest


def check():
    all_equal = True
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write(tmp)
        generated = sorted(p.relative_to(tmp) for p in tmp.rglob("*") if p.is_file())
        committed = sorted(p.relative_to(REFERENCE_DIR) for p in REFERENCE_DIR.rglob("*")
                           if p.is_file())
        if generated != committed:
            print(f"files {list(map(str, generated))}, committed {list(map(str, committed))}")
            all_equal = False
        for path in generated:
            new, old = tmp / path, REFERENCE_DIR / path
            if not old.exists():
                continue
            note = ""
            if path.suffix == ".json":
                problems = [] if json.loads(new.read_text()) == json.loads(old.read_text()) \
                    else ["differs"]
            elif path.name.endswith(".expected.pt"):
                problems, not_identical, numbers, largest = compare_tensors(
                    torch.load(new), torch.load(old))
                note = (f", {not_identical} of {numbers} numbers not bit-identical, "
                        f"largest difference {largest:.3g}")
            else:
                problems = compare_archive(new, old)
            all_equal &= not problems
            print(f"{path}: {'equal' if not problems else 'DIFFERENT'}{note}")
            for line in problems[:20]:
                print(f"  {line}")
    return all_equal


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REFERENCE_DIR,
                        help="the folder to write into (default: tests/reference/torchscript)")
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed files instead of writing them")
    args = parser.parse_args()

    version = importlib.metadata.version("inkan")
    if version != INKAN_VERSION:
        sys.exit(f"inkan {version} is installed; these files come from inkan {INKAN_VERSION}")
    # CPU, single-threaded so that sums run in one order.
    torch.set_num_threads(1)
    if args.check:
        sys.exit(0 if check() else 1)
    write(args.out)
    files = [p for p in args.out.rglob("*") if p.is_file()]
    print(f"wrote {len(files)} files, {sum(p.stat().st_size for p in files)} bytes, into {args.out}")


if __name__ == "__main__":
    main()
