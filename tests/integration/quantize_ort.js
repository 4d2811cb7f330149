// quantize_ort.js --npm DIR CASE.json ...
//
// ONNX Runtime check of models written by qplace's Q/DQ writer (tests/unit/quant/test_writer.c
// writes the cases): each case names a model, its float32 inputs and the engine's float32 outputs
// for them (raw little-endian files). The model must load and run in ONNX Runtime, and every
// output must agree with the engine's: cosine >= 0.999 and max |ort - engine| <= atol + rtol *
// max |engine| (float ops sum in different orders, so exact equality is not expected).
//
// A case with `dump` is a deep model (PP-OCR cls/det/rec, up to ~190 activation quantizers),
// checked per quantizer instead, where nothing has compounded yet: ORT runs the dump model (every
// activation QuantizeLinear's input and output made a graph output) and, in the engine's
// topological order, every quantizer output must be bit-identical to the engine's up to the first
// one that is not; there every differing element must be one grid step apart, a near-tie in both
// runtimes (x / scale within TIE steps of the midpoint of the two codes) and few (maxFlips). Why
// not more: a pre-quantizer value within a float32 ulp of a rounding midpoint rounds either way
// depending on summation order. On PP-OCRv4 rec the first 18 quantizers are bit-identical and
// the 19th (after a 1x1 Conv and a scalar Mul) differs in 2 of 49152 elements, exact x / scale
// -9.49999943 and -4.50000007; that flip moves every later quantizer input (68 elements differ at
// the next, 952 after) until the softmax output differs by 0.25 — the engine against itself on
// AVX2 and AVX-512 differs by 0.32, as much as quantization moves it (0.2). So after the first
// differing quantizer nothing more is required and the final outputs are only reported; with no
// differing quantizer they must meet atol + rtol * max |engine| (cosine reported: det's output is
// ~1e-8). A wrong scale or zero point fails at its quantizer, unless an earlier natural tie
// already differs (then it is not seen in that case).
//
// The comparison runs ORT at graph optimization level 'basic' with its QDQ transformers off (the
// model as written, see runCase); each model must also load and run at ORT's default level, where
// Q/DQ groups fuse into integer QLinear* kernels. Exit 0 when every case passes, 1 otherwise, 77
// when onnxruntime-node is missing (1 under QP_REQUIRE_REAL_MODELS=1).
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

// Quantized grids by ONNX dtype number: `ord` numbers the codes in value order (adjacent codes
// differ by 1; NaN for NaN codes), `value` is a code's value in units of the scale.
function e4m3fn(c) {
    const e = (c >> 3) & 15, m = c & 7, mag = e ? 2 ** (e - 7) * (1 + m / 8) : 2 ** -6 * (m / 8);
    return (c & 0x80) ? -mag : mag;
}
const GRIDS = {
    2: {name: 'uint8', read: (b) => Uint8Array.from(b), ord: (c) => c, value: (c, zp) => c - zp},
    3: {name: 'int8', read: (b) => Int8Array.from(b, (v) => (v << 24) >> 24), ord: (c) => c,
        value: (c, zp) => c - zp},
    17: {name: 'float8e4m3fn', read: (b) => Uint8Array.from(b),
         ord: (c) => ((c & 0x7f) === 0x7f ? NaN : (c & 0x80 ? -(c & 0x7f) : c & 0x7f)),
         value: (c) => e4m3fn(c)},
};
// A flip at the first differing quantizer must be a near-tie in both runtimes: x / scale within
// TIE steps of the midpoint between the two codes. Float32 reordering moves x by a few ulp, i.e.
// x / scale by < 1e-5 at |x / scale| <= 128 (measured on PP-OCRv4 rec: 6e-7 and 7e-8), so 1e-4 is
// generous, while a wrong scale, zero point or rounding rule moves elements that are not ties.
const TIE = 1e-4;
// Elements that close to a midpoint are about 2 * TIE of all (4e-5 measured: 2 of 49152); allow
// 1% and at most 64 (at least 1), a 50x margin on the share that still fails a bug moving many.
const maxFlips = (n) => Math.max(1, Math.min(64, Math.floor(0.01 * n)));

// ORT runs the dump model (every activation QuantizeLinear's input and output as outputs) and
// its quantizers are compared with the engine's in the engine's topological order. Returns
// {ok, note, differed}: `differed` when some quantizer output differs (then the final outputs
// are only reported).
async function checkQuantizers(ort, c, feeds, opts) {
    const s = await ort.InferenceSession.create(c.dump.model, opts);
    const res = await s.run(feeds);
    const qs = c.dump.quantizers;
    let first = -1, later = 0;
    for (let i = 0; i < qs.length; i++) {
        const q = qs[i], grid = GRIDS[q.dtype], n = numel(q.dims);
        if (!grid) return {ok: false, note: `${q.node}: no grid for dtype ${q.dtype}`};
        const got = res[q.y];
        if (!got || got.data.length !== n || got.type !== grid.name)
            return {ok: false, note: `${q.node}: ORT output ${q.y} missing, wrong size or not ${grid.name}`};
        const want = grid.read(fs.readFileSync(q.y_file));
        if (want.length !== n) return {ok: false, note: `${q.y_file}: ${want.length} elements, expected ${n}`};
        const bad = [];
        for (let k = 0; k < n; k++) if (got.data[k] !== want[k]) bad.push(k);
        if (!bad.length) continue;
        if (first >= 0) {
            later++;
            continue;
        }
        first = i;
        const fail = (why) => ({ok: false, note: `quantizer ${i}/${qs.length} ${q.node}: ` +
                                                 `${bad.length} of ${n} elements differ, ${why}`});
        if (bad.length > maxFlips(n)) return fail(`more than ${maxFlips(n)}`);
        const xe = readF32(q.x_file, n), xo = res[q.x] ? res[q.x].data : feeds[q.x].data;
        let worst = 0;
        for (const k of bad) {
            const a = want[k], b = got.data[k];
            if (Math.abs(grid.ord(a) - grid.ord(b)) !== 1) return fail(`element ${k}: engine ${a}, ORT ${b}: not one step`);
            const va = grid.value(a, q.zero_point), vb = grid.value(b, q.zero_point);
            const mid = (va + vb) / 2, step = Math.abs(va - vb);
            for (const x of [xe[k], xo[k]]) {
                const off = Math.abs(x / q.scale - mid) / step;
                worst = Math.max(worst, off);
                if (!(off <= TIE))
                    return fail(`element ${k}: engine ${a}, ORT ${b}, x/scale engine ` +
                                `${xe[k] / q.scale}, ORT ${xo[k] / q.scale}: ` +
                                `${off.toExponential(2)} steps from the tie ${mid}`);
            }
        }
        q.note = `${bad.length} of ${n} elements one step apart, all ties within ${worst.toExponential(2)} steps`;
    }
    if (first < 0) return {ok: true, differed: false, note: `all ${qs.length} quantizers bit-identical`};
    return {ok: true, differed: true,
            note: `quantizers bit-identical up to ${first}/${qs.length} ${qs[first].node}: ${qs[first].note}; ` +
                  `${later} of the ${qs.length - first - 1} after it differ (flips compound)`};
}

async function runCase(ort, file) {
    const c = JSON.parse(fs.readFileSync(file, 'utf8'));
    // 'basic': no QDQ fusion into QLinear* integer kernels, whose fixed-point requantization
    // rounds differently from DequantizeLinear -> float op -> QuantizeLinear as written. And
    // session.disable_quant_qdq: without it ORT 1.30 at 'basic' still runs its QDQ transformers,
    // among them WeightBiasQuantization, which quantizes the float weight and bias of a Conv or
    // Gemm whose activation input comes from a DequantizeLinear (a weight the placement left
    // float): a different model (PP-OCR det: 1330 of 1536 elements of a Conv output's quantizer).
    const opts = {intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
                  graphOptimizationLevel: 'basic', extra: {session: {disable_quant_qdq: '1'}}};
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
    let ok = true, differed = false;
    if (c.dump) {
        const q = await checkQuantizers(ort, c, feeds, opts);
        notes.push(q.note);
        ok = q.ok;
        differed = !q.ok || q.differed;
    }
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
        const tol = c.atol + c.rtol * maxRef;
        let quantErr = null;
        if (o.float_file) {
            const ref = readF32(o.float_file, numel(o.dims));
            quantErr = 0;
            for (let k = 0; k < want.length; k++) quantErr = Math.max(quantErr, Math.abs(ref[k] - want[k]));
        }
        // Deep models: cosine only reported (PP-OCR det's output is ~1e-8, float noise in cosine).
        const good = differed || ((o.float_file || cos >= 0.999) && maxAbs <= tol && Number.isFinite(maxAbs));
        notes.push(`${o.name}: cosine ${cos.toFixed(6)}, max_abs ${maxAbs.toExponential(3)} ` +
                   (differed ? '(reported only' : `(tol ${tol.toExponential(3)}`) +
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
