// quantize_f16_ort.js --npm DIR --models DIR --qplace BIN --tmp DIR [--kinds cls,rec]
//
// `qplace quantize` with --high_precision_dtype fp16 (the default) on the PaddleOCR cls
// (1x3x48x192) and rec (1x3x48x320) models, against the same quantization with fp32 high
// precision (same placement, same synthetic calibration, so only the precision differs):
//   - the fp16 model loads and runs in ONNX Runtime (at the 'basic' level, the model as written,
//     and at ORT's default level), its graph outputs are float32 tensors;
//   - ORT's outputs of the fp16 model are close to ORT's outputs of the fp32 model: cosine > 0.99
//     per output;
//   - the engine (`qplace run`) on the fp16 file is close to ORT on the same file: cosine > 0.99
//     per output (the runtimes round to fp16 at different points, and a Q/DQ boundary can then
//     round the other way, so exact equality is not expected);
//   - the fp16 file is smaller than the fp32 one (float weights and constants halved).
// Missing models or runtime: skipped (exit 77) unless QP_REQUIRE_REAL_MODELS=1, then failed.
// Closes with "N passed, N failed".
'use strict';
const fs = require('fs');
const path = require('path');
const {spawnSync} = require('child_process');
const {npyBytes, readNpz} = require('./lib/testdata.js');

const EXIT_SKIP = 77;

function parseArgs(argv) {
    const args = {};
    for (let k = 0; k < argv.length; k += 2) {
        if (!argv[k].startsWith('--') || k + 1 >= argv.length) throw new Error(`bad argument ${argv[k]}`);
        args[argv[k].slice(2)] = argv[k + 1];
    }
    for (const need of ['npm', 'models', 'qplace', 'tmp'])
        if (!args[need]) throw new Error(`--${need} is required`);
    return args;
}

// A deterministic text-line-like input in PaddleOCR's normalisation ([-1, 1]): a light page with
// dark vertical and horizontal strokes in "glyph" cells, and a little noise.
function makeInput(h, w, seed) {
    let s = seed >>> 0;
    const rand = () => {
        s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
        return s / 4294967296;
    };
    const img = new Float32Array(h * w);
    for (let k = 0; k < img.length; k++) img[k] = 0.9 + 0.08 * rand();
    for (let x0 = 4; x0 + 12 < w; x0 += 14) {
        const strokes = 2 + Math.floor(rand() * 3);
        for (let t = 0; t < strokes; t++) {
            const vertical = rand() < 0.5;
            const at = Math.floor(rand() * 10);
            for (let d = 0; d < (vertical ? h - 16 : 10); d++)
                for (let th = 0; th < 2; th++) {
                    const y = vertical ? 8 + d : 10 + at * 2 + th;
                    const x = vertical ? x0 + at + th : x0 + d;
                    if (y < h && x < w) img[y * w + x] = 0.1 + 0.1 * rand();
                }
        }
    }
    const data = new Float32Array(3 * h * w);
    for (let c = 0; c < 3; c++)
        for (let k = 0; k < h * w; k++) data[c * h * w + k] = (img[k] - 0.5) / 0.5;
    return data;
}

function cosine(a, b) {
    let dot = 0, na = 0, nb = 0, maxAbs = 0;
    for (let k = 0; k < a.length; k++) {
        dot += a[k] * b[k];
        na += a[k] * a[k];
        nb += b[k] * b[k];
        maxAbs = Math.max(maxAbs, Math.abs(a[k] - b[k]));
    }
    const cos = na > 0 && nb > 0 ? dot / Math.sqrt(na * nb) : (na === nb ? 1 : 0);
    return {cos, maxAbs};
}

function qplace(args, argv) {
    const r = spawnSync(args.qplace, argv, {encoding: 'utf8'});
    if (r.status !== 0)
        throw new Error(`qplace ${argv[0]} failed (exit ${r.status}): ${(r.stderr || r.stdout || '').trim()}`);
    return r.stdout;
}

async function checkModel(ort, args, spec) {
    const model = path.join(args.models, spec.file);
    const m16 = path.join(args.tmp, `${spec.kind}.fp16.onnx`);
    const m32 = path.join(args.tmp, `${spec.kind}.fp32.onnx`);
    const common = ['--onnx_path', model, '--calibration_shapes', `x:1x3x${spec.h}x${spec.w}`,
                    '--calibration_method', 'max'];
    for (const f of [m16, m32]) fs.rmSync(f, {force: true});
    const out16 = qplace(args, ['quantize', ...common, '--output_path', m16]);  // default fp16
    if (!/high precision fp16/.test(out16)) throw new Error(`summary without 'high precision fp16':\n${out16}`);
    qplace(args, ['quantize', ...common, '--high_precision_dtype', 'fp32', '--output_path', m32]);
    const size16 = fs.statSync(m16).size, size32 = fs.statSync(m32).size;
    if (!(size16 < size32 * 0.8)) throw new Error(`fp16 file ${size16} bytes, fp32 ${size32}: not smaller`);

    const shape = [1, 3, spec.h, spec.w];
    const input = makeInput(spec.h, spec.w, spec.seed);
    const basic = {intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
                   graphOptimizationLevel: 'basic'};
    const s16 = await ort.InferenceSession.create(m16, basic);
    const s32 = await ort.InferenceSession.create(m32, basic);
    const full16 = await ort.InferenceSession.create(m16, {intraOpNumThreads: 1});
    const feeds = {[s16.inputNames[0]]: new ort.Tensor('float32', input, shape)};
    const r16 = await s16.run(feeds), r32 = await s32.run(feeds), rf = await full16.run(feeds);

    const inFile = path.join(args.tmp, `${spec.kind}.in.npy`);
    const outFile = path.join(args.tmp, `${spec.kind}.out.npz`);
    fs.writeFileSync(inFile, npyBytes(input, shape));
    fs.rmSync(outFile, {force: true});
    qplace(args, ['run', m16, '--input', `${s16.inputNames[0]}=${inFile}`, '--output', outFile]);
    const eng = readNpz(outFile);

    const notes = [];
    for (const name of s32.outputNames) {
        const a = r16[name], b = r32[name], f = rf[name];
        if (!a || a.type !== 'float32') throw new Error(`output '${name}': ${a ? a.type : 'missing'}, expected float32`);
        if (!f || f.type !== 'float32') throw new Error(`output '${name}' at the default level: not float32`);
        const e = (eng[name.replace(/[\/\\\x00-\x1f\x7f]/g, '_')] || {}).data;
        if (!e || e.length !== a.data.length) throw new Error(`output '${name}': engine output missing or wrong size`);
        const vs32 = cosine(a.data, b.data), vsEng = cosine(e, a.data), vsFull = cosine(f.data, a.data);
        const line = `${name}: ORT fp16 vs fp32 cosine ${vs32.cos.toFixed(6)} (max |d| ${vs32.maxAbs.toExponential(2)}), ` +
                     `engine vs ORT fp16 cosine ${vsEng.cos.toFixed(6)} (max |d| ${vsEng.maxAbs.toExponential(2)}), ` +
                     `ORT default vs basic ${vsFull.cos.toFixed(6)}`;
        if (!(vs32.cos > 0.99)) throw new Error(`${line}: fp16 vs fp32 cosine <= 0.99`);
        if (!(vsEng.cos > 0.99)) throw new Error(`${line}: engine vs ORT cosine <= 0.99`);
        notes.push(line);
    }
    for (const f of [inFile, outFile, m16, m32]) fs.rmSync(f, {force: true});
    return `${notes.join('; ')}; file ${size16} vs ${size32} bytes`;
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const required = process.env.QP_REQUIRE_REAL_MODELS === '1';
    const ortPath = path.resolve(args.npm, 'node_modules', 'onnxruntime-node');
    const specs = [
        {file: 'ch_ppocr_mobile_v2.0_cls_infer.onnx', h: 48, w: 192, kind: 'cls', seed: 7},
        {file: 'ch_PP-OCRv4_rec_infer.onnx', h: 48, w: 320, kind: 'rec', seed: 11},
    ].filter((s) => (args.kinds || 'cls,rec').split(',').includes(s.kind));
    if (!specs.length) throw new Error(`--kinds ${args.kinds}: expected cls and/or rec`);
    const missing = [ortPath, ...specs.map((s) => path.join(args.models, s.file))].filter((p) => !fs.existsSync(p));
    if (missing.length) {
        console.log(`${required ? 'FAIL' : 'SKIP'}: missing ${missing.join(', ')} (run scripts/setup.sh)`);
        return required ? 1 : EXIT_SKIP;
    }
    const ort = require(ortPath);
    fs.mkdirSync(args.tmp, {recursive: true});
    let passed = 0, failed = 0;
    for (const spec of specs) {
        try {
            console.log(`ok   ${spec.kind}: ${await checkModel(ort, args, spec)}`);
            passed++;
        } catch (e) {
            console.log(`FAIL ${spec.kind}: ${e && e.message ? e.message : e}`);
            failed++;
        }
    }
    console.log(`${passed} passed, ${failed} failed`);
    return failed ? 1 : 0;
}

main().then((code) => process.exit(code), (e) => {
    console.log(`FAIL: ${e && e.stack ? e.stack : e}`);
    console.log('0 passed, 1 failed');
    process.exit(1);
});
