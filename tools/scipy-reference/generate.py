"""Writes tests/reference/scipy/functions.csv: reference values of kanbench's function catalogue
(kan/src/data/function_catalogue.cpp, docs/functions.md) that tests/test_function_catalogue.cpp checks
the C++ functions against to 1e-12, without Python.

    python3 -m venv ~/.cache/kanbench/venv-scipy
    ~/.cache/kanbench/venv-scipy/bin/pip install -r tools/scipy-reference/requirements.txt
    ~/.cache/kanbench/venv-scipy/bin/python tools/scipy-reference/generate.py

    generate.py             rewrite the CSV
    generate.py --check     regenerate into memory and compare with the committed CSV (exit 1
                            where a value differs by more than 1e-15 relative, or a row is missing)
    generate.py --accuracy  also print how far SciPy's special-function values are from 30-digit
                            mpmath at the same points (why the C++ test floors its tolerance)

The special functions are SciPy's (scipy.special at the pinned version); the Feynman equations are
the KAN paper's dimensionless forms computed with numpy by pykan 0.2.8's kan/feynman.py formulas
(transcribed below with torch -> numpy, x[:,[i]] -> x[i]) at a point that turns pykan's
dimensional equation into the dimensionless one. The domains must match the C++ catalogue's ranges
(the C++ test checks every point lies inside them).
"""

import argparse
import importlib.metadata
import io
import math
import sys
import zlib
from pathlib import Path

import numpy as np
import scipy.special as sp

OUT = Path(__file__).resolve().parents[2] / "tests" / "reference" / "scipy" / "functions.csv"
PI = np.pi

# ---------------------------------------------------------------------------------------------
# The catalogue: name -> (ranges, function of the input columns). Ranges as in the C++ catalogue.

SPECIAL = {
    "ellipj": ([(-2.0, 2.0), (0.0, 1.0)], lambda u, m: sp.ellipj(u, m)[0]),
    "ellipkinc": ([(-PI / 2, PI / 2), (0.0, 0.9)], sp.ellipkinc),
    "ellipeinc": ([(-PI / 2, PI / 2), (0.0, 0.9)], sp.ellipeinc),
    "jv": ([(0.0, 3.0), (0.0, 10.0)], sp.jv),
    "yv": ([(0.0, 3.0), (1.0, 10.0)], sp.yv),
    "kv": ([(0.0, 3.0), (1.0, 10.0)], sp.kv),
    "iv": ([(0.0, 3.0), (0.0, 5.0)], sp.iv),
}
for _m in (0, 1, 2):
    SPECIAL[f"lpmv_{_m}"] = ([(0.0, 3.0), (-0.9, 1.0)], lambda nu, x, m=_m: sp.lpmv(m, nu, x))


def sph_harm_real(m, n):
    """Re sph_harm(m, n, theta, phi), theta azimuthal, phi polar: SciPy's deprecated API, which
    SciPy >= 1.15 spells sph_harm_y(n, m, phi, theta). Both where both exist."""

    def f(theta, phi):
        y = sp.sph_harm_y(n, m, phi, theta).real
        if hasattr(sp, "sph_harm"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                old = sp.sph_harm(m, n, theta, phi).real
            assert np.allclose(old, y, rtol=1e-15, atol=1e-16), "sph_harm != sph_harm_y"
        return y

    return f


for _m, _n in ((0, 1), (1, 1), (0, 2), (1, 2), (2, 2)):
    SPECIAL[f"sph_harm_{_m}{_n}"] = ([(0.0, 2 * PI), (0.0, PI)], sph_harm_real(_m, _n))

# pykan 0.2.8, kan/feynman.py, get_feynman_dataset(name): each equation's f with torch -> numpy.
PYKAN = {
    "I.6.20": lambda x: np.exp(-x[0]**2 / (2 * x[1]**2)) / np.sqrt(2 * PI * x[1]**2),
    "I.6.20b": lambda x: np.exp(-(x[0] - x[1])**2 / (2 * x[2]**2)) / np.sqrt(2 * PI * x[2]**2),
    "I.9.18": lambda x: x[0] * x[1] * x[2] / ((x[3] - x[4])**2 + (x[5] - x[6])**2 + (x[7] - x[8])**2),
    "I.12.11": lambda x: x[0] * (x[1] + x[2] * x[3] * np.sin(x[4])),
    "I.13.12": lambda x: x[0] * x[1] * x[2] * (1 / x[4] - 1 / x[3]),
    "I.18.4": lambda x: (x[0] * x[1] + x[2] * x[3]) / (x[0] + x[2]),  # the first of the two
    "I.26.2": lambda x: np.arcsin(x[0] * np.sin(x[1])),
    "I.27.6": lambda x: 1 / (1 / x[0] + x[2] / x[1]),
    "I.29.16": lambda x: np.sqrt(x[0]**2 + x[1]**2 - 2 * x[0] * x[1] * np.cos(x[2] - x[3])),
    "I.30.3": lambda x: x[0] * np.sin(x[1] * x[2] / 2)**2 / np.sin(x[2] / 2)**2,
    "I.30.5": lambda x: np.arcsin(x[0] / (x[1] * x[2])),
    "I.37.4": lambda x: x[0] + x[1] + 2 * np.sqrt(x[0] * x[1]) * np.cos(x[2]),
    "I.40.1": lambda x: x[0] * np.exp(-x[1] * x[2] * x[3] / (x[4] * x[5])),
    "I.44.4": lambda x: x[0] * x[1] * x[2] * np.log(x[4] / x[3]),
    "I.50.26": lambda x: x[0] * (np.cos(x[2] * x[3]) + x[1] * np.cos(x[2] * x[3])**2),
    "II.2.42": lambda x: x[0] * (x[2] - x[1]) * x[3] / x[4],
    "II.6.15a": lambda x: 3 / (4 * PI * x[0]) * x[1] * x[2] / x[5]**5 * np.sqrt(x[3]**2 + x[4]**2),
    "II.11.17": lambda x: x[0] * (1 + x[1] * x[2] * np.cos(x[3]) / (x[4] * x[5])),
    "II.11.27": lambda x: x[0] * x[1] / (1 - x[0] * x[1] / 3) * x[2] * x[3],
    "II.35.18": lambda x: x[0] / (np.exp(x[1] * x[2] / (x[3] * x[4])) + np.exp(-x[1] * x[2] / (x[3] * x[4]))),
    "II.36.38": lambda x: x[0] * x[1] / (x[2] * x[3]) + x[0] * x[4] * x[5] / (x[6] * x[7]**2 * x[2] * x[3]),
    "II.38.3": lambda x: x[0] * x[1] * x[2] / x[3],
    "III.9.52": lambda x: x[0] * x[1] * x[2] / x[3] * np.sin((x[4] - x[5]) * x[2] / 2)**2 / ((x[4] - x[5]) * x[2] / 2)**2,
    "III.10.19": lambda x: x[0] * np.sqrt(x[1]**2 + x[2]**2 + x[3]**2),
    "III.17.37": lambda x: x[0] * (1 + x[1] * np.cos(x[2])),
}


def pykan(name, *args):
    """pykan's equation `name` at the point whose coordinates are args (arrays or numbers)."""
    n = len(args)
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    cols = [np.broadcast_to(np.asarray(a, dtype=np.float64), shape) for a in args]
    assert n == {"I.6.20": 2, "I.6.20b": 3, "I.9.18": 9, "I.12.11": 5, "I.13.12": 5, "I.18.4": 4,
                 "I.26.2": 2, "I.27.6": 3, "I.29.16": 4, "I.30.3": 3, "I.30.5": 3, "I.37.4": 3,
                 "I.40.1": 6, "I.44.4": 5, "I.50.26": 4, "II.2.42": 5, "II.6.15a": 6,
                 "II.11.17": 6, "II.11.27": 4, "II.35.18": 5, "II.36.38": 8, "II.38.3": 4,
                 "III.9.52": 6, "III.10.19": 4, "III.17.37": 3}[name], name
    with np.errstate(invalid="ignore", divide="ignore"):
        return PYKAN[name](cols)


def iii_9_52(a, b, c):
    y = pykan("III.9.52", a, 1, 1, 1, b, c)
    # pykan's form is 0/0 at b = c; the catalogue takes the limit, a.
    return np.where(b == c, a, y)


TWO_PI = 2 * PI
# The paper's dimensionless equations: name -> (ranges, value). Each is pykan's dimensional
# equation at a point that makes it the dimensionless one (the mapping is the catalogue's
# notes: a = G m1 m2 / x1^2 with x1 = 1, and so on), except I.15.3x and I.16.6 (below).
FEYNMAN = {
    "I.6.2": ([(-1.0, 1.0), (0.5, 2.0)], lambda t, s: pykan("I.6.20", t, s)),
    "I.6.2b": ([(-1.5, 1.5), (-1.5, 1.5), (0.5, 2.0)], lambda t, t1, s: pykan("I.6.20b", t, t1, s)),
    "I.9.18": ([(-1.0, 1.0), (-1.0, -0.5), (-1.0, -0.5), (0.5, 1.0), (-1.0, -0.5), (0.5, 1.0)],
               lambda a, b, c, d, e, f: pykan("I.9.18", a, 1, 1, 1, b, c, d, e, f)),
    "I.12.11": ([(-1.0, 1.0), (0.0, TWO_PI)], lambda a, t: pykan("I.12.11", 1, 1, a, 1, t)),
    "I.13.12": ([(0.0, 1.0), (0.5, 2.0)], lambda a, b: pykan("I.13.12", a, 1, 1, 1, b)),
    # pykan's (x - u t) / sqrt(1 - u^2/c^2) reaches (1 - a) / sqrt(1 - b^2) only through
    # t = a / b, undefined at b = 0: the formula itself.
    "I.15.3x": ([(-1.0, 1.0), (-0.9, 0.9)], lambda a, b: (1 - a) / np.sqrt(1 - b**2)),
    # pykan 0.2.8's I.16.6 has u v in the numerator (a slip): the paper's formula itself.
    "I.16.6": ([(-0.8, 0.8), (-0.8, 0.8)], lambda a, b: (a + b) / (1 + a * b)),
    "I.18.4": ([(0.5, 2.0), (-1.0, 1.0)], lambda a, b: pykan("I.18.4", 1, 1, a, b)),
    "I.26.2": ([(0.0, 0.99), (0.0, TWO_PI)], lambda n, t: pykan("I.26.2", n, t)),
    "I.27.6": ([(0.5, 2.0), (0.25, 2.0)], lambda a, b: pykan("I.27.6", 1, 1, a * b)),
    "I.29.16": ([(-0.9, 0.9), (0.0, TWO_PI), (0.0, TWO_PI)],
                lambda a, t1, t2: pykan("I.29.16", 1, a, t1, t2)),
    "I.30.3": ([(0.0, 4.0), (0.4 * PI, 1.6 * PI)], lambda n, t: pykan("I.30.3", 1, n, t)),
    "I.30.5": ([(-1.0, 1.0), (1.0, 1.5)], lambda a, n: pykan("I.30.5", a, n, 1)),
    "I.37.4": ([(0.1, 1.0), (0.0, TWO_PI)], lambda a, d: pykan("I.37.4", 1, a, d)),
    "I.40.1": ([(0.0, 1.0), (-1.0, 1.0)], lambda n0, a: pykan("I.40.1", n0, a, 1, 1, 1, 1)),
    "I.44.4": ([(0.0, 1.0), (0.5, 2.0)], lambda n, a: pykan("I.44.4", n, 1, 1, 1, a)),
    "I.50.26": ([(0.0, TWO_PI), (0.0, 1.0)], lambda a, al: pykan("I.50.26", 1, al, a, 1)),
    "II.2.42": ([(0.5, 2.0), (0.0, 1.0)], lambda a, b: pykan("II.2.42", 1, 1, a, b, 1)),
    "II.6.15a": ([(0.0, 1.0), (0.0, 1.0), (0.0, 1.0)],
                 lambda a, b, c: pykan("II.6.15a", 3, 1, c, a, b, 1)),
    "II.11.7": ([(0.0, 1.0), (-1.0, 1.0), (0.0, TWO_PI)],
                lambda n0, a, t: pykan("II.11.17", n0, a, 1, t, 1, 1)),
    "II.11.27": ([(0.0, 1.0), (0.0, 2.0)], lambda n, al: pykan("II.11.27", n, al, 1, 1)),
    "II.35.18": ([(0.0, 1.0), (0.0, 1.0)], lambda n0, a: pykan("II.35.18", n0, a, 1, 1, 1)),
    "II.36.38": ([(0.0, 1.0), (0.0, 1.0), (0.0, 1.0)],
                 lambda a, al, b: pykan("II.36.38", 1, a, 1, 1, al, b, 1, 1)),
    "II.38.3": ([(0.0, 1.0), (0.5, 2.0)], lambda a, b: pykan("II.38.3", 1, 1, a, b)),
    "III.9.52": ([(0.0, 1.0), (0.0, PI), (0.0, PI)], iii_9_52),
    "III.10.19": ([(0.0, 1.0), (0.0, 1.0)], lambda a, b: pykan("III.10.19", 1, 1, a, b)),
    "III.17.37": ([(0.0, 1.0), (0.0, 1.0), (0.0, TWO_PI)],
                  lambda al, be, t: pykan("III.17.37", be, al, t)),
}

BUILTIN = {
    "toy": ([(-1.0, 1.0)] * 2, lambda x0, x1: np.exp(np.sin(PI * x0) + x1**2)),
    "xy": ([(-1.0, 1.0)] * 2, lambda x0, x1: x0 * x1),
    "exp_sin4": ([(-1.0, 1.0)] * 4, lambda a, b, c, d: np.exp(
        (np.sin(PI * (a**2 + b**2)) + np.sin(PI * (c**2 + d**2))) / 2)),
    "highdim100": ([(-1.0, 1.0)] * 100,
                   lambda *x: np.exp(np.mean(np.sin(PI / 2 * np.stack(x))**2, axis=0))),
    "feynman_I.6.20a": ([(-3.0, 3.0)], lambda t: np.exp(-t**2 / 2) / np.sqrt(2 * PI)),
}


def catalogue():
    """(name, ranges, function) in the C++ catalogue's order."""
    for name, (ranges, f) in BUILTIN.items():
        yield name, ranges, f
    for name, (ranges, f) in SPECIAL.items():
        yield name, ranges, f
    for name, (ranges, f) in FEYNMAN.items():
        yield "feynman_" + name, ranges, f


def points(name, ranges):
    """Inputs (n_var arrays) across the domain: its centre, corners, every edge, random points."""
    n = len(ranges)
    lo = np.array([r[0] for r in ranges])
    hi = np.array([r[1] for r in ranges])
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    rows = [(lo + hi) / 2, lo.copy(), hi.copy()]
    if n <= 3:  # every corner
        for k in range(1, 2**n - 1):
            rows.append(np.where([(k >> i) & 1 for i in range(n)], hi, lo))
    for i in range(min(n, 6)):  # each variable at both ends of its range, the others random
        for edge in (lo[i], hi[i]):
            row = rng.uniform(lo, hi)
            row[i] = edge
            rows.append(row)
    total = 10 if n > 6 else 40 if n > 2 else 30
    while len(rows) < total:
        rows.append(rng.uniform(lo, hi))
    x = np.array(rows[:max(total, len(rows))])
    return [x[:, i] for i in range(n)]


def generate():
    out = io.StringIO()
    versions = {p: importlib.metadata.version(p) for p in ("numpy", "scipy")}
    out.write("# Reference values of kanbench's function catalogue, written by "
              "tools/scipy-reference/generate.py\n")
    out.write(f"# numpy {versions['numpy']}, scipy {versions['scipy']}, Python "
              f"{sys.version.split()[0]}; special functions from scipy.special, Feynman equations\n")
    out.write("# by numpy from pykan 0.2.8's kan/feynman.py formulas. Columns: function name, "
              "value, inputs x0, x1, ... (17 significant digits)\n")
    out.write("function,value,inputs\n")
    for name, ranges, f in catalogue():
        cols = points(name, ranges)
        values = np.asarray(f(*cols), dtype=np.float64)
        if not np.all(np.isfinite(values)):
            bad = np.flatnonzero(~np.isfinite(values))[0]
            raise SystemExit(f"{name}: {values[bad]} at {[c[bad] for c in cols]}")
        for j, v in enumerate(values):
            out.write(",".join([name, f"{v:.17g}"] + [f"{c[j]:.17g}" for c in cols]) + "\n")
    return out.getvalue()


def read_rows(text):
    rows = {}
    for line in text.splitlines():
        if line.startswith("#") or line.startswith("function,"):
            continue
        cells = line.split(",")
        rows[(cells[0], tuple(cells[2:]))] = float(cells[1])
    return rows


def accuracy():
    """SciPy against mpmath at 30 digits, per special function: the largest relative error, and
    the largest error relative to the function's scale (its largest |value| at the points)."""
    import mpmath as mp

    mp.mp.dps = 30
    exact = {
        "ellipj": lambda u, m: mp.ellipfun("sn", u, m=m),
        "ellipkinc": lambda p, m: mp.ellipf(p, m),
        "ellipeinc": lambda p, m: mp.ellipe(p, m),
        "jv": mp.besselj, "yv": mp.bessely, "kv": mp.besselk, "iv": mp.besseli,
    }
    for m in (0, 1, 2):
        exact[f"lpmv_{m}"] = lambda nu, x, m=m: mp.legenp(nu, m, x)
    for m, n in ((0, 1), (1, 1), (0, 2), (1, 2), (2, 2)):
        exact[f"sph_harm_{m}{n}"] = lambda t, p, m=m, n=n: mp.re(mp.spherharm(n, m, p, t))
    for name, (ranges, f) in SPECIAL.items():
        cols = points(name, ranges)
        got = f(*cols)
        want = np.array([float(exact[name](*(mp.mpf(float(c[j])) for c in cols)))
                         for j in range(len(cols[0]))])
        # mpmath's legenp is not finite at x = 1 for m > 0 (SciPy's 0 is the limit): skipped.
        keep = np.isfinite(want)
        got, want = got[keep], want[keep]
        error = np.abs(got - want)
        relative = error[want != 0] / np.abs(want[want != 0])
        print(f"{name:12s} scipy vs mpmath at {keep.sum()} points: relative {np.max(relative):.1e}, "
              f"of the scale (largest |value|) {np.max(error) / np.max(np.abs(want)):.1e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed CSV")
    parser.add_argument("--accuracy", action="store_true", help="SciPy against mpmath")
    args = parser.parse_args()
    text = generate()
    if args.accuracy:
        accuracy()
    if not args.check:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text)
        print(f"wrote {OUT} ({text.count(chr(10))} lines)")
        return 0
    new, old = read_rows(text), read_rows(OUT.read_text())
    worst, missing = 0.0, sorted(set(new) ^ set(old))
    for key in set(new) & set(old):
        worst = max(worst, abs(new[key] - old[key]) / max(abs(old[key]), 1e-300))
    print(f"{len(old)} committed rows; largest relative difference {worst:.1e}; "
          f"{len(missing)} rows in only one of them")
    return 0 if worst <= 1e-15 and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
