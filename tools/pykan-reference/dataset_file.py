"""Writes tests/reference/pykan/create_dataset.pt: a dataset as pykan 0.2.8's create_dataset
returns it (a dict of train_input, train_label, test_input, test_label; float32, torch's default),
saved as its users save one, torch.save(dataset, FILE). The CLI tests read it with
`kanbench run --model ... --data` (tests/test_cli.cpp); they never need Python.

    PY=$(tools/pykan-reference/setup.sh)
    $PY tools/pykan-reference/dataset_file.py              # rewrite the committed file
    $PY tools/pykan-reference/dataset_file.py --out DIR    # or write into DIR
"""

import argparse
from pathlib import Path

import torch
from kan.utils import create_dataset

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "tests" / "reference" / "pykan"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REFERENCE_DIR)
    args = parser.parse_args()
    # pykan's standard example, f(x, y) = exp(sin(pi x) + y^2), small enough to commit.
    f = lambda x: torch.exp(torch.sin(torch.pi * x[:, [0]]) + x[:, [1]] ** 2)
    dataset = create_dataset(f, n_var=2, train_num=64, test_num=32, seed=0)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "create_dataset.pt"
    torch.save(dataset, path)
    shapes = ", ".join(f"{key} {tuple(value.shape)}" for key, value in dataset.items())
    print(f"{path}: {shapes}")


if __name__ == "__main__":
    main()
