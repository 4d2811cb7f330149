"""Fixtures of the Python package's tests (run by ctest as python/pytest, or by hand:
QPLACE_LIBRARY=build/libqplace.so QPLACE_CLI=build/qplace python3 -m pytest python/tests).

  QPLACE_CLI        the qplace binary the results are compared with (default: ../../build/qplace)
  QPLACE_MODELS     the real models folder (default: ../../.cache/models); a test needing a model
                    that is absent skips, or fails when QP_REQUIRE_REAL_MODELS=1
  QPLACE_ABI_DUMP   the abi_dump program (test_abi.py)
"""
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("QPLACE_LIBRARY", os.path.join(REPO, "build", "libqplace.so.0"))

CLS = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
REC = "ch_PP-OCRv4_rec_infer.onnx"
CLS_NPZ = os.path.join(REPO, "tests", "integration", "calibrate_data", "cls.npz")


def _need(path):
    if not os.path.exists(path):
        if os.environ.get("QP_REQUIRE_REAL_MODELS") == "1":
            pytest.fail("%s is missing (run scripts/setup.sh)" % path)
        pytest.skip("%s is missing" % path)
    return path


@pytest.fixture(scope="session")
def cli():
    return _need(os.environ.get("QPLACE_CLI", os.path.join(REPO, "build", "qplace")))


@pytest.fixture(scope="session")
def models():
    return os.environ.get("QPLACE_MODELS", os.path.join(REPO, ".cache", "models"))


@pytest.fixture(scope="session")
def cls_model(models):
    return _need(os.path.join(models, CLS))


@pytest.fixture(scope="session")
def rec_model(models):
    return _need(os.path.join(models, REC))


@pytest.fixture(scope="session")
def cls_npz():
    return _need(CLS_NPZ)


@pytest.fixture(scope="session")
def rec_npz(tmp_path_factory):
    """Four rec inputs (1x3x48x320 each, seeded, in [-1, 1] as PaddleOCR normalises)."""
    p = tmp_path_factory.mktemp("rec") / "rec.npz"
    rng = np.random.default_rng(7)
    np.savez(p, x=(rng.random((4, 3, 48, 320), dtype=np.float32) * 2 - 1))
    return str(p)


def run_cli(cli, *args, ok=True):
    p = subprocess.run([cli, *map(str, args)], capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise AssertionError("qplace %s: exit %d\n%s" % (" ".join(map(str, args)), p.returncode,
                                                          p.stderr))
    return p


def read(path):
    with open(path, "rb") as f:
        return f.read()
