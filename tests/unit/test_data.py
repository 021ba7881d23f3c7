"""The bundled datasets, read from scikit-learn's files without importing scikit-learn, are scikit-learn's."""

import subprocess
import sys

import numpy as np
import pytest
from sklearn import datasets

from analysis.data import load_dataset


@pytest.mark.parametrize("name", ["iris", "wine", "breast_cancer", "digits"])
def test_bundled_datasets_equal_scikit_learns_loaders(name):
    ours, theirs = load_dataset(name), getattr(datasets, f"load_{name}")()
    assert ours.X.dtype == np.float64 and np.array_equal(ours.X, theirs.data)
    assert np.array_equal(ours.y, theirs.target)


def test_loading_a_bundled_dataset_does_not_import_scikit_learn():
    script = ("import sys; from analysis.data import load_dataset; X = load_dataset('iris').X;"
              " print(X.shape, 'sklearn' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["(150,", "4)", "False"]
