"""Regenerates the pykan reference files in tests/reference/pykan (README.md beside this file).

    generate.py                  write every file into tests/reference/pykan
    generate.py --only NAME      just that file (repeatable); NAME as in FIXTURES
    generate.py --out DIR        write into DIR instead
    generate.py --check          regenerate into a temporary folder and compare, number by
                                 number, with the committed files; exit 1 where they differ
    generate.py --roundtrip KANBENCH
                                 with a built kanbench executable: pykan loads what kanbench's
                                 export-pykan writes and reproduces kanbench's outputs

Run it with the Python of setup.sh's virtual environment (pykan 0.2.8 and torch, CPU).
"""

import argparse
import hashlib
import importlib.metadata
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from kan.KANLayer import KANLayer
from kan.LBFGS import LBFGS
from kan.spline import B_batch, extend_grid

PYKAN_VERSION = "0.2.8"
# The pykan commit the files name, that of the 0.2.8 release: its kan/spline.py and
# kan/KANLayer.py are byte for byte the 0.2.8 wheel's (checked below, so the recorded commit
# cannot silently misname the code that ran). kan/LBFGS.py's hash is the 0.2.8 wheel's.
PYKAN_COMMIT = "ecde4ec3274d3bef1ad737479cf126aed38ab530"
PYKAN_FILE_SHA256 = {
    "kan.spline": "16443d4b5e14b7096d585fbd2b32a6f26d142f3b0556428a0ac9845b8563a8a0",
    "kan.KANLayer": "fd1a408b0ee0a8b83eefcde193b30f7323c52172a72e21280e15430cc6742b8d",
    "kan.LBFGS": "536e273fa037aed68050628744021f3baaf167fdeba94ba7904257b259576bae",
}

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "tests" / "reference" / "pykan"

# --check: largest allowed |generated - committed| / max(|committed|, 1). Exact quantities
# (basis values, forward passes, the adaptive grid) agree to rounding. A least-squares fit may
# differ more between LAPACK builds, and torch's CPU lstsq (pykan's default gelsy driver) even
# varies in the last bits from run to run: it leaves its pivot array uninitialised (pytorch
# issue 187411). So those keys are compared as the C++ test compares them.
EXACT_TOLERANCE = 1e-12
LEAST_SQUARES_TOLERANCE = 1e-8
LEAST_SQUARES_KEYS = {"coef_after", "y_after"}
# float32 fixtures (a dict with "dtype": "float32", a float32 state) whose grid update went
# through that least squares differ in their last float32 bits.
FLOAT32_TOLERANCE = 1e-6


def source():
    return {
        "library": "pykan",
        "version": importlib.metadata.version("pykan"),
        "commit": PYKAN_COMMIT,
        "torch": torch.__version__,
        "dtype": "float64",
    }


# Points inside the grid, on knots, at both ends and outside it (where every basis is zero).
BSPLINE_X = [-1.9, -1.6, -1.0, -0.73, -0.4, 0.0, 0.123, 0.4, 0.999, 1.0, 1.3, 1.79, 2.5]


def bspline_basis():
    x = torch.tensor(BSPLINE_X)
    orders = {}
    for k in range(4):
        grid = extend_grid(torch.linspace(-1, 1, steps=6)[None, :], k_extend=k)
        # Order 0 is pykan's boolean indicator; it stays boolean in the file.
        values = B_batch(x[:, None], grid, k=k)[:, 0, :]
        orders[str(k)] = {"grid": grid[0].tolist(), "values": values.tolist()}
    return {
        "source": source(),
        "what": "B_m(x) for one input, G=5 on [-1,1], grid extended by k; values[n][m]",
        "x": x.tolist(),
        "orders": orders,
    }


def reference_layer_and_inputs():
    """The 3 -> 2 layer of layer_forward and layer_update_grid, its 64 inputs and 200 samples.

    Everything comes from one seeded stream, drawn in this order; changing the order or a
    shape changes every later number. For a small tensor torch 1.13 (the committed files')
    drew a normal sample with log(1 - u), newer torch (2.11 at least) with log1p(-u), so
    scale_base[2][0] comes out one ulp away; every other draw is bit for bit the same.
    """
    torch.manual_seed(7)
    layer = KANLayer(in_dim=3, out_dim=2, num=5, k=3)  # its random init is replaced below
    with torch.no_grad():
        # Far from the near-zero init, so every term of the forward pass matters.
        layer.coef.copy_(torch.randn(3, 2, 8) * 0.3)
        layer.scale_base.copy_(torch.randn(3, 2))
        layer.scale_sp.copy_(1 + 0.5 * torch.randn(3, 2))
        layer.mask[2, 1] = 0.0  # one pruned edge
    x = torch.rand(64, 3) * 3.2 - 1.6  # some beyond the grid range [-1, 1]
    # Skewed towards -0.5, so the adaptive grid moves well away from the uniform one.
    samples = torch.cat([torch.rand(150, 3) ** 3 * 1.5 - 0.5, torch.rand(50, 3) * 2 - 1])
    return layer, x, samples


def layer_state(layer):
    return {
        "grid": layer.grid.tolist(),
        "coef": layer.coef.tolist(),
        "scale_base": layer.scale_base.tolist(),
        "scale_sp": layer.scale_sp.tolist(),
        "mask": layer.mask.tolist(),
    }


def layer_forward():
    layer, x, _ = reference_layer_and_inputs()
    with torch.no_grad():
        y, _, postacts, postspline = layer(x)
    return {
        "source": source(),
        "what": "KANLayer(in_dim=3, out_dim=2, num=5, k=3, base silu); y = forward(x); "
        "postacts[n][j][i] = phi_ij(x_ni), postspline[n][j][i] = spline part",
        "config": {"in_dim": 3, "out_dim": 2, "G": 5, "k": 3, "grid_range": [-1, 1],
                   "base_fun": "silu"},
        "state": layer_state(layer),
        "x": x.tolist(),
        "y": y.tolist(),
        "postacts": postacts.tolist(),
        "postspline": postspline.tolist(),
    }


def layer_update_grid():
    layer, _, samples = reference_layer_and_inputs()
    with torch.no_grad():
        state_before = layer_state(layer)
        y_before = layer(samples)[0]
        layer.update_grid_from_samples(samples)
        y_after = layer(samples)[0]
    return {
        "source": source(),
        "what": "the layer of layer_forward.json, then update_grid_from_samples(samples); "
        "grid_after is exact, coef_after is a least-squares fit (compare outputs, not bits)",
        "config": {"in_dim": 3, "out_dim": 2, "G": 5, "k": 3, "grid_eps": layer.grid_eps,
                   "base_fun": "silu"},
        "state_before": state_before,
        "samples": samples.tolist(),
        "y_before": y_before.tolist(),
        "grid_after": layer.grid.tolist(),
        "coef_after": layer.coef.tolist(),
        "y_after": y_after.tolist(),
    }


# (k, G) of layer_update_grid_orders: every spline order pykan users pick, grids up to 50.
GRID_UPDATE_CASES = [(1, 5), (2, 12), (3, 20), (4, 30), (5, 9), (5, 50)]


def layer_update_grid_orders():
    """update_grid_from_samples at k = 1..5 and G up to 50: its least squares (curve2coef) is
    where solving the normal equations would lose digits (their condition number is the
    square of the basis matrix's)."""
    cases = []
    for case, (k, G) in enumerate(GRID_UPDATE_CASES):
        torch.manual_seed(100 + case)
        layer = KANLayer(in_dim=2, out_dim=2, num=G, k=k)
        with torch.no_grad():
            layer.coef.copy_(torch.randn(2, 2, G + k) * 0.3)
            layer.scale_base.copy_(torch.randn(2, 2))
            layer.scale_sp.copy_(1 + 0.5 * torch.randn(2, 2))
            samples = torch.cat([torch.rand(300, 2) ** 3 * 1.5 - 0.5, torch.rand(100, 2) * 2 - 1])
            state_before = layer_state(layer)
            layer.update_grid_from_samples(samples)
            cases.append({
                "config": {"in_dim": 2, "out_dim": 2, "G": G, "k": k, "grid_eps": layer.grid_eps,
                           "base_fun": "silu"},
                "state_before": state_before,
                "samples": samples.tolist(),
                "grid_after": layer.grid.tolist(),
                "coef_after": layer.coef.tolist(),
                "y_after": layer(samples)[0].tolist(),
            })
    return {
        "source": source(),
        "what": "KANLayer(2, 2, num=G, k) with seeded state, then update_grid_from_samples(samples) "
        "for each (k, G); pykan's lstsq fit is accurate to about 1e-13 here",
        "cases": cases,
    }


def multkan_state(model):
    """Every tensor kanbench's KAN holds, under kanbench's names (layers.L.coef, node_scale_L)."""
    state = {}
    for l, layer in enumerate(model.act_fun):
        for name in ("grid", "coef", "scale_base", "scale_sp", "mask"):
            state[f"layers.{l}.{name}"] = getattr(layer, name).tolist()
    for l in range(model.depth):
        for name in ("node_scale", "node_bias", "subnode_scale", "subnode_bias"):
            state[f"{name}_{l}"] = getattr(model, name)[l].tolist()
    return state


def draw_parameters(model):
    """Draws every spline and affine parameter of a MultKAN away from its initial value (from
    torch's global generator), so that each term of the forward matters."""
    for layer in model.act_fun:
        layer.coef.copy_(torch.randn_like(layer.coef) * 0.3)
        layer.scale_base.copy_(torch.randn_like(layer.scale_base))
        layer.scale_sp.copy_(1 + 0.5 * torch.randn_like(layer.scale_sp))
    for name in ("node_scale", "subnode_scale"):
        for p in getattr(model, name):
            p.copy_(1 + 0.3 * torch.randn_like(p))
    for name in ("node_bias", "subnode_bias"):
        for p in getattr(model, name):
            p.copy_(0.2 * torch.randn_like(p))


def multkan_forward():
    """MultKAN forward with multiplication nodes: one network with per-node arities (2 and 3) in
    two layers, one with mult_arity 3 everywhere; every parameter, the node and subnode affine
    ones included, drawn away from its initial value so that each term matters."""
    from kan.MultKAN import MultKAN

    networks = []
    for case, (width, mult_arity) in enumerate([
            ([3, [2, 2], [1, 1], 1], [[], [2, 3], [2], []]),
            ([2, [1, 2], 1], 3)]):
        model = MultKAN(width=[list(w) if isinstance(w, list) else w for w in width], grid=4, k=3,
                        mult_arity=mult_arity, seed=case, affine_trainable=True, auto_save=False)
        torch.manual_seed(200 + case)
        with torch.no_grad():
            draw_parameters(model)
            x = torch.rand(32, model.width_in[0]) * 2.4 - 1.2
            y = model(x)
        # Attribution of that forward's activations (pykan's layouts: edges (out, in)).
        model.attribute(plot=False)
        networks.append({
            "config": {"width": [w if isinstance(w, int) else w[0] + w[1] for w in width],
                       "mult": [0 if isinstance(w, int) else w[1] for w in width],
                       "mult_arity": mult_arity if isinstance(mult_arity, int) else 2,
                       "node_arity": [] if isinstance(mult_arity, int) else mult_arity,
                       "G": 4, "k": 3},
            "pykan_width": model.width,
            "state": multkan_state(model),
            "x": x.tolist(),
            "y": y.tolist(),
            "node_scores": [s.tolist() for s in model.node_scores],
            "edge_scores": [s.tolist() for s in model.edge_scores],
            "subnode_scores": [s.tolist() for s in model.subnode_scores],
        })
    return {
        "source": source(),
        "what": "MultKAN(width, mult_arity, grid=4, k=3, affine_trainable=True) with every "
        "parameter drawn; y = model(x), then attribute(): node_scores[l], edge_scores[l] (out, in), "
        "subnode_scores[l]. config: kanbench's width (nodes per layer), mult (multiplication "
        "nodes per layer), mult_arity / node_arity",
        "networks": networks,
    }


# multkan_prune's thresholds: pykan's defaults.
PRUNE_THRESHOLDS = {"node": 1e-2, "edge": 3e-2, "input": 1e-2}


def multkan_prune():
    """pykan's prune_node, prune_edge, prune and prune_input on one MultKAN [3, [3, 1], 1]
    (mult_arity 2) whose input 2 and hidden node 1 barely contribute, each on a fresh copy (pykan
    masks the model it prunes) after a forward on the samples x."""
    import contextlib
    import copy
    import io

    from kan.MultKAN import MultKAN

    width, mult_arity = [3, [3, 1], 1], 2
    with tempfile.TemporaryDirectory() as ckpt_path, contextlib.redirect_stdout(io.StringIO()):
        # pykan's prune logs its history into ckpt_path and prints; both are kept out of sight.
        model = MultKAN(width=copy.deepcopy(width), grid=3, k=3, mult_arity=mult_arity, seed=3,
                        affine_trainable=True, auto_save=False, ckpt_path=ckpt_path)
        torch.manual_seed(300)
        with torch.no_grad():
            draw_parameters(model)
            # Input 2's edges and hidden node 1's one edge out nearly vanish.
            for layer, rows in ((model.act_fun[0], 2), (model.act_fun[1], 1)):
                for name in ("coef", "scale_base"):
                    getattr(layer, name)[rows] *= 1e-3
        state = multkan_state(model)
        x = torch.rand(24, 3) * 2.4 - 1.2

        def pruned(operation):
            fresh = copy.deepcopy(model)
            fresh(x)
            fresh.attribute(plot=False)  # prune_edge reads the scores of the last attribute()
            result = operation(fresh) or fresh
            with torch.no_grad():
                y = result(x)
            return {"pykan_width": result.width,
                    "mask": [layer.mask.tolist() for layer in result.act_fun],
                    "y": y.tolist()}

        th = PRUNE_THRESHOLDS
        operations = {
            "prune_node": pruned(lambda m: m.prune_node(th["node"], log_history=False)),
            "prune_edge": pruned(lambda m: m.prune_edge(th["edge"], log_history=False)),
            "prune": pruned(lambda m: m.prune(th["node"], th["edge"])),
            "prune_input": pruned(lambda m: m.prune_input(th["input"], log_history=False)),
        }
        reference = copy.deepcopy(model)
        with torch.no_grad():
            y = reference(x)
        reference.attribute(plot=False)
        input_id = reference.prune_input(th["input"], log_history=False).input_id
    operations["prune_input"]["input_id"] = input_id.tolist()
    # Every score far from its threshold, so that rounding cannot flip a decision.
    for scores, threshold in ((reference.node_scores, th["node"]),
                              (reference.edge_scores, th["edge"])):
        for s in scores:
            assert ((s - threshold).abs() > 0.1 * threshold).all(), (s, threshold)
    return {
        "source": source(),
        "what": "MultKAN(width, mult_arity, grid=3, k=3, affine_trainable=True) with every "
        "parameter drawn, input 2 and node (1, 1) nearly dead; y = model(x), attribute(), then "
        "each operation on a fresh copy: the pruned model's width (pykan's form), masks "
        "(in, out) and outputs on x (prune_input's model selects input_id from the full x)",
        "config": {"width": [3, 4, 1], "mult": [0, 1, 0], "mult_arity": mult_arity,
                   "node_arity": [], "G": 3, "k": 3},
        "pykan_width": model.width,
        "state": state,
        "x": x.tolist(),
        "y": y.tolist(),
        "thresholds": th,
        "node_scores": [s.tolist() for s in reference.node_scores],
        "edge_scores": [s.tolist() for s in reference.edge_scores],
        "operations": operations,
    }


def rosenbrock(x):
    # tests/test_lbfgs.cpp builds the same operations in this order, so gradients round alike.
    head, tail = x[:-1], x[1:]
    return (100 * (tail - head**2) ** 2 + (1 - head) ** 2).sum()


def lbfgs_run(objective, options, steps):
    """pykan's LBFGS on the parameters a (2, 3) and b (4,), x = cat(a.flatten(), b), and c (2,),
    which the objective does not use (no gradient: the optimiser sees zeros)."""
    a = torch.tensor([[-1.2, 1.0, -0.9], [1.1, -1.3, 0.8]], requires_grad=True)
    b = torch.tensor([-0.5, 1.4, 0.3, -1.0], requires_grad=True)
    c = torch.tensor([0.25, -0.75], requires_grad=True)
    initial = {"a": a.tolist(), "b": b.tolist(), "c": c.tolist()}
    optimizer = LBFGS([a, b, c], **options)

    def closure():
        optimizer.zero_grad()
        loss = objective(torch.cat([a.reshape(-1), b]))
        loss.backward()
        return loss

    records = []
    for _ in range(steps):
        loss = optimizer.step(closure)
        state = optimizer.state[a]
        records.append({
            "loss": loss.item(),
            "a": a.tolist(),
            "b": b.tolist(),
            "c": c.tolist(),
            "func_evals": state["func_evals"],
            "n_iter": state["n_iter"],
            "t": float(state["t"]),
            "prev_loss": float(state["prev_loss"]),
            "H_diag": float(state["H_diag"]),
            # 1 / (y·s) of every curvature pair kept, oldest first
            "ro": [float(r) for r in state["ro"]],
        })
    return {"options": options, "initial": initial, "steps": records}


def lbfgs_rosenbrock():
    # A quadratic for the fixed-step runs: LBFGS without a line search diverges on Rosenbrock.
    generator = torch.Generator().manual_seed(11)
    m = torch.randn(10, 10, generator=generator)
    A = m @ m.T / 10 + torch.eye(10)
    rhs = torch.randn(10, generator=generator)

    def quadratic(x):
        return 0.5 * x.dot(A @ x) - rhs.dot(x)

    fit_settings = {"lr": 1, "history_size": 10, "line_search_fn": "strong_wolfe",
                    "tolerance_grad": 1e-32, "tolerance_change": 1e-32, "tolerance_ys": 1e-32}
    return {
        "source": source(),
        "what": "pykan's LBFGS (kan/LBFGS.py) from the same start, steps[i] after step() i + 1: "
        "params a (2, 3), b (4,), c (2,), objective f(cat(a.flatten(), b)) (c unused); the "
        "state: func_evals, n_iter, t, prev_loss, H_diag, ro = 1 / (y·s) of the pairs kept",
        "objectives": {
            "rosenbrock": "sum(100 * (x[1:] - x[:-1]**2)**2 + (1 - x[:-1])**2)",
            "quadratic": "0.5 * x·(A x) - rhs·x",
        },
        "quadratic": {"A": A.tolist(), "rhs": rhs.tolist()},
        "runs": {
            # MultKAN.fit's settings, through convergence to rounding and past it
            "rosenbrock_fit_settings": lbfgs_run(rosenbrock, fit_settings, 7),
            # the same with a history of 3, so that pairs are dropped every few iterations
            "rosenbrock_history_3": lbfgs_run(rosenbrock, {**fit_settings, "history_size": 3},
                                              4),
            # the class's defaults: fixed steps of lr, tolerances 1e-7 and 1e-9
            "quadratic_defaults": lbfgs_run(quadratic, {"max_iter": 4}, 6),
            "quadratic_lr_half": lbfgs_run(quadratic, {"lr": 0.5, "max_iter": 5, "max_eval": 3,
                                                       "history_size": 5}, 4),
        },
    }


# pykan checkpoints as saveckpt writes them (checkpoints/NAME_config.yml, NAME_state,
# NAME_cache_data), one per kind of model kanbench must load: (name, MultKAN arguments, dtype).
CHECKPOINT_CASES = [
    ("plain", dict(width=[2, 5, 1], grid=5, k=3, seed=0), torch.float64),
    ("plain_float32", dict(width=[2, 5, 1], grid=5, k=3, seed=0), torch.float32),
    ("mult", dict(width=[3, [2, 2], [1, 1], 1], mult_arity=[[], [2, 3], [3], []], grid=4, k=3,
                  seed=1, affine_trainable=True), torch.float64),
    ("mult_arity3", dict(width=[2, [1, 2], 1], mult_arity=3, grid=3, k=3, seed=2),
     torch.float32),
    ("pruned", dict(width=[3, 6, 1], grid=5, k=3, seed=3), torch.float64),
    ("options", dict(width=[2, 4, 2], grid=7, k=2, seed=4, base_fun="identity",
                     grid_range=[-2.0, 3.0], grid_eps=0.5, sp_trainable=False,
                     sb_trainable=False), torch.float64),
    ("zero_base", dict(width=[2, 3, 1], grid=4, k=5, seed=5, base_fun="zero",
                       grid_range=[0.0, 4.0]), torch.float64),
]


def pykan_checkpoints(out_dir):
    """Every CHECKPOINT_CASES model, its spline state moved off its initial values (a grid
    update from samples, drawn coefficients), saved with saveckpt, and pykan's outputs y on
    inputs x, some beyond the grid. The pruned case is pykan's prune() of a model two of whose
    hidden nodes barely contribute."""
    from kan.MultKAN import MultKAN

    (out_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    cases = []
    for index, (name, arguments, dtype) in enumerate(CHECKPOINT_CASES):
        torch.set_default_dtype(dtype)
        model = MultKAN(auto_save=False, **{k: (list(v) if isinstance(v, list) else v)
                                            for k, v in arguments.items()})
        low, high = arguments.get("grid_range", [-1.0, 1.0])
        torch.manual_seed(300 + index)
        samples = low + (high - low) * torch.rand(64, model.width_in[0])
        model.update_grid_from_samples(samples)
        with torch.no_grad():
            for layer in model.act_fun:
                layer.coef.add_(0.2 * torch.randn_like(layer.coef))
            if arguments.get("affine_trainable"):
                for p in list(model.node_scale) + list(model.subnode_scale):
                    p.copy_(1 + 0.3 * torch.randn_like(p))
                for p in list(model.node_bias) + list(model.subnode_bias):
                    p.copy_(0.2 * torch.randn_like(p))
            if name == "pruned":
                for node in (1, 4):  # hidden nodes 1 and 4 all but vanish
                    model.act_fun[0].coef[:, node, :] *= 1e-4
                    model.act_fun[0].scale_base[:, node] *= 1e-4
                    model.act_fun[1].coef[node, :, :] *= 1e-4
                    model.act_fun[1].scale_base[node, :] *= 1e-4
        if name == "pruned":
            # pykan's prune(1e-2, 3e-2) without its log_history, which writes into ckpt_path.
            model(samples)
            model = model.prune_node(1e-2, log_history=False)
            model(model.cache_data)
            model.attribute()
            model.prune_edge(3e-2, log_history=False)
        margin = 0.2 * (high - low)
        x = (low - margin) + (high - low + 2 * margin) * torch.rand(16, model.width_in[0])
        with torch.no_grad():
            y = model(x)
        model.saveckpt(str(out_dir / "checkpoints" / name))
        cases.append({"name": name, "prefix": f"checkpoints/{name}",
                      "dtype": str(dtype).removeprefix("torch."), "width": model.width,
                      "x": x.tolist(), "y": y.tolist()})
    torch.set_default_dtype(torch.float64)
    # Edge 1 -> 2 of layer 0 in symbolic mode (multkan_symbolic records its outputs).
    model = MultKAN(width=[2, 3, 1], grid=3, k=3, seed=6, auto_save=False)
    model.fix_symbolic(0, 1, 2, "sin", fit_params_bool=False, verbose=False, log_history=False)
    model.saveckpt(str(out_dir / "checkpoints" / "symbolic"))
    return {
        "source": source(),
        "what": "pykan checkpoints written by MultKAN.saveckpt(prefix) (prefix_config.yml, "
        "prefix_state, prefix_cache_data) and pykan's outputs y = model(x); width after pruning. "
        "checkpoints/symbolic has edge 1 -> 2 of layer 0 fixed to sin (symbolic mode)",
        "cases": cases,
    }


# Points across every library function's interesting places: poles, domain edges, beyond.
SYMBOLIC_X = [-4.0, -3.3, -1.2, -1.0, -0.999, -0.5, -0.01, -1e-4, 0.0, 1e-4, 0.003, 0.01, 0.2,
              0.5, 0.999, 1.0, 1.0001, 1.5, 1.5707, 2.3, 3.0, 4.7]
# (function, a, b, c, d, inputs' range) for fit_params on synthetic edges c f(a x + b) + d.
SYMBOLIC_FITS = [("sin", 2.5, 0.7, 1.3, -0.4, (-1, 1)), ("exp", 1.2, -0.3, 0.8, 0.1, (-1, 1)),
                 ("x^2", 1.5, 0.5, -2.0, 0.3, (-1, 1)), ("tanh", 3.0, -1.0, 0.5, 0.0, (-1, 1)),
                 ("log", 2.0, 3.0, 1.0, 0.5, (-1, 1)), ("gaussian", 2.0, 0.5, 1.5, -0.2, (-1, 1)),
                 ("1/x", 1.0, 2.5, 0.7, 0.0, (-1, 1)), ("x", -3.0, 1.0, 0.5, 2.0, (-1, 1))]


def symbolic_library():
    """pykan's SYMBOLIC_LIB: every function and its singularity-avoiding form (y_th = 10) at
    SYMBOLIC_X, with its complexity; and fit_params on synthetic edges c f(a x + b) + d (with a
    little noise, 100 samples), pykan's (a, b, c, d) and R^2."""
    from kan.utils import SYMBOLIC_LIB, fit_params

    x = torch.tensor(SYMBOLIC_X)
    # JSON has no NaN or Inf: null and the strings "inf", "-inf" stand for them.
    encode = lambda values: [None if v != v else str(v) if abs(v) == float("inf") else v
                             for v in values.tolist()]
    functions = {}
    for name, (fun, _, complexity, avoiding) in SYMBOLIC_LIB.items():
        with torch.no_grad():
            safe = avoiding(x, torch.tensor(10.0))
            # The value is the tuple's last entry. pykan's Symbolic_KANLayer takes entry [1],
            # which is not the value for tan (3 entries: [1] is a constant) nor for x^1.5 (no
            # tuple: [1] is the tensor's row 1): pykan bugs kanbench does not copy.
            functions[name] = {"complexity": complexity, "f": encode(fun(x)),
                               "f_avoiding": encode(safe[-1] if isinstance(safe, tuple) else safe)}
    fits = []
    for index, (name, a, b, c, d, (low, high)) in enumerate(SYMBOLIC_FITS):
        torch.manual_seed(400 + index)
        xs = low + (high - low) * torch.rand(100)
        ys = c * SYMBOLIC_LIB[name][0](a * xs + b) + d + 1e-3 * torch.randn(100)
        params, r2 = fit_params(xs, ys, SYMBOLIC_LIB[name][0], verbose=False)
        fits.append({"function": name, "true": [a, b, c, d], "x": xs.tolist(), "y": ys.tolist(),
                     "params": params.tolist(), "r2": r2.item()})
    return {
        "source": source(),
        "what": "SYMBOLIC_LIB[name]: complexity, f(x) (null for NaN, 'inf' for Inf) and the singularity-"
        "avoiding f(x, y_th=10) at x; fit_params(x, y, f) with its defaults (a, b in [-10, 10], "
        "101 x 101 grid, 3 zoom-ins) on y = c f(a x + b) + d + 1e-3 noise",
        "x": SYMBOLIC_X,
        "functions": functions,
        "fits": fits,
    }


def multkan_symbolic(out_dir):
    """pykan's symbolic branch (float64): fix_symbolic with fit_params (affine and R^2) and
    without, forward outputs after fixing, suggest_symbolic's per-function R^2 and loss for one
    edge, auto_symbolic on a second model (a pruned edge, an edge already symbolic, the whole
    library), and checkpoints/symbolic_fitted, a saveckpt of the first model. Each fit follows a
    forward on x, as pykan's fit reads the last forward's activations. The layer-0 edges are set
    to smooth curves (curve2coef) so that every fit has one clear optimum."""
    import contextlib
    import copy
    import io

    import numpy as np
    from kan.MultKAN import MultKAN
    from kan.spline import curve2coef
    from kan.utils import SYMBOLIC_LIB

    torch.set_default_dtype(torch.float64)
    curves = [lambda t: torch.sin(2 * t + 0.5), lambda t: t ** 2, lambda t: torch.tanh(1.5 * t),
              lambda t: torch.exp(0.8 * t), lambda t: 0.5 * t, lambda t: torch.cos(t),
              lambda t: -t, lambda t: torch.exp(-(1.5 * t) ** 2), lambda t: t ** 3,
              lambda t: torch.sin(3 * t)]

    def shaped(model, seed):
        torch.manual_seed(seed)
        layer = model.act_fun[0]
        t = torch.linspace(-1, 1, 200)[:, None].expand(200, layer.in_dim)
        targets = torch.stack([torch.stack([curves[(i * layer.out_dim + j) % len(curves)](t[:, i])
                                            for j in range(layer.out_dim)], 1)
                               for i in range(layer.in_dim)], 1)  # (200, in, out)
        with torch.no_grad():
            layer.coef.copy_(curve2coef(t, targets, layer.grid, layer.k))
            layer.scale_base.zero_()
            layer.scale_sp.fill_(1.0)
            for later in model.act_fun[1:]:
                later.coef.copy_(0.5 * torch.randn_like(later.coef))
        return model

    with tempfile.TemporaryDirectory() as ckpt_path, contextlib.redirect_stdout(io.StringIO()):
        common = dict(grid=5, k=3, auto_save=False, ckpt_path=ckpt_path)
        model = shaped(MultKAN(width=[2, [3, 1], 1], mult_arity=2, seed=7,
                               affine_trainable=True, **common), 700)
        torch.manual_seed(701)
        x = torch.rand(64, 2) * 2 - 1
        with torch.no_grad():
            y_before = model(x)
        state = multkan_state(model)
        fixes = []
        for l, i, j, name, fit in ((0, 0, 0, "sin", True), (0, 1, 2, "tanh", True),
                                   (1, 3, 0, "x^2", True), (0, 1, 4, "x^3", False),
                                   (0, 0, 3, "exp", True)):
            with torch.no_grad():
                model(x)
            r2 = model.fix_symbolic(l, i, j, name, fit_params_bool=fit, verbose=False,
                                    log_history=False)
            fixes.append({"l": l, "i": i, "j": j, "name": name, "fit": fit,
                          "r2": None if r2 is None else float(r2),
                          "affine": model.symbolic_fun[l].affine[j, i].tolist()})
        with torch.no_grad():
            y_fixed = model(x)

        # suggest_symbolic(0, 1, 1): pykan's own fix/unfix per function, its loss, its best.
        with torch.no_grad():
            model(x)
        probe = copy.deepcopy(model)
        suggestions = []
        for name, content in SYMBOLIC_LIB.items():
            r2 = probe.fix_symbolic(0, 1, 1, name, verbose=False, log_history=False)
            probe.unfix_symbolic(0, 1, 1, log_history=False)
            r2 = float(r2)
            loss = 0.8 * content[2] + 0.2 * float(np.log2(1 + 1e-5 - r2))
            suggestions.append({"name": name, "r2": r2, "complexity": content[2], "loss": loss})
        best = model.suggest_symbolic(0, 1, 1, verbose=False)
        (out_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        model.ckpt_path = "./model"  # pykan's default, not the temporary folder: reproducible
        model.saveckpt(str(out_dir / "checkpoints" / "symbolic_fitted"))

        # auto_symbolic on [2, 3, 1]: edge (0, 1, 2) pruned, edge (1, 1, 0) already sin.
        auto = shaped(MultKAN(width=[2, 3, 1], seed=8, **common), 800)
        auto.remove_edge(0, 1, 2, log_history=False)
        auto.fix_symbolic(1, 1, 0, "sin", fit_params_bool=False, verbose=False,
                          log_history=False)
        auto_state = multkan_state(auto)
        auto_symbolic_affine = auto.symbolic_fun[1].affine.tolist()
        with torch.no_grad():
            auto(x)
        expected = {}
        for l in range(auto.depth):
            for i in range(auto.width_in[l]):
                for j in range(auto.width_out[l + 1]):
                    if auto.act_fun[l].mask[i, j] != 0:
                        name, _, r2, _ = copy.deepcopy(auto).suggest_symbolic(
                            l, i, j, verbose=False)
                        expected[f"{l},{i},{j}"] = {"name": name, "r2": float(r2)}
        auto.auto_symbolic(verbose=0, r2_threshold=0.9)
        with torch.no_grad():
            y_auto = auto(x)
        auto_result = [{"funs_name": s.funs_name, "mask": s.mask.tolist(),
                        "affine": s.affine.tolist()} for s in auto.symbolic_fun]

        # checkpoints/symbolic (pykan_checkpoints): its outputs on x.
        symbolic = MultKAN(width=[2, 3, 1], grid=3, k=3, seed=6, auto_save=False)
        symbolic.fix_symbolic(0, 1, 2, "sin", fit_params_bool=False, verbose=False,
                              log_history=False)
        with torch.no_grad():
            y_symbolic_checkpoint = symbolic(x)
    return {
        "source": source(),
        "what": "MultKAN(width [2, [3, 1], 1], grid 5, k 3, seed 7, affine_trainable) with layer "
        "0's edges set to smooth curves (scale_base 0, scale_sp 1) and layer 1's coef drawn: "
        "y_before = model(x); fix_symbolic of each `fixes` entry in order, each after a forward "
        "on x (fit_params_bool = fit, random False): R^2 and a, b, c, d; y_fixed = model(x); "
        "per library function pykan's R^2 of edge (0, 1, 1) and its suggest_symbolic loss "
        "(weight_simple 0.8), and suggest_symbolic's best; checkpoints/symbolic_fitted is this "
        "model's saveckpt. auto: a [2, 3, 1] model (seed 8) with edge (0, 1, 2) removed and edge "
        "(1, 1, 0) fixed to sin without fit; per live edge suggest_symbolic's best (name, R^2) "
        "on a copy; then auto_symbolic(r2_threshold 0.9, full library): every layer's funs_name "
        "(out, in), symbolic mask, affine, and y_auto. y_symbolic_checkpoint: "
        "checkpoints/symbolic's outputs on x",
        "config": {"width": [2, 4, 1], "mult": [0, 1, 0], "mult_arity": 2, "G": 5, "k": 3,
                   "seed": 7, "affine_trainable": True},
        "state": state,
        "x": x.tolist(),
        "y_before": y_before.tolist(),
        "fixes": fixes,
        "y_fixed": y_fixed.tolist(),
        "suggest": {"l": 0, "i": 1, "j": 1, "weight_simple": 0.8, "functions": suggestions,
                    "best": {"name": best[0], "r2": float(best[2])}},
        "checkpoint": "checkpoints/symbolic_fitted",
        "auto": {"config": {"width": [2, 3, 1], "G": 5, "k": 3, "seed": 8},
                 "state": auto_state, "symbolic_affine_1": auto_symbolic_affine,
                 "r2_threshold": 0.9, "expected": expected, "result": auto_result,
                 "y": y_auto.tolist()},
        "y_symbolic_checkpoint": y_symbolic_checkpoint.tolist(),
    }


def symbolic_formula(out_dir):
    """pykan's symbolic_formula of a whole-symbolic MultKAN (width [2, [3, 1], 1], parameters
    drawn by draw_parameters, then layer 0 set to smooth curves): auto_symbolic(r2_threshold 0) fixes every
    edge to the best of a library with no singularity; checkpoints/formula_mult is its saveckpt.
    formula: str(symbolic_formula()[0][0]), rounded: ex_round(formula, 4); formula_values: the
    formula evaluated by sympy.lambdify at x; y: the model's outputs at x."""
    import contextlib
    import io

    import sympy
    from kan.MultKAN import MultKAN
    from kan.spline import curve2coef
    from kan.utils import ex_round

    torch.set_default_dtype(torch.float64)
    lib = ["x", "x^2", "x^3", "exp", "sin", "tanh", "gaussian"]
    with tempfile.TemporaryDirectory() as ckpt_path, contextlib.redirect_stdout(io.StringIO()):
        model = MultKAN(width=[2, [3, 1], 1], mult_arity=2, grid=5, k=3, seed=9,
                        affine_trainable=True, auto_save=False, ckpt_path=ckpt_path)
        torch.manual_seed(900)
        layer = model.act_fun[0]
        t = torch.linspace(-1, 1, 200)[:, None].expand(200, layer.in_dim)
        curves = [lambda v: torch.sin(2 * v + 0.5), lambda v: v ** 2, lambda v: torch.tanh(1.5 * v),
                  lambda v: torch.exp(0.8 * v), lambda v: 0.5 * v]
        targets = torch.stack([torch.stack([curves[(i * layer.out_dim + j) % len(curves)](t[:, i])
                                            for j in range(layer.out_dim)], 1)
                               for i in range(layer.in_dim)], 1)
        with torch.no_grad():
            draw_parameters(model)
            layer.coef.copy_(curve2coef(t, targets, layer.grid, layer.k))
            layer.scale_base.zero_()
            layer.scale_sp.fill_(1.0)
        x = torch.rand(64, 2) * 2 - 1
        with torch.no_grad():
            model(x)
        model.auto_symbolic(lib=lib, verbose=0, r2_threshold=0.0)
        with torch.no_grad():
            y = model(x)
        formula = model.symbolic_formula()[0][0]
        (out_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        model.ckpt_path = "./model"  # pykan's default, not the temporary folder: reproducible
        model.saveckpt(str(out_dir / "checkpoints" / "formula_mult"))
    variables = [sympy.Symbol("x_1"), sympy.Symbol("x_2")]
    values = sympy.lambdify(variables, formula, "numpy")(x[:, 0].numpy(), x[:, 1].numpy())
    return {
        "source": source(),
        "what": symbolic_formula.__doc__.replace("\n   ", "").replace("\n", " "),
        "lib": lib,
        "checkpoint": "checkpoints/formula_mult",
        "functions": [s.funs_name for s in model.symbolic_fun],
        "formula": str(formula),
        "rounded": str(ex_round(formula, 4)),
        "x": x.tolist(),
        "formula_values": [float(v) for v in values],
        "y": y[:, 0].tolist(),
    }


# One function per file, named as the file (NAME.json). A new fixture is one more entry.
FIXTURES = {f.__name__: f for f in (bspline_basis, layer_forward, layer_update_grid,
                                    layer_update_grid_orders, multkan_forward, multkan_prune,
                                    lbfgs_rosenbrock, pykan_checkpoints, symbolic_library,
                                    multkan_symbolic, symbolic_formula)}
# Fixtures that also write files of their own next to their JSON (given the folder).
WRITES_FILES = {"pykan_checkpoints", "multkan_symbolic", "symbolic_formula"}


def check_pykan():
    version = importlib.metadata.version("pykan")
    if version != PYKAN_VERSION:
        sys.exit(f"pykan {version} is installed; these files come from pykan {PYKAN_VERSION}")
    for module, expected in PYKAN_FILE_SHA256.items():
        # sys.modules: the package's `kan.KANLayer` attribute is the class, not the module.
        path = sys.modules[module].__file__
        actual = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        if actual != expected:
            sys.exit(f"{path} is not pykan {PYKAN_COMMIT}'s (sha256 {actual})")


def write(names, out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        # Compact, no trailing newline, NaN refused: the committed files' format.
        data = FIXTURES[name](out_dir) if name in WRITES_FILES else FIXTURES[name]()
        text = json.dumps(data, separators=(",", ":"), allow_nan=False)
        (out_dir / f"{name}.json").write_text(text)


class Comparison:
    """Walks a generated and a committed file together: structure exactly, numbers within a
    tolerance, the source block (which names the torch that ran) only as a note."""

    def __init__(self):
        self.problems, self.notes = [], []
        self.largest = {}  # tolerance -> (difference, path)
        self.numbers = self.not_identical = 0

    def walk(self, new, old, path, tolerance):
        if isinstance(old, dict) and isinstance(new, dict):
            if old.get("dtype") == "float32":
                tolerance = max(tolerance, FLOAT32_TOLERANCE)
            if list(new) != list(old):
                self.problems.append(f"{path}: keys {list(new)}, committed {list(old)}")
            for key in [key for key in old if key in new]:
                key_tolerance = LEAST_SQUARES_TOLERANCE if key in LEAST_SQUARES_KEYS else tolerance
                self.walk(new[key], old[key], f"{path}.{key}", key_tolerance)
        elif isinstance(old, list) and isinstance(new, list):
            if len(new) != len(old):
                self.problems.append(f"{path}: length {len(new)}, committed {len(old)}")
            for i, (a, b) in enumerate(zip(new, old)):
                self.walk(a, b, f"{path}[{i}]", tolerance)
        elif type(new) is not type(old):  # also bool vs number and int vs float
            self.problems.append(f"{path}: {new!r}, committed {old!r}")
        elif isinstance(old, float) or (isinstance(old, int) and not isinstance(old, bool)):
            difference = abs(new - old) / max(abs(old), 1.0)
            self.numbers += 1
            self.not_identical += new != old
            if difference > self.largest.get(tolerance, (-1.0, ""))[0]:
                self.largest[tolerance] = (difference, path)
            if difference > tolerance:
                self.problems.append(f"{path}: {new!r}, committed {old!r}")
        elif new != old:
            if path.startswith("$.source."):
                self.notes.append(f"{path}: {new!r}, committed {old!r}")
            else:
                self.problems.append(f"{path}: {new!r}, committed {old!r}")


def check(names):
    all_equal = True
    with tempfile.TemporaryDirectory() as tmp:
        write(names, Path(tmp))
        for name in names:
            committed = REFERENCE_DIR / f"{name}.json"
            if not committed.exists():
                print(f"{name}.json: not committed yet")
                all_equal = False
                continue
            new = json.loads((Path(tmp) / f"{name}.json").read_text())
            old = json.loads(committed.read_text())
            comparison = Comparison()
            comparison.walk(new, old, "$", EXACT_TOLERANCE)
            equal = not comparison.problems
            all_equal &= equal
            print(f"{name}.json: {'equal' if equal else 'DIFFERENT'}, "
                  f"{comparison.not_identical} of {comparison.numbers} numbers not bit-identical")
            for tolerance, (difference, path) in sorted(comparison.largest.items()):
                print(f"  largest difference {difference:.3g} at {path} (tolerance {tolerance:g})")
            for line in comparison.notes:
                print(f"  note {line}")
            for line in comparison.problems[:20]:
                print(f"  {line}")
            if len(comparison.problems) > 20:
                print(f"  ... {len(comparison.problems) - 20} more")
        if WRITES_FILES & set(names):
            all_equal &= check_files(Path(tmp) / "checkpoints", REFERENCE_DIR / "checkpoints",
                                     complete=WRITES_FILES <= set(names))
    return all_equal


def check_files(new_dir, old_dir, complete=True):
    """The checkpoint files: configurations as text, states and cache data tensor by tensor.
    With complete False (not every fixture that writes files ran), just the files written."""
    names = sorted(p.name for p in new_dir.iterdir())
    committed = sorted(p.name for p in old_dir.iterdir()) if old_dir.exists() else []
    if names != committed if complete else not set(names) <= set(committed):
        print(f"checkpoints/: files {names}, committed {committed}")
        return False
    comparison = Comparison()
    for name in names:
        if name.endswith(".yml"):
            if (new_dir / name).read_text() != (old_dir / name).read_text():
                comparison.problems.append(f"{name}: differs")
            continue
        new, old = (torch.load(d / name) for d in (new_dir, old_dir))
        tensors = list(old.values()) if isinstance(old, dict) else [old] if old is not None else []
        float32 = any(t.dtype == torch.float32 for t in tensors)
        as_lists = lambda value: ({k: v.tolist() for k, v in value.items()}
                                  if isinstance(value, dict) else
                                  value.tolist() if value is not None else None)
        comparison.walk(as_lists(new), as_lists(old), name,
                        FLOAT32_TOLERANCE if float32 else EXACT_TOLERANCE)
    equal = not comparison.problems
    print(f"checkpoints/: {'equal' if equal else 'DIFFERENT'}, {len(names)} files, "
          f"{comparison.not_identical} of {comparison.numbers} numbers not bit-identical")
    for line in comparison.problems[:20]:
        print(f"  {line}")
    return equal


def roundtrip(kanbench):
    """kanbench -> pykan: every committed checkpoint through import-pykan and export-pykan, and
    models kanbench trained, loaded by pykan's KAN.loadckpt; pykan's outputs against kanbench's
    (pykan's committed ones, and `kanbench predict`'s). Float64 to 1e-12, float32 to 1e-6."""
    from kan.MultKAN import MultKAN

    def run(*args):
        done = subprocess.run([kanbench, *map(str, args)], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"kanbench {' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}")

    def pykan_outputs(prefix, dtype, x):
        torch.set_default_dtype(dtype)
        try:
            with torch.no_grad():
                return MultKAN.loadckpt(str(prefix))(x.to(dtype))
        finally:
            torch.set_default_dtype(torch.float64)

    def difference(y, reference):
        return ((y.double() - reference.double()).abs().max() /
                reference.double().abs().max()).item()

    all_within = True
    def report(label, dtype, value):
        nonlocal all_within
        limit = 1e-12 if dtype == torch.float64 else 1e-6
        all_within &= value <= limit
        print(f"{label}: max relative difference {value:.3g} ({'ok' if value <= limit else 'OVER'} "
              f"{limit:g})")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cases = json.loads((REFERENCE_DIR / "pykan_checkpoints.json").read_text())["cases"]
        for case in cases:
            dtype = getattr(torch, case["dtype"])
            run("import-pykan", REFERENCE_DIR / case["prefix"], "--out", tmp / case["name"])
            run("export-pykan", tmp / case["name"] / "model.pt", tmp / f"{case['name']}_back")
            y = pykan_outputs(tmp / f"{case['name']}_back", dtype, torch.tensor(case["x"]))
            report(f"{case['name']} (pykan -> kanbench -> pykan)", dtype,
                   difference(y, torch.tensor(case["y"])))
        trained = [("mult", ["--width", "2,[2,1],1", "--mult-arity", "3", "--affine-trainable"],
                    torch.float64),
                   ("plain", ["--width", "2,5,1", "--dtype", "float32"], torch.float32)]
        torch.manual_seed(7)
        x = torch.rand(32, 2, dtype=torch.float64) * 2.4 - 1.2
        (tmp / "x.csv").write_text("".join(",".join(map(repr, row)) + "\n" for row in x.tolist()))
        for name, arguments, dtype in trained:
            out = tmp / f"fit_{name}"
            run("fit", *arguments, "--steps", 5, "--train-num", 200, "--test-num", 50,
                "--trace-steps", 0, "--out", out)
            run("export-pykan", out / "model.pt", out / "pykan")
            run("predict", "--model", out / "model.pt", "--input", tmp / "x.csv", "--out",
                out / "y.csv")
            expected = torch.tensor([[float(v) for v in line.split(",")]
                                     for line in (out / "y.csv").read_text().split()
                                     if line and not line[0].isalpha()], dtype=torch.float64)
            y = pykan_outputs(out / "pykan", dtype, x)
            report(f"kanbench fit {name} ({case_dtype(dtype)}; kanbench -> pykan)", dtype,
                   difference(y, expected))
    return all_within


def case_dtype(dtype):
    return str(dtype).removeprefix("torch.")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=list(FIXTURES), metavar="NAME",
                        help=f"generate only this file (repeatable): {', '.join(FIXTURES)}")
    parser.add_argument("--out", type=Path, default=REFERENCE_DIR,
                        help="the folder to write into (default: tests/reference/pykan)")
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed files instead of writing them")
    parser.add_argument("--roundtrip", metavar="KANBENCH",
                        help="check that pykan loads kanbench's export-pykan files (needs a "
                        "built kanbench executable)")
    args = parser.parse_args()

    check_pykan()
    # Every fixture is float64, on the CPU, single-threaded so sums run in one order.
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    names = args.only or list(FIXTURES)
    if args.roundtrip:
        sys.exit(0 if roundtrip(args.roundtrip) else 1)
    if args.check:
        sys.exit(0 if check(names) else 1)
    write(names, args.out)
    print(f"wrote {', '.join(names)} into {args.out}")


if __name__ == "__main__":
    main()
