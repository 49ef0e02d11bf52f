"""Writes the data files of tests/reference/data: small NumPy arrays in every layout kanbench's
data readers take (kan::load_dataset, docs/formats.md "Data files"), so that the tests read real
np.save / np.savez output without needing Python. CSV fixtures are written by the tests
themselves; pykan's torch.save'd dict is tests/reference/pykan/create_dataset.pt.

    python3 -m venv ~/.cache/kanbench/venv-numpy
    ~/.cache/kanbench/venv-numpy/bin/pip install numpy==2.4.6
    ~/.cache/kanbench/venv-numpy/bin/python tools/data-fixtures/generate.py [--out DIR]

Every array is a function of its row and column, which tests/test_data_file.cpp recomputes:
  table (12, 4): table[i, j] = (4 i + j) / 8 - 3 (exact in float32 and float64)
  small (5, 2):  small[i, j] = 2 i + j            (exact in every dtype)
  labels (12,):  labels[i] = i % 3
"""

import argparse
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[2] / "tests" / "reference" / "data"


def table():
    i, j = np.meshgrid(np.arange(12), np.arange(4), indexing="ij")
    return (4 * i + j) / 8.0 - 3.0


def small():
    i, j = np.meshgrid(np.arange(5), np.arange(2), indexing="ij")
    return 2 * i + j


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    t = table()
    labels = np.arange(12) % 3

    np.save(out / "table.npy", t)
    np.save(out / "table_float32.npy", t.astype(np.float32))
    np.save(out / "table_fortran.npy", np.asfortranarray(t))
    np.save(out / "table_big_endian.npy", t.astype(">f8"))
    np.save(out / "labels_1d.npy", labels.astype(np.int64))
    for version in [(2, 0), (3, 0)]:
        with open(out / f"table_v{version[0]}.npy", "wb") as f:
            np.lib.format.write_array(f, t, version=version)
    # Every integer dtype in both byte orders, and bool (0/1).
    s = small()
    for dtype in ["i1", "u1", "<i2", ">i2", "<i4", ">i4", "<i8", ">i8", "<u2", ">u2", "<u4",
                  ">u4", "<u8", ">u8", "<f4", ">f4"]:
        name = dtype.replace("<", "le_").replace(">", "be_")
        np.save(out / f"small_{name}.npy", s.astype(dtype))
    np.save(out / "small_bool.npy", (s % 2).astype(bool))

    # .npz: x and y (y 1-D), stored and deflated; pykan's four keys; one array (arr_0).
    x, y = t[:, :3], t[:, 3]
    np.savez(out / "xy.npz", x=x, y=y)
    np.savez_compressed(out / "xy_compressed.npz", x=x, y=y)
    np.savez(out / "classes.npz", x=x, y=labels)
    np.savez_compressed(out / "pykan.npz", train_input=x[:8], train_label=t[:8, 3:],
                        test_input=x[8:], test_label=t[8:, 3:])
    np.savez(out / "one_array.npz", t)
    for path in sorted(out.iterdir()):
        print(f"{path.name}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
