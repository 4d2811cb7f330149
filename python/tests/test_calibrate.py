"""qplace.calibrate and Ranges: the CLI's ranges file and TensorRT cache, byte for byte."""
import json

import numpy as np
import pytest

import qplace
from conftest import read, run_cli


def test_calibrate_matches_the_cli(cli, cls_model, cls_npz, tmp_path):
    for method, extra in (("entropy", []), ("max", []), ("percentile", ["--percentile", "99.9"])):
        a, b = tmp_path / ("py_%s.json" % method), tmp_path / ("cl_%s.json" % method)
        ca, cb = tmp_path / "py.cache", tmp_path / "cl.cache"
        kw = {"percentile": 99.9} if extra else {}
        r = qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz,
                             calibration_method=method, output_path=str(a),
                             trt_cache_path=str(ca), **kw)
        run_cli(cli, "calibrate", "--onnx_path", cls_model, "--calibration_data_path", cls_npz,
                "--calibration_method", method, "--output_path", b, "--trt_cache_out", cb,
                "--quiet", *extra)
        assert read(a) == read(b), method
        assert read(ca) == read(cb), method
        assert r.meta["method"] == method and r.meta["num_samples"] == 6
        assert r.meta["calibration_source"] == "npz" and r.meta["model_path"] == cls_model
    # The ranges of the file, as Python objects, and back to the same bytes.
    back = qplace.Ranges.load(b)
    assert back == r and back.meta == r.meta
    assert back.to_json().encode() == read(b)
    conv = qplace.Ranges.load_trt_cache(cb)
    assert set(conv) == set(r) and all(v.amax > 0 for v in conv.values())
    assert conv.to_trt_cache().encode() == read(cb)


def test_rec_arrays_match_the_cli(cli, rec_model, rec_npz, tmp_path):
    x = np.load(rec_npz)["x"]
    r = qplace.calibrate(onnx_path=rec_model, calibration_data={"x": x},
                         calibration_shapes={"x": (2, 3, 48, 320)},
                         output_path=str(tmp_path / "py.json"))
    run_cli(cli, "calibrate", "--onnx_path", rec_model, "--calibration_data_path", rec_npz,
            "--calibration_shapes", "x:2x3x48x320", "--output_path", tmp_path / "cl.json",
            "--quiet")
    want = qplace.Ranges.load(tmp_path / "cl.json")
    assert r == want and len(r) > 300 and r.meta["num_samples"] == 4
    # Only the source differs: the arrays came from memory, the CLI read the file.
    assert read(tmp_path / "py.json").replace(b'"memory"', b'"npz"') == read(tmp_path / "cl.json")


def test_arrays_and_placement(cli, cls_model, cls_npz, tmp_path):
    x = np.load(cls_npz)["x"]
    a = qplace.calibrate(onnx_path=cls_model, calibration_data={"x": x})
    b = qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz)
    assert a == b and a.meta["calibration_source"] == "memory"
    # Only the placement's activation tensors, as --placement_in.
    pl = qplace.trt_placement(cls_model)
    pl.save(tmp_path / "pl.json")
    r = qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz, placement=pl,
                         output_path=str(tmp_path / "py.json"))
    run_cli(cli, "calibrate", "--onnx_path", cls_model, "--calibration_data_path", cls_npz,
            "--placement_in", tmp_path / "pl.json", "--output_path", tmp_path / "cl.json",
            "--quiet")
    assert read(tmp_path / "py.json") == read(tmp_path / "cl.json")
    assert set(r) == {e.tensor for e in pl.edges} and len(r) < len(b)
    seen = []
    qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz,
                     progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (6, 6)


def test_synthetic_matches_the_cli(cli, cls_model, tmp_path):
    r = qplace.calibrate(onnx_path=cls_model, calibration_shapes={"x": (1, 3, 48, 192)},
                         output_path=str(tmp_path / "py.json"))
    run_cli(cli, "calibrate", "--onnx_path", cls_model, "--calibration_shapes", "x:1x3x48x192",
            "--output_path", tmp_path / "cl.json", "--quiet")
    assert read(tmp_path / "py.json") == read(tmp_path / "cl.json")
    assert r.meta["calibration_source"] == "synthetic"


def test_mse_matches_the_cli(cli, cls_model, cls_npz, tmp_path):
    r = qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz, calibration_method="mse",
                         output_path=str(tmp_path / "py.json"))
    run_cli(cli, "calibrate", "--onnx_path", cls_model, "--calibration_data_path", cls_npz,
            "--calibration_method", "mse", "--output_path", tmp_path / "cl.json", "--quiet")
    assert read(tmp_path / "py.json") == read(tmp_path / "cl.json")
    assert r.meta["method"] == "mse"
    m = qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz, calibration_method="max")
    # the least-error range never exceeds the observed one, and clips some tensors
    assert all(r[t].amax <= m[t].amax * (1 + 1e-6) for t in m)
    assert any(r[t].amax < 0.99 * m[t].amax for t in m)


def test_auto_matches_the_cli(cli, cls_model, cls_npz, tmp_path):
    r = qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz, calibration_method="auto",
                         output_path=str(tmp_path / "py.json"))
    run_cli(cli, "calibrate", "--onnx_path", cls_model, "--calibration_data_path", cls_npz,
            "--calibration_method", "auto", "--output_path", tmp_path / "cl.json", "--quiet")
    assert read(tmp_path / "py.json") == read(tmp_path / "cl.json")
    assert r.meta["method"] == "auto"
    # every tensor takes one of the four candidates' ranges, and more than one method is used
    cand = {m: qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz,
                                calibration_method=m) for m in ("max", "entropy", "percentile", "mse")}
    used = set()
    for t in r:
        took = [m for m, c in cand.items() if c[t].amax == r[t].amax]
        assert took, t
        used.add(took[0])
    assert len(used) >= 2


def test_edited_ranges_and_bad_input(cls_model, cls_npz, tmp_path):
    r = qplace.Ranges([("t", qplace.Range(-1.0, 2.0, 2.0))], {"method": "max"})
    text = r.to_json()
    t = json.loads(text)["tensors"]
    assert t == [{"name": "t", "lo": -1, "hi": 2, "amax": 2, "scale": 0.0157480314,
                  "n_values": 0, "n_nan": 0, "n_inf": 0}]
    assert qplace.Ranges.from_json(text) == r
    with pytest.raises(qplace.BadInputError, match="not finite|finite"):
        qplace.Ranges([("t", qplace.Range(float("nan"), 1.0, 1.0))]).to_json()
    with pytest.raises(qplace.BadInputError):
        qplace.Ranges.from_json('{"format": "something else"}')
    with pytest.raises(qplace.FileError, match="no_such.json"):
        qplace.Ranges.load(tmp_path / "no_such.json")
    with pytest.raises(qplace.UsageError, match="percentile"):
        qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz, percentile=99.0)
    with pytest.raises(qplace.UsageError, match="calibration_method"):
        qplace.calibrate(onnx_path=cls_model, calibration_method="median")
    with pytest.raises(qplace.BadInputError, match="no_such_node"):
        qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz,
                         placement=qplace.Placement(edges=[("x", "no_such_node", 0, "u")]))
    with pytest.raises(qplace.UsageError, match="object array"):
        qplace.calibrate(onnx_path=cls_model,
                         calibration_data={"x": np.array([object()] * 2, dtype=object)})
