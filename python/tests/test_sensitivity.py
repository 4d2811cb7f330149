"""qplace.sensitivity: the scores and exclusions `qplace sensitivity` gives, ModelOpt's names."""
import json
import logging
import re

import numpy as np
import pytest

import qplace
from qplace import sensitivity
from conftest import run_cli


def same_scores(a, b):
    """The CLI's JSON carries 15 significant digits (cJSON): equal to that precision, in the
    same order."""
    assert list(a) == list(b)
    for k in a:
        assert "%.15g" % a[k] == "%.15g" % b[k], (k, a[k], b[k])


def cli_json(cli, tmp_path, model, *flags):
    out = tmp_path / "s.json"
    run_cli(cli, "sensitivity", "--onnx_path", model, "--output_json", out, "--quiet", *flags)
    return json.loads(out.read_text())


def test_node_scores_and_picks_match_the_cli(cli, cls_model, cls_npz, tmp_path):
    r = sensitivity.score(cls_model, cls_npz, granularity="node")
    j = cli_json(cli, tmp_path, cls_model, "--calibration_data_path", cls_npz, "--granularity",
                 "node", "--coverage", "0.9")
    same_scores(r["scores"], j["scores"])
    assert r["calibration_source"] == "real" and r["num_calibration_samples"] == 6
    assert r["metric"] == "kl_div" and r["granularity"] == "node"
    assert len(r["scores"]) > 50
    assert [t["name"] for t in r["targets"]] == [t["name"] for t in j["targets"]]
    ex = sensitivity.suggest_exclusion(r, coverage=0.9)
    assert ex == j["exclusions"]["excluded"]
    assert sensitivity.suggest_exclusion(r["scores"], coverage=0.9) == ex
    s = sensitivity.summarize_exclusion(r["scores"], ex)
    assert s["num_excluded"] == len(ex) and 0 < s["coverage_pct"] <= 90
    assert s["num_remaining_quantized"] == len(r["scores"]) - len(ex)
    j = cli_json(cli, tmp_path, cls_model, "--calibration_data_path", cls_npz, "--granularity",
                 "node", "--threshold", "1e-5", "--max_nodes", "3")
    assert sensitivity.suggest_exclusion(r, threshold=1e-5, max_nodes=3) == \
        j["exclusions"]["excluded"]
    # The accuracy budget runs the model: only on score()'s result.
    j = cli_json(cli, tmp_path, cls_model, "--calibration_data_path", cls_npz, "--granularity",
                 "node", "--max_output_drift", "0.0001")
    assert sensitivity.suggest_exclusion(r, max_output_drift=1e-4) == j["exclusions"]["excluded"]
    with pytest.raises(qplace.UsageError, match="max_output_drift"):
        sensitivity.suggest_exclusion(r["scores"], max_output_drift=1e-4)
    kept = sensitivity.exclusion_placement(r, coverage=0.9)
    assert len(kept.edges) < len(qplace.trt_placement(cls_model).edges)
    # The exclusions go into quantize as exact-name regexes.
    q = qplace.quantize(onnx_path=cls_model, calibration_data=cls_npz,
                        output_path=str(tmp_path / "q.onnx"),
                        nodes_to_exclude=["^%s$" % re.escape(n) for n in ex])
    assert not {e.node for e in q.placement.edges} & set(ex)


def test_op_type_scores_on_rec_and_synthetic(cli, rec_model, rec_npz, cls_model, tmp_path):
    x = np.load(rec_npz)["x"][:2]
    np.savez(tmp_path / "r2.npz", x=x)
    r = sensitivity.score(rec_model, {"x": x}, metric="cos", threads=2)
    j = cli_json(cli, tmp_path, rec_model, "--calibration_data_path", tmp_path / "r2.npz",
                 "--metric", "cos", "--threads", "2")
    same_scores(r["scores"], j["scores"])
    assert "Conv" in r["scores"]
    # absmax weight scales (quantize --weight_clipping absmax): the CLI's scores again, and the
    # op types holding weights score otherwise than with the default clipping
    a = sensitivity.score(rec_model, {"x": x}, metric="cos", threads=2, weight_clipping="absmax")
    j = cli_json(cli, tmp_path, rec_model, "--calibration_data_path", tmp_path / "r2.npz",
                 "--metric", "cos", "--threads", "2", "--weight_clipping", "absmax")
    same_scores(a["scores"], j["scores"])
    assert j["weight_clipping"] == "absmax" and a["scores"]["Conv"] != r["scores"]["Conv"]
    with pytest.raises(qplace.UsageError, match="weight_clipping"):
        sensitivity.score(rec_model, {"x": x}, weight_clipping="median")
    r = sensitivity.score(cls_model, num_synthetic_samples=4, granularity="op_type",
                          calibration_shapes="x:1x3x48x192")
    j = cli_json(cli, tmp_path, cls_model, "--num_synthetic_samples", "4",
                 "--calibration_shapes", "x:1x3x48x192")
    same_scores(r["scores"], j["scores"])
    assert r["calibration_source"] == "synthetic"


def test_plain_scores_modelopt_examples_and_blocks(caplog):
    s = {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}
    assert sensitivity.suggest_exclusion(s, coverage=0.5) == ["a"]
    assert sensitivity.suggest_exclusion(s, coverage=0.8) == ["a", "b"]
    assert sensitivity.suggest_exclusion(s, coverage=0.0) == []
    assert sensitivity.suggest_exclusion(s, threshold=1.5) == ["a", "b", "c"]
    assert sensitivity.suggest_exclusion(s, coverage=0.5, blocks={"bd": ["b", re.compile("d")]}) \
        == ["a"]
    assert sensitivity.suggest_exclusion(s, coverage=0.9, blocks={"bd": ["b", "d"]}) \
        == ["a", "b", "d"]
    with caplog.at_level(logging.WARNING, logger="qplace"):
        assert sensitivity.suggest_exclusion({"a": 1.0, "b": 0.999, "c": 0.5},
                                             coverage=0.45) == ["a"]
    assert any("near-tie" in r.getMessage() for r in caplog.records)
    assert sensitivity.summarize_exclusion(s, ["a", "zz"]) == {
        "coverage_pct": 40.0, "num_excluded": 2, "num_previously_quantized": 4,
        "num_remaining_quantized": 2, "excluded_mass": 4.0, "total_mass": 10.0}
    for bad, phrase in (({"a": float("nan")}, "finite"), ({"a": "x"}, "finite"),
                        ([1, 2], "dict")):
        with pytest.raises(qplace.UsageError, match=phrase):
            sensitivity.suggest_exclusion(bad)
    with pytest.raises(qplace.UsageError, match="coverage"):
        sensitivity.suggest_exclusion(s, coverage=1.5)
    with pytest.raises(qplace.UsageError, match="block_agg"):
        sensitivity.suggest_exclusion(s, block_agg="median")
    with pytest.raises(qplace.BadInputError):
        sensitivity.suggest_exclusion(s, blocks={"g": ["(unclosed"]})


def test_bad_inputs(cls_model, cls_npz):
    with pytest.raises(qplace.UsageError, match="granularity"):
        sensitivity.score(cls_model, cls_npz, granularity="layer")
    with pytest.raises(qplace.UsageError, match="metric"):
        sensitivity.score(cls_model, cls_npz, metric="l1")
    with pytest.raises(qplace.UsageError, match="Convv|closest|op_types_scope"):
        sensitivity.score(cls_model, cls_npz, op_types_scope=["Convv"])
    with pytest.raises(qplace.UsageError, match="not inputs"):
        sensitivity.score(cls_model, {"y": np.zeros((1, 3, 48, 192), np.float32)})
