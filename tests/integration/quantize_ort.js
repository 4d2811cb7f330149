// quantize_ort.js --npm DIR CASE.json ...
//
// ONNX Runtime check of models written by qplace's Q/DQ writer (tests/unit/quant/test_writer.c
// writes the cases): each case names a model, its float32 inputs and the engine's float32 outputs
// for them (raw little-endian files). The model must load and run in ONNX Runtime, and every
// output must agree with the engine's: cosine >= 0.999 and max |ort - engine| <= atol + rtol *
// max |engine| (a Q/DQ boundary can round the other way when two runtimes sum in different
// orders, so exact equality is not expected). A case whose outputs also carry `float_file` (the
// engine's output of the float model) is a deep model with many quantizers, where one such
// rounding flip early on moves every later quantizer input and the flips compound: there ORT and
// the engine must agree within atol + rtol * max |engine| + max |engine - float| / 2 (much closer
// than quantization itself moves the output), and cosine is only reported. The comparison runs
// ORT at graph optimization level 'basic' (the model as written); each model must also load and
// run at ORT's default level, where Q/DQ groups fuse into integer QLinear* kernels. Exit 0 when every case passes, 1 otherwise, 77 when
// onnxruntime-node is missing (1 under QP_REQUIRE_REAL_MODELS=1).
'use strict';
const fs = require('fs');
const path = require('path');

function readF32(file, n) {
    const buf = fs.readFileSync(file);
    if (buf.length !== n * 4) throw new Error(`${file}: ${buf.length} bytes, expected ${n * 4}`);
    const out = new Float32Array(n);
    for (let k = 0; k < n; k++) out[k] = buf.readFloatLE(k * 4);
    return out;
}

const numel = (dims) => dims.reduce((a, b) => a * b, 1);

async function runCase(ort, file) {
    const c = JSON.parse(fs.readFileSync(file, 'utf8'));
    // 'basic': no QDQ fusion into QLinear* integer kernels, whose fixed-point requantization
    // rounds differently from DequantizeLinear -> float op -> QuantizeLinear as written.
    const opts = {intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
                  graphOptimizationLevel: 'basic'};
    const s = await ort.InferenceSession.create(c.model, opts);
    const feeds = {};
    for (const i of c.inputs) feeds[i.name] = new ort.Tensor('float32', readF32(i.file, numel(i.dims)), i.dims);
    const res = await s.run(feeds);
    // ORT 1.30 fuses FP8 Q/DQ around Conv into QLinearConv and then rejects float8 inputs, so
    // FP8 models are checked at 'basic' only.
    if (!c.fp8) {
        const full = await ort.InferenceSession.create(c.model, {intraOpNumThreads: 1});
        await full.run(feeds);
    }
    const notes = [];
    let ok = true;
    for (const o of c.outputs) {
        const want = readF32(o.file, numel(o.dims));
        const got = res[o.name];
        if (!got || got.data.length !== want.length) {
            notes.push(`${o.name}: missing or wrong size`);
            ok = false;
            continue;
        }
        let dot = 0, na = 0, nb = 0, maxAbs = 0, maxRef = 0;
        for (let k = 0; k < want.length; k++) {
            const a = got.data[k], b = want[k];
            dot += a * b;
            na += a * a;
            nb += b * b;
            maxAbs = Math.max(maxAbs, Math.abs(a - b));
            maxRef = Math.max(maxRef, Math.abs(b));
        }
        const cos = na > 0 && nb > 0 ? dot / Math.sqrt(na * nb) : (na === nb ? 1 : 0);
        let tol = c.atol + c.rtol * maxRef, quantErr = null;
        if (o.float_file) {
            const ref = readF32(o.float_file, numel(o.dims));
            quantErr = 0;
            for (let k = 0; k < want.length; k++) quantErr = Math.max(quantErr, Math.abs(ref[k] - want[k]));
            tol += 0.5 * quantErr;
        }
        const good = (quantErr !== null || cos >= 0.999) && maxAbs <= tol && Number.isFinite(maxAbs);
        notes.push(`${o.name}: cosine ${cos.toFixed(6)}, max_abs ${maxAbs.toExponential(3)} (tol ${tol.toExponential(3)}` +
                   (quantErr !== null ? `, engine quantized vs float ${quantErr.toExponential(3)})` : ')'));
        ok = ok && good;
    }
    return {ok, notes};
}

async function main() {
    const argv = process.argv.slice(2);
    if (argv[0] !== '--npm' || argv.length < 3) throw new Error('usage: quantize_ort.js --npm DIR CASE.json ...');
    const ortPath = path.join(path.resolve(argv[1]), 'node_modules', 'onnxruntime-node');
    if (!fs.existsSync(path.join(ortPath, 'package.json'))) {
        const required = process.env.QP_REQUIRE_REAL_MODELS === '1';
        console.log(`${required ? 'FAIL' : 'SKIP'}: missing ${ortPath} (run scripts/setup.sh)`);
        return required ? 1 : 77;
    }
    const ort = require(ortPath);
    let passed = 0, failed = 0;
    for (const file of argv.slice(2)) {
        let r;
        try {
            r = await runCase(ort, file);
        } catch (e) {
            r = {ok: false, notes: [String(e.message || e)]};
        }
        console.log(`${r.ok ? 'PASS' : 'FAIL'} ${path.basename(file)}: ${r.notes.join('; ')}`);
        if (r.ok) passed++;
        else failed++;
    }
    console.log(`${passed} passed, ${failed} failed`);
    return failed ? 1 : 0;
}

main().then((code) => process.exit(code), (e) => {
    console.log(`FAIL: ${e.stack || e}`);
    process.exit(1);
});
