"""qplace.quantize(..., autotune=...): the search of `qplace autotune` (qplace/autotune.h), then the
quantization of exactly its placement, as `qplace quantize --autotune`; on the small resnet_like
model of the integration tests (a quick search takes well under a second)."""
import json
import os

import pytest

import qplace
from conftest import REPO, run_cli

MODEL = os.path.join(REPO, "tests", "integration", "quantize_models", "resnet_like.onnx")
FAST = dict(autotune_schemes_per_region=2, autotune_timing_runs=5, threads=2)


def diff_same(cli, a, b):
    p = run_cli(cli, "diff", a, b)
    assert "result: SAME" in p.stdout, p.stdout


def test_quick_writes_the_search_placement(cli, tmp_path):
    out, d = tmp_path / "q.onnx", tmp_path / "at"
    s = qplace.quantize(onnx_path=MODEL, output_path=str(out), autotune="quick",
                        autotune_output_dir=str(d), placement_out=str(tmp_path / "p.json"),
                        **FAST)
    assert out.exists()
    a = s.autotune
    assert isinstance(a, qplace.AutotuneSummary)
    assert a.mode == "quick" and a.n_patterns > 0 and a.n_points > 0 and a.n_measured > 0
    assert a.n_replayed == 0 and a.output_dir == str(d)
    assert s.placement_source == ("autotune" if a.guard_passed else
                                  "autotune (guard failed: the empty placement)")
    for f in ("placement.json", "log.jsonl", "pattern_cache.json", "autotune_state.json"):
        assert (d / f).stat().st_size > 0, f
    # the model holds exactly the search's placement
    diff_same(cli, out, d / "placement.json")
    diff_same(cli, tmp_path / "p.json", d / "placement.json")
    assert len(a.placement.edges) == s.n_edges
    assert (len(a.placement.edges) > 0) == a.guard_passed
    # the same call again replays every race from the kept state
    s2 = qplace.quantize(onnx_path=MODEL, output_path=str(out), autotune="quick",
                         autotune_output_dir=str(d), **FAST)
    assert s2.autotune.n_replayed == s2.autotune.n_measured == a.n_measured


def test_bare_autotune_uses_a_temporary_folder(cli, tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    out = tmp_path / "q.onnx"
    s = qplace.quantize(onnx_path=MODEL, output_path=str(out), autotune=True,
                        high_precision_dtype="fp32", **FAST)
    assert s.autotune.mode == "default" and s.autotune.output_dir is None
    assert out.exists()
    assert list(tmp.iterdir()) == []  # the search's folder is gone
    p = tmp_path / "p.json"
    s.autotune.placement.save(str(p))
    diff_same(cli, out, p)


def test_autotune_refusals_write_nothing(tmp_path):
    out, d = tmp_path / "never.onnx", tmp_path / "never"
    cases = [
        (dict(autotune="quick", rules=str(tmp_path / "r.json")), "rules cannot be combined"),
        (dict(autotune="quick", nodes_to_exclude=["x"]), "nodes_to_exclude cannot be combined"),
        (dict(autotune="quick", max_output_drift=0.1), "max_output_drift cannot be combined"),
        (dict(autotune="quick", high_precision_dtype="bf16"), "bf16 with autotune"),
        (dict(autotune="quick", autotune_backend="tensorrt"), "autotune_backend"),
        (dict(autotune="quick", autotune_timing_runs=2), "autotune_timing_runs"),
        (dict(autotune="quick", autotune_timing_cache="t.cache"), "trtexec"),
        (dict(autotune=False), "autotune_output_dir needs autotune"),
    ]
    for kw, phrase in cases:
        with pytest.raises(qplace.UsageError) as e:
            qplace.quantize(onnx_path=MODEL, output_path=str(out), autotune_output_dir=str(d),
                            **kw)
        assert phrase in str(e.value), (kw, str(e.value))
        assert not out.exists() and not d.exists(), kw
    with open(MODEL, "rb") as f:
        data = f.read()
    with pytest.raises(qplace.UsageError, match="file path"):
        qplace.quantize(onnx_path=data, output_path=str(out), autotune="quick")
    assert not out.exists()


def test_seeded_by_a_qdq_baseline(cli, tmp_path):
    base = tmp_path / "base.onnx"
    qplace.quantize(onnx_path=MODEL, output_path=str(base), high_precision_dtype="fp32")
    out, d = tmp_path / "q.onnx", tmp_path / "at"
    s = qplace.quantize(onnx_path=MODEL, output_path=str(out), autotune="quick",
                        autotune_qdq_baseline=str(base), autotune_output_dir=str(d),
                        high_precision_dtype="fp32", **dict(FAST, autotune_schemes_per_region=1))
    diff_same(cli, out, d / "placement.json")
    with open(d / "placement.json") as f:
        assert json.load(f)["format"] == "qplace.placement"
    if s.autotune.guard_passed and s.autotune.n_adopted == 0:
        diff_same(cli, out, base)  # the baseline's placement, kept
