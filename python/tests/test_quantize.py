"""qplace.quantize writes the bytes `qplace quantize` writes, for every form of calibration data
and the options ModelOpt users pass; bad input raises a qplace.Error and writes nothing."""
import os
import warnings

import numpy as np
import pytest

import qplace
from conftest import read, run_cli


def both(cli, tmp_path, model, cli_args, **kw):
    """(Python's bytes, the CLI's bytes, Python's summary) for the same quantization."""
    a, b = tmp_path / "py.onnx", tmp_path / "cl.onnx"
    s = qplace.quantize(onnx_path=model, output_path=str(a), **kw)
    run_cli(cli, "quantize", "--onnx_path", model, "--output_path", b, *cli_args)
    return read(a), read(b), s


def test_cls_npz_path_and_arrays_match_the_cli(cli, cls_model, cls_npz, tmp_path):
    x = np.load(cls_npz)["x"]
    for data in (cls_npz, {"x": x}, x, [{"x": x[i:i + 1]} for i in range(len(x))]):
        py, cl, s = both(cli, tmp_path, cls_model, ["--calibration_data_path", cls_npz],
                         calibration_data=data)
        assert py == cl
        assert s.n_calib_samples == 6 and s.n_calib_batches == 6 and s.method == "entropy"
    assert s.calibration_source == "memory"
    single = py
    # Batches of two rows (entropy histograms depend on the batching): a generator of dicts,
    # and a dict cut by calibration_shapes, against the CLI with that batch shape.
    flags = ["--calibration_data_path", cls_npz, "--calibration_shapes", "x:2x3x48x192"]
    for data, shapes in ((({"x": x[i:i + 2]} for i in range(0, len(x), 2)), None),
                         ({"x": x}, {"x": (2, 3, 48, 192)})):
        py, cl, s = both(cli, tmp_path, cls_model, flags, calibration_data=data,
                         calibration_shapes=shapes)
        assert py == cl and s.n_calib_batches == 3 and py != single
    assert s.placement_source == "trt policy" and s.high_precision == "fp16"
    assert s.n_tensors > 50 and s.n_weight_tensors > 20
    assert s.outputs[0].name == "softmax_0.tmp_0" and s.outputs[0].cosine > 0.9
    assert s.outputs[0].top1 is not None and s.eval_on_calibration


def test_rec_with_lists_fp32_and_methods_match_the_cli(cli, rec_model, rec_npz, tmp_path):
    x = {"x": np.load(rec_npz)["x"]}
    py, cl, s = both(cli, tmp_path, rec_model,
                     ["--calibration_data_path", rec_npz, "--high_precision_dtype", "fp32",
                      "--calibration_method", "max", "--op_types_to_exclude", "Add,Mul",
                      "--nodes_to_exclude", "p2o.Conv.1.*", "--calibration_shapes",
                      "x:2x3x48x320"],
                     calibration_data=x, high_precision_dtype="fp32", calibration_method="max",
                     op_types_to_exclude=["Add", "Mul"], nodes_to_exclude="p2o.Conv.1.*",
                     calibration_shapes={"x": (2, 3, 48, 320)})
    assert py == cl
    assert s.n_calib_batches == 2 and s.high_precision == "fp32"
    ops = {e.node for e in s.placement.edges}
    assert not any(n.startswith("p2o.Conv.1") for n in ops)


def test_options_match_the_cli(cli, cls_model, cls_npz, tmp_path):
    cases = [
        (["--dq_only", "--opset", "21"], dict(dq_only=True, opset=21)),
        (["--high_precision_dtype", "bf16", "--override_shapes", "x:1x3x48x192"],
         dict(high_precision_dtype="bf16", override_shapes="x:1x3x48x192")),
        (["--direct_io_types", "--op_types_to_exclude_fp16", "Softmax"],
         dict(direct_io_types=True, op_types_to_exclude_fp16=["Softmax"])),
        (["--calibration_method", "percentile", "--percentile", "99.9", "--quantize_mode",
          "fp8"], dict(calibration_method="percentile", percentile=99.9, quantize_mode="fp8")),
        (["--disable_mha_qdq", "--op_types_to_quantize", "Conv"],
         dict(disable_mha_qdq=True, op_types_to_quantize="Conv")),
        (["--weight_clipping", "mse", "--calibration_method", "mse", "--bias_correction=off"],
         dict(weight_clipping="mse", calibration_method="mse", bias_correction="off")),
        (["--weight_clipping", "absmax", "--bias_correction=off"],
         dict(weight_clipping="absmax", bias_correction="off")),
    ]
    for flags, kw in cases:
        py, cl, s = both(cli, tmp_path, cls_model, ["--calibration_data_path", cls_npz] + flags,
                         calibration_data=cls_npz, **kw)
        assert py == cl, flags
        # least-error weight clipping is the default of both, absmax asked for by name
        assert s.weight_clipping == kw.get("weight_clipping", "mse"), flags
        assert (s.n_weight_channels_clipped > 0) == (s.weight_clipping == "mse"), flags
        if kw.get("weight_clipping") == "mse":
            assert s.weight_clipping == "mse" and 0 < s.n_weight_channels_clipped
            assert s.n_weight_channels_clipped < s.n_weight_channels
            # The drift without the clipping is that of the same quantization with absmax.
            plain = qplace.quantize(onnx_path=cls_model, output_path=str(tmp_path / "p.onnx"),
                                    calibration_data=cls_npz, calibration_method="mse",
                                    bias_correction=False, weight_clipping="absmax")
            assert plain.outputs_unclipped is None
            assert s.outputs_unclipped[0].cosine == plain.outputs[0].cosine
            assert s.outputs_unclipped[0].cosine != s.outputs[0].cosine
    assert s.bias_correction is False and s.outputs_uncorrected is None
    with pytest.raises(qplace.UsageError, match="weight_clipping"):
        qplace.quantize(onnx_path=cls_model, output_path=str(tmp_path / "x.onnx"),
                        calibration_data=cls_npz, weight_clipping="median")
    assert s.placement.edges and {e.node.split(".")[1] for e in s.placement.edges} >= {"Conv"}


def test_bias_correction_matches_the_cli(cli, cls_model, cls_npz, tmp_path):
    py, cl, s = both(cli, tmp_path, cls_model,
                     ["--calibration_data_path", cls_npz, "--bias_correction",
                      "--high_precision_dtype", "fp32"],
                     calibration_data=cls_npz, bias_correction=True, high_precision_dtype="fp32")
    assert py == cl
    # Every Conv of cls is placed; 35 of them have no bias and get one.
    assert s.bias_correction and s.n_bias_layers >= 50 and s.n_biases_added >= 30
    assert s.bias_rounds == 2 and s.bias_seconds > 0
    assert 0 <= s.bias_shift_after < 0.5 * s.bias_shift_before
    assert [d.name for d in s.outputs_uncorrected] == [d.name for d in s.outputs]
    assert all(0 < d.cosine <= 1 for d in s.outputs_uncorrected)
    # The corrected model is not the uncorrected one.
    plain = qplace.quantize(onnx_path=cls_model, calibration_data=cls_npz,
                            high_precision_dtype="fp32", output_path=str(tmp_path / "plain.onnx"),
                            bias_correction="off")
    assert read(tmp_path / "plain.onnx") != py
    assert plain.outputs[0].cosine == pytest.approx(s.outputs_uncorrected[0].cosine, abs=1e-12)


def test_weight_rounding_matches_the_cli(cli, cls_model, cls_npz, tmp_path):
    py, cl, s = both(cli, tmp_path, cls_model,
                     ["--calibration_data_path", cls_npz, "--weight_rounding", "adaround",
                      "--bias_correction=off", "--high_precision_dtype", "fp32"],
                     calibration_data=cls_npz, weight_rounding="adaround", bias_correction="off",
                     high_precision_dtype="fp32")
    assert py == cl
    r = s.rounding
    assert r.n_layers > 0 and 0 < r.n_flipped < r.n_weights and r.seconds > 0
    assert r.n_layers + r.n_skipped + r.n_timed_out <= s.n_weight_tensors
    assert 0 < r.error_after < r.error_before
    assert [d.name for d in s.outputs_unrounded] == [d.name for d in s.outputs]
    # The unrounded drift is the drift of the default (nearest) quantization.
    plain = qplace.quantize(onnx_path=cls_model, calibration_data=cls_npz,
                            high_precision_dtype="fp32", output_path=str(tmp_path / "near.onnx"),
                            bias_correction="off")
    assert plain.rounding is None and plain.outputs_unrounded is None
    assert read(tmp_path / "near.onnx") != py
    assert plain.outputs[0].cosine == pytest.approx(s.outputs_unrounded[0].cosine, abs=1e-12)
    for bad in ({"weight_rounding": "stochastic"}, {"weight_rounding_seconds": 0},
                {"weight_rounding": "adaround", "quantize_mode": "fp8"}):
        with pytest.raises(qplace.UsageError):
            qplace.quantize(onnx_path=cls_model, calibration_data=cls_npz,
                            output_path=str(tmp_path / "bad.onnx"), **bad)
    assert not os.path.exists(tmp_path / "bad.onnx")


def test_drift_does_not_depend_on_the_thread_count(cls_model, cls_npz, tmp_path):
    """With two threads two workers measure alternate batches side by side (pipeline/drift.h);
    each batch's sums are added in batch order, so one thread gives the same figures."""
    s = [qplace.quantize(onnx_path=cls_model, calibration_data=cls_npz, threads=t,
                         output_path=str(tmp_path / f"t{t}.onnx"), bias_correction="on")
         for t in (1, 2)]
    assert read(tmp_path / "t1.onnx") == read(tmp_path / "t2.onnx")
    for a, b in ((s[0].outputs, s[1].outputs), (s[0].outputs_uncorrected, s[1].outputs_uncorrected)):
        assert [(d.name, d.cosine, d.max_abs, d.top1, d.n_rows) for d in a] == \
               [(d.name, d.cosine, d.max_abs, d.top1, d.n_rows) for d in b]
    assert s[0].n_eval_samples == s[1].n_eval_samples == len(np.load(cls_npz)["x"])


def test_bias_correction_auto_writes_the_model_of_higher_cosine(cli, cls_model, cls_npz,
                                                                  tmp_path):
    """The default (auto) with calibration data corrects, measures both models and writes the
    corrected one only when its mean cosine is higher: the file is then the --bias_correction
    one, else the --bias_correction=off one, and the drifts name which is which. On these six
    samples of cls, with absmax weight scales, entropy and percentile 99 decide differently, so
    both branches run."""
    decisions = set()
    for method, hp in (("entropy", "fp32"), ("percentile", "fp16")):
        kw = dict(onnx_path=cls_model, calibration_data=cls_npz, high_precision_dtype=hp,
                  calibration_method=method, percentile=99.0 if method == "percentile" else None,
                  weight_clipping="absmax")
        s = qplace.quantize(output_path=str(tmp_path / "auto.onnx"), **kw)
        on = qplace.quantize(output_path=str(tmp_path / "on.onnx"), bias_correction="on", **kw)
        off = qplace.quantize(output_path=str(tmp_path / "off.onnx"), bias_correction=False,
                              **kw)
        assert s.bias_correction and s.bias_auto and not on.bias_auto and not off.bias_correction
        cos_on, cos_off = on.outputs[0].cosine, off.outputs[0].cosine
        assert s.bias_kept == (cos_on > cos_off), method
        written = read(tmp_path / ("on.onnx" if s.bias_kept else "off.onnx"))
        assert read(tmp_path / "auto.onnx") == written, method
        if s.bias_kept:
            assert s.outputs[0].cosine == cos_on and s.outputs_corrected is None
            assert s.outputs_uncorrected[0].cosine == cos_off
        else:
            assert s.outputs[0].cosine == cos_off and s.outputs_uncorrected is None
            assert s.outputs_corrected[0].cosine == cos_on
        decisions.add(s.bias_kept)
        # the same decision and file from the command line, whose default is auto too
        p = run_cli(cli, "quantize", "--onnx_path", cls_model, "--calibration_data_path", cls_npz,
                    "--high_precision_dtype", hp, "--calibration_method", method,
                    *(["--percentile", "99.0"] if method == "percentile" else []),
                    "--weight_clipping", "absmax", "--output_path", tmp_path / "cli.onnx")
        assert ("; kept:" if s.bias_kept else "; NOT kept:") in p.stdout
        assert read(tmp_path / "cli.onnx") == written
    assert decisions == {True, False}
    # synthetic data: auto does not run; a bad value is a usage error
    s = qplace.quantize(onnx_path=cls_model, output_path=str(tmp_path / "syn.onnx"),
                        high_precision_dtype="fp32", calibration_shapes="x:1x3x48x192")
    assert not s.bias_correction and not s.bias_auto
    with pytest.raises(qplace.UsageError, match="bias_correction"):
        qplace.quantize(onnx_path=cls_model, output_path=str(tmp_path / "x.onnx"),
                        bias_correction="sometimes")
    p = run_cli(cli, "quantize", "--onnx_path", cls_model, "--bias_correction=sometimes",
                "--output_path", tmp_path / "y.onnx", ok=False)
    assert p.returncode == 1 and "expected on, off or auto" in p.stderr
    assert not (tmp_path / "y.onnx").exists()


def test_auto_matches_the_cli(cli, cls_model, cls_npz, tmp_path):
    flags = ["--calibration_data_path", cls_npz, "--calibration_method", "auto",
             "--quantize_mode", "fp8"]
    py, cl, s = both(cli, tmp_path, cls_model, flags, calibration_data=cls_npz,
                     calibration_method="auto", quantize_mode="fp8")
    assert py == cl and s.method == "auto"
    # every placed tensor took one method; fp8's candidates are not int8's
    assert sum(v for k, v in s.auto_methods.items() if k != "fallback") == s.n_tensors
    assert s.auto_methods["fallback"] == 0
    e = qplace.quantize(onnx_path=cls_model, output_path=str(tmp_path / "e.onnx"),
                        calibration_data=cls_npz)
    assert e.auto_methods is None and read(tmp_path / "e.onnx") != py


def test_synthetic_data_matches_the_cli(cli, cls_model, tmp_path):
    py, cl, s = both(cli, tmp_path, cls_model, ["--calibration_shapes", "x:1x3x48x192"],
                     calibration_shapes="x:1x3x48x192")
    assert py == cl and s.calibration_source == "synthetic"


def test_external_data_matches_the_cli(cli, cls_model, cls_npz, tmp_path):
    py, cl, _ = both(cli, tmp_path, cls_model, ["--calibration_data_path", cls_npz,
                                                "--use_external_data_format"],
                     calibration_data=cls_npz, use_external_data_format=True)
    assert py.replace(b"py.onnx_data", b"cl.onnx_data") == cl
    assert read(tmp_path / "py.onnx_data") == read(tmp_path / "cl.onnx_data")


def test_placement_and_ranges_round_trip_through_the_cli(cli, cls_model, cls_npz, tmp_path):
    pl_py, pl_cli = tmp_path / "pl_py.json", tmp_path / "pl_cli.json"
    s = qplace.quantize(onnx_path=cls_model, calibration_data=cls_npz,
                        output_path=str(tmp_path / "a.onnx"), placement_out=str(pl_py))
    run_cli(cli, "quantize", "--onnx_path", cls_model, "--calibration_data_path", cls_npz,
            "--output_path", tmp_path / "b.onnx", "--placement_out", pl_cli)
    assert read(pl_py) == read(pl_cli)
    p = qplace.Placement.load(pl_cli)
    assert p == s.placement and p.to_json().encode() == read(pl_cli)
    assert qplace.trt_placement(cls_model) == p.check(cls_model)
    # An edited placement applied as it is, in both.
    p.edges = p.edges[: len(p.edges) // 2]
    p.save(tmp_path / "half.json")
    py, cl, s2 = both(cli, tmp_path, cls_model, ["--calibration_data_path", cls_npz,
                                                 "--placement_in", tmp_path / "half.json"],
                      calibration_data=cls_npz, placement=p)
    assert py == cl and s2.placement_source == "placement" and s2.placement.edges == p.edges
    # Ranges from calibrate() and a TensorRT cache, no calibration.
    r = qplace.calibrate(onnx_path=cls_model, calibration_data=cls_npz)
    r.save(tmp_path / "r.json")
    r.save_trt_cache(tmp_path / "r.cache")
    shape = ["--calibration_shapes", "x:1x3x48x192"]  # the drift runs on synthetic data
    py, cl, _ = both(cli, tmp_path, cls_model, ["--ranges_in", tmp_path / "r.json"] + shape,
                     ranges=r, calibration_shapes="x:1x3x48x192")
    assert py == cl
    py, cl, _ = both(cli, tmp_path, cls_model,
                     ["--calibration_cache_path", tmp_path / "r.cache"] + shape,
                     calibration_cache_path=str(tmp_path / "r.cache"),
                     calibration_shapes="x:1x3x48x192")
    assert py == cl


def test_default_output_path_and_accepted_flags(cli, cls_model, cls_npz, tmp_path):
    m = tmp_path / "cls.onnx"
    m.write_bytes(read(cls_model))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        s = qplace.quantize(onnx_path=str(m), calibration_data=cls_npz, simplify=True,
                            calibration_eps=["cpu"])
    assert s.output_path == str(tmp_path / "cls.quant.onnx") and os.path.exists(s.output_path)
    assert any("simplify" in str(x.message) for x in w)
    assert any("calibration_eps" in str(x.message) for x in w)
    # log_level / log_file: the "qplace" logger's level, its lines appended to the file.
    log = tmp_path / "q.log"
    qplace.quantize(onnx_path=str(m), calibration_data=cls_npz, log_level="debug",
                    log_file=str(log), output_path=str(tmp_path / "c.onnx"))
    assert "qplace: DEBUG: " in log.read_text()
    qplace.quantize(onnx_path=str(m), calibration_data=cls_npz, log_level="WARNING",
                    output_path=str(tmp_path / "c.onnx"))
    import logging
    assert logging.getLogger("qplace").level == logging.WARNING
    with pytest.raises(qplace.UsageError, match="log_level"):
        qplace.quantize(onnx_path=str(m), log_level="LOUD")
    # The model as bytes gives the same model.
    qplace.quantize(onnx_path=read(cls_model), calibration_data=cls_npz,
                    output_path=str(tmp_path / "b.onnx"))
    assert read(tmp_path / "b.onnx") == read(s.output_path)


def bad(tmp_path, exc, phrase, **kw):
    out = tmp_path / "never.onnx"
    with pytest.raises(exc) as e:
        qplace.quantize(output_path=str(out), **kw)
    assert phrase in str(e.value), str(e.value)
    assert not out.exists()
    assert isinstance(e.value, qplace.Error)
    return e.value


def test_bad_inputs_raise_and_write_nothing(cls_model, cls_npz, tmp_path):
    x = np.load(cls_npz)["x"]
    e = bad(tmp_path, qplace.FileError, "no_such.onnx", onnx_path=str(tmp_path / "no_such.onnx"))
    assert e.exit_code == 2 and e.status_name
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07garbage")
    bad(tmp_path, qplace.BadInputError, "broken.onnx", onnx_path=str(broken))
    bad(tmp_path, qplace.UsageError, "quantize_mode", onnx_path=cls_model, quantize_mode="int3")
    # The newcomer's first call: no data, dynamic H and W: the input, its dims and the keyword.
    bad(tmp_path, qplace.BadInputError, "--calibration_shapes x:1x3x<dim 2>x<dim 3>",
        onnx_path=cls_model)
    bad(tmp_path, qplace.UsageError, "calibration_method", onnx_path=cls_model,
        calibration_method="kl")
    bad(tmp_path, qplace.UsageError, "not inputs: y", onnx_path=cls_model,
        calibration_data={"y": x})
    bad(tmp_path, qplace.UsageError, "astype(np.float32)", onnx_path=cls_model,
        calibration_data={"x": x.astype(np.float64)})
    bad(tmp_path, qplace.UsageError, "dim 1 is 3", onnx_path=cls_model,
        calibration_data={"x": np.zeros((2, 4, 48, 192), np.float32)})
    bad(tmp_path, qplace.UsageError, "trt_plugins", onnx_path=cls_model,
        trt_plugins=["a.so"])
    bad(tmp_path, qplace.UsageError, "int4", onnx_path=cls_model, quantize_mode="int4")
    # autotune= runs the search (test_autotune.py); what it cannot take is refused up front
    bad(tmp_path, qplace.UsageError, "autotune must be True or one of quick", onnx_path=cls_model,
        autotune="fast")
    bad(tmp_path, qplace.UsageError, "placement cannot be combined with autotune",
        onnx_path=cls_model, autotune="quick", placement=qplace.Placement())
    bad(tmp_path, qplace.UsageError, "autotune_timing_runs needs autotune", onnx_path=cls_model,
        autotune_timing_runs=5)
    with pytest.raises(qplace.UnsupportedError, match="autotune='quick'"):
        qplace.autotune(onnx_path=cls_model)
    pickled = os.path.join(os.path.dirname(cls_npz), "bad_pickled.npz")
    bad(tmp_path, qplace.BadInputError, "bad_pickled.npz", onnx_path=cls_model,
        calibration_data=pickled)
    bad(tmp_path, qplace.UsageError, "nodes_to_exclude", onnx_path=cls_model,
        nodes_to_exclude=["(unclosed"])
    bad(tmp_path, qplace.BadInputError, "no_such_node", onnx_path=cls_model,
        placement=qplace.Placement(edges=[("x", "no_such_node", 0, "user")]))
    with pytest.raises(qplace.UsageError):
        qplace.quantize(onnx_path=cls_model, output_path=cls_model)

    def boom():
        yield {"x": x[:1]}
        raise RuntimeError("the reader broke")
    # The caller's own exception, raised while its iterable is read, reaches the caller as is.
    with pytest.raises(RuntimeError, match="the reader broke"):
        qplace.quantize(onnx_path=cls_model, calibration_data=boom(),
                        output_path=str(tmp_path / "never.onnx"))
    assert not (tmp_path / "never.onnx").exists()


def test_callback_exceptions_during_calibration(cls_model, tmp_path):
    class Flaky(list):
        def __getitem__(self, i):
            if i == 1:
                raise KeyError("batch 1 is gone")
            return list.__getitem__(self, i)
    # An exception inside the C callback (raised while the library reads batch 1) becomes an
    # error with the message, never a crash or a silent success.
    import ctypes

    from qplace import _data, _lib
    m = qplace._core.Model.load(cls_model)
    p = _data.open_data(m, [{"x": np.zeros((1, 3, 48, 192), np.float32)}] * 2)
    p.batches = Flaky(p.batches)
    out, err = ctypes.c_void_p(), _lib.Error()
    st = _lib.qp_calibrate(m.ptr, p.ptr, None, ctypes.byref(out), None, ctypes.byref(err))
    assert st != 0 and b"batch 1 is gone" in err.msg
    assert isinstance(p.failure, KeyError)


def test_accuracy_budget_matches_the_cli(cli, cls_model, cls_npz, tmp_path):
    common = dict(calibration_data=cls_npz, high_precision_dtype="fp32")
    s0 = qplace.quantize(onnx_path=cls_model, output_path=str(tmp_path / "b0.onnx"),
                         max_output_drift=1e9, **common)
    b0 = s0.budget
    assert b0.met and b0.excluded == [] and b0.n_ranked > 20 and b0.drift_before > 0
    assert b0.top1_before is not None and 0 <= b0.top1_before <= 1
    half = b0.drift_before / 2
    py, cl, s = both(cli, tmp_path, cls_model,
                     ["--calibration_data_path", cls_npz, "--high_precision_dtype", "fp32",
                      "--max_output_drift", repr(half)], max_output_drift=half, **common)
    assert py == cl
    b = s.budget
    assert b.met and b.excluded and b.drift_after <= half < b.drift_before
    placed = {e.node for e in s.placement.edges} | {w.node for w in s.placement.weights}
    assert not placed & set(b.excluded)
    assert qplace.quantize(onnx_path=cls_model, output_path=str(tmp_path / "n.onnx"),
                           **common).budget is None
    for bad in (dict(max_output_drift=-1), dict(min_top1_agreement=1.5),
                dict(min_top1_agreement=0)):
        with pytest.raises(qplace.UsageError):
            qplace.quantize(onnx_path=cls_model, output_path=str(tmp_path / "x.onnx"),
                            **common, **bad)


def test_equalization_matches_the_cli(cli, cls_model, cls_npz, tmp_path):
    py, cl, s = both(cli, tmp_path, cls_model,
                     ["--calibration_data_path", cls_npz, "--equalization", "all",
                      "--smoothquant_alpha", "0.6"],
                     calibration_data=cls_npz, equalization="all", smoothquant_alpha=0.6)
    assert py == cl
    assert s.equalization == "all" and s.smoothquant_alpha == 0.6
    assert s.n_cle_pairs > 0 and s.n_smoothquant_pairs == 0  # a CNN: no LayerNorm
    # The "before" drift is that of the same quantization without equalization (and, as the
    # plain run is, without bias correction), exactly.
    plain = qplace.quantize(onnx_path=cls_model, output_path=str(tmp_path / "plain.onnx"),
                            calibration_data=cls_npz, bias_correction=False)
    assert plain.equalization == "none" and plain.outputs_before is None
    assert read(tmp_path / "plain.onnx") != py
    assert [d.name for d in s.outputs_before] == [d.name for d in s.outputs]
    assert s.outputs_before[0].cosine == plain.outputs[0].cosine
    for kw, what in ((dict(equalization="some"), "equalization"),
                     (dict(equalization="cle", smoothquant_alpha=1.5), "smoothquant_alpha")):
        with pytest.raises(qplace.UsageError, match=what):
            qplace.quantize(onnx_path=cls_model, output_path=str(tmp_path / "x.onnx"),
                            calibration_data=cls_npz, **kw)
    assert not os.path.exists(tmp_path / "x.onnx")


def act_scales(path):
    """{activation tensor: its QuantizeLinear scale} of a written model."""
    import onnx
    from onnx import numpy_helper
    g = onnx.load(str(path)).graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return {n.input[0]: float(consts[n.input[1]].reshape(-1)[0]) for n in g.node
            if n.op_type == "QuantizeLinear" and n.input[0] not in consts}


def test_equalization_recalibrates_only_what_it_changes(cls_model, cls_npz, tmp_path):
    """After equalization only the placed tensors it changes are calibrated again
    (qp_equalize_changed): the others keep the ranges, and with auto the choices, of the run
    without it, so their scales are exactly a plain run's."""
    kw = dict(onnx_path=cls_model, calibration_data=cls_npz, bias_correction="off",
              high_precision_dtype="fp32", calibration_method="auto")
    eq = qplace.quantize(output_path=str(tmp_path / "eq.onnx"), equalization="cle", **kw)
    plain = qplace.quantize(output_path=str(tmp_path / "plain.onnx"), **kw)
    assert plain.n_ranges_reused == 0 and eq.n_cle_pairs > 0
    assert 0 < eq.n_ranges_reused < eq.n_tensors
    assert sum(v for k, v in eq.auto_methods.items() if k != "fallback") == eq.n_tensors
    a, b = act_scales(tmp_path / "plain.onnx"), act_scales(tmp_path / "eq.onnx")
    assert a.keys() == b.keys() and len(a) == eq.n_tensors
    same = [t for t in a if a[t] == b[t]]
    assert eq.n_ranges_reused <= len(same) < len(a)


def test_equalization_before_is_the_plain_quantization(cls_model, cls_npz, tmp_path):
    """With --equalization the "before" drift is that of the same quantization without it,
    measured in the final drift pass against the float model as given: the figures of a plain
    run of the same methods (pipeline/quantize.c, equalize_models)."""
    kw = dict(onnx_path=cls_model, calibration_data=cls_npz, bias_correction="off",
              high_precision_dtype="fp32")
    eq = qplace.quantize(output_path=str(tmp_path / "eq.onnx"), equalization="all", **kw)
    plain = qplace.quantize(output_path=str(tmp_path / "plain.onnx"), **kw)
    assert eq.n_cle_pairs > 0 and read(tmp_path / "eq.onnx") != read(tmp_path / "plain.onnx")
    assert [(d.name, d.cosine, d.max_abs, d.top1) for d in eq.outputs_before] == \
           [(d.name, d.cosine, d.max_abs, d.top1) for d in plain.outputs]
    assert eq.n_eval_samples == plain.n_eval_samples
