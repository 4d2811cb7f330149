"""qplace.Session runs models on numpy arrays with the outputs `qplace run` writes."""
import numpy as np
import pytest

import qplace
from conftest import run_cli


def test_outputs_equal_the_cli(cli, cls_model, rec_model, cls_npz, rec_npz, tmp_path):
    for model, npz in ((cls_model, cls_npz), (rec_model, rec_npz)):
        x = np.load(npz)["x"][:1]
        np.savez(tmp_path / "in.npz", x=x)
        run_cli(cli, "run", model, "--inputs", tmp_path / "in.npz", "--output",
                tmp_path / "out.npz")
        want = np.load(tmp_path / "out.npz")
        s = qplace.Session(model, shapes={"x": x.shape})
        got = s.run({"x": x})
        assert list(got) == s.output_names and set(got) == set(want.files)
        for k in got:
            assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k
        assert np.array_equal(s.run(x)[s.output_names[0]], got[s.output_names[0]])


def test_int8_path_on_a_quantized_model(cli, cls_model, cls_npz, tmp_path):
    q = tmp_path / "q.onnx"
    qplace.quantize(onnx_path=cls_model, calibration_data=cls_npz, output_path=str(q),
                    high_precision_dtype="fp32")
    x = np.load(cls_npz)["x"][:1]
    np.savez(tmp_path / "in.npz", x=x)
    run_cli(cli, "run", q, "--inputs", tmp_path / "in.npz", "--output", tmp_path / "out.npz")
    want = np.load(tmp_path / "out.npz")["softmax_0.tmp_0"]
    auto = qplace.Session(str(q), int8="auto")
    off = qplace.Session(str(q), int8="off")
    a, o = auto.run({"x": x})["softmax_0.tmp_0"], off.run({"x": x})["softmax_0.tmp_0"]
    assert np.array_equal(a, want)  # `qplace run` defaults to the integer path
    assert np.allclose(a, o, atol=0.05)
    rows, fallback = auto.int8_decisions()
    assert fallback == "" and len(rows) > 50 and sum(r["fused"] for r in rows) > len(rows) / 2
    assert off.int8_decisions() == ([], "")
    exact = qplace.Session(str(q), int8="exact")  # the oracle's bits, in fewer passes
    assert np.array_equal(exact.run({"x": x})["softmax_0.tmp_0"], o)
    assert auto.isa == qplace.isa() and qplace.isa()


def test_bad_inputs(cls_model, tmp_path):
    s = qplace.Session(cls_model)
    x = np.zeros((1, 3, 48, 192), np.float32)
    with pytest.raises(qplace.UsageError, match="astype"):
        s.run({"x": x.astype(np.float64)})
    with pytest.raises(qplace.UsageError, match="not inputs: y"):
        s.run({"y": x})
    with pytest.raises(qplace.UsageError, match="2 inputs given"):
        s.run([x, x])
    with pytest.raises(qplace.BadInputError, match="rank|dim"):
        s.run({"x": np.zeros((3, 48, 192), np.float32)})
    with pytest.raises(qplace.UsageError, match="int8"):
        qplace.Session(cls_model, int8="on")
    with pytest.raises(qplace.BadInputError, match="'y'"):
        qplace.Session(cls_model, shapes={"y": (1, 2)})
    with pytest.raises(qplace.UsageError, match="sequence of integers"):
        qplace.Session(cls_model, shapes={"x": "1x3"})
    with pytest.raises(qplace.FileError):
        qplace.Session(str(tmp_path / "none.onnx"))
    assert s.run({"x": x})  # the session still works after refusals
