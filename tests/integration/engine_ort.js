// engine_ort.js --npm DIR --models DIR --qplace BIN --tmp DIR [--det-size N] [--if-model FILE]
//
// The engine against ONNX Runtime on the real PaddleOCR models: det (1x3xNxN, N = 640 unless
// --det-size says otherwise: the ASan build uses 320 to stay within the time budget), rec
// (1x3x48x320) and cls (1x3x48x192) run in `qplace run` (input .npy, output .npz) and in
// onnxruntime-node on the same deterministic, real-looking input (a white page with dark
// text-like strokes, normalised as PaddleOCR does: the generator is ort_paddleocr.js's), and
// every output element must satisfy |qplace - ort| <= 1e-4 + 1e-3 * |ort|. Missing models or
// runtime: skipped (exit 77) unless QP_REQUIRE_REAL_MODELS=1, then failed. --if-model (the ONNX
// test model node/test_if: an If on a bool input) is run for both conditions the same way. Closes with
// "N passed, N failed".
'use strict';
const fs = require('fs');
const path = require('path');
const {spawnSync} = require('child_process');

const EXIT_SKIP = 77;
const RTOL = 1e-3, ATOL = 1e-4;

function parseArgs(argv) {
    const args = {};
    for (let k = 0; k < argv.length; k += 2) {
        if (!argv[k].startsWith('--') || k + 1 >= argv.length) {
            throw new Error(`bad argument ${argv[k]}`);
        }
        args[argv[k].slice(2)] = argv[k + 1];
    }
    for (const need of ['npm', 'models', 'qplace', 'tmp']) {
        if (!args[need]) throw new Error(`--${need} is required`);
    }
    return args;
}

function models(detSize) {
    return [
        {file: 'ch_PP-OCRv4_det_infer.onnx', h: detSize, w: detSize, kind: 'det'},
        {file: 'ch_PP-OCRv4_rec_infer.onnx', h: 48, w: 320, kind: 'rec'},
        {file: 'ch_ppocr_mobile_v2.0_cls_infer.onnx', h: 48, w: 192, kind: 'cls'},
    ];
}

// Deterministic PRNG (mulberry32), so every run sees the same page.
function rng(seed) {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

// Grey page (h x w, values 0..255): off-white paper with a little noise, and lines of "words"
// made of glyph-like strokes (stems, bars, diagonals, bowls) in dark ink.
function textPage(h, w, lineHeight, margin, seed, textWidth) {
    const rand = rng(seed);
    const img = new Float32Array(h * w);
    for (let k = 0; k < img.length; k++) img[k] = 238 + rand() * 14;
    const ink = (x, y, v) => {
        x = Math.round(x);
        y = Math.round(y);
        if (x >= 0 && x < textWidth && y >= 0 && y < h) img[y * w + x] = Math.min(img[y * w + x], v);
    };
    const stroke = (x0, y0, x1, y1, thick, v) => {
        const n = Math.max(Math.abs(x1 - x0), Math.abs(y1 - y0), 1) * 2;
        for (let s = 0; s <= n; s++) {
            const x = x0 + ((x1 - x0) * s) / n, y = y0 + ((y1 - y0) * s) / n;
            for (let dy = 0; dy < thick; dy++) for (let dx = 0; dx < thick; dx++) ink(x + dx, y + dy, v);
        }
    };
    const gh = Math.round(lineHeight * 0.62); // glyph height
    const gw = Math.round(gh * 0.62);
    const thick = Math.max(1, Math.round(gh / 9));
    for (let top = margin; top + lineHeight <= h - margin + 1; top += lineHeight) {
        let x = margin + rand() * gw;
        const lineEnd = textWidth - margin - rand() * textWidth * 0.25;
        const y0 = top + (lineHeight - gh) / 2;
        while (x + gw < lineEnd) {
            const letters = 2 + Math.floor(rand() * 7);
            for (let l = 0; l < letters && x + gw < lineEnd; l++) {
                const v = 20 + rand() * 40;
                const parts = 2 + Math.floor(rand() * 3);
                for (let p = 0; p < parts; p++) {
                    const r = rand();
                    if (r < 0.35) { // stem
                        const sx = x + rand() * gw;
                        stroke(sx, y0, sx, y0 + gh, thick, v);
                    } else if (r < 0.6) { // bar
                        const sy = y0 + rand() * gh;
                        stroke(x, sy, x + gw, sy, thick, v);
                    } else if (r < 0.85) { // diagonal
                        stroke(x, y0 + gh, x + gw, y0, thick, v);
                    } else { // bowl
                        const cx = x + gw / 2, cy = y0 + gh * 0.65, rr = gw / 2;
                        for (let a = 0; a < 40; a++) {
                            const t = (a / 40) * 2 * Math.PI;
                            stroke(cx + rr * Math.cos(t), cy + rr * 0.7 * Math.sin(t),
                                   cx + rr * Math.cos(t), cy + rr * 0.7 * Math.sin(t), thick, v);
                        }
                    }
                }
                x += gw + thick + 1 + rand() * 2;
            }
            x += gw * (0.6 + rand() * 0.6); // space between words
        }
    }
    return img;
}

// NCHW float32 input for the model, normalised as PaddleOCR's preprocessing does.
function makeInput(spec) {
    const {h, w, kind} = spec;
    const data = new Float32Array(3 * h * w);
    if (kind === 'det') {
        const img = textPage(h, w, 36, 24, 1234, w);
        const mean = [0.485, 0.456, 0.406], std = [0.229, 0.224, 0.225];
        for (let c = 0; c < 3; c++)
            for (let k = 0; k < h * w; k++) data[c * h * w + k] = (img[k] / 255 - mean[c]) / std[c];
    } else {
        // One text line; rec pads the width with zeros (after normalising) past the text.
        const textWidth = kind === 'rec' ? Math.round(w * 0.85) : w;
        const img = textPage(h, w, h, 0, kind === 'rec' ? 77 : 99, textWidth);
        for (let c = 0; c < 3; c++)
            for (let y = 0; y < h; y++)
                for (let x = 0; x < w; x++) {
                    const k = y * w + x;
                    data[c * h * w + k] = x < textWidth ? (img[k] / 255 - 0.5) / 0.5 : 0;
                }
    }
    return data;
}

// A float32 (or bool, descr '|b1') C-order .npy (format 1.0).
function npyBytes(data, shape, descr = '<f4') {
    let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
    const total = Math.ceil((10 + header.length + 1) / 64) * 64;
    header = header + ' '.repeat(total - 10 - header.length - 1) + '\n';
    const pre = Buffer.alloc(10);
    pre.write('\x93NUMPY', 0, 'latin1');
    pre[6] = 1;
    pre[7] = 0;
    pre.writeUInt16LE(header.length, 8);
    return Buffer.concat([pre, Buffer.from(header, 'latin1'),
                          Buffer.from(data.buffer, data.byteOffset, data.byteLength)]);
}

function parseNpy(buf, what) {
    if (buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${what}: not .npy`);
    const major = buf[6];
    const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
    const hstart = major === 1 ? 10 : 12;
    const header = buf.toString('latin1', hstart, hstart + hlen);
    const descr = /'descr':\s*'([^']*)'/.exec(header);
    const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
    if (!descr || !shape || descr[1] !== '<f4') throw new Error(`${what}: header ${header.trim()}`);
    const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
    const off = hstart + hlen;
    const bytes = buf.subarray(off);
    const copy = new Float32Array(bytes.length / 4);
    Buffer.from(copy.buffer).set(bytes);
    return {dims, data: copy};
}

// Members of a stored (uncompressed) .npz, through the central directory.
function readNpz(file) {
    const buf = fs.readFileSync(file);
    let eocd = buf.length - 22;
    while (eocd >= 0 && buf.readUInt32LE(eocd) !== 0x06054b50) eocd--;
    if (eocd < 0) throw new Error(`${file}: not a zip archive`);
    const count = buf.readUInt16LE(eocd + 10);
    let p = buf.readUInt32LE(eocd + 16);
    const out = {};
    for (let k = 0; k < count; k++) {
        if (buf.readUInt32LE(p) !== 0x02014b50) throw new Error(`${file}: bad central directory`);
        const method = buf.readUInt16LE(p + 10);
        const csize = buf.readUInt32LE(p + 20);
        const nlen = buf.readUInt16LE(p + 28), xlen = buf.readUInt16LE(p + 30);
        const clen = buf.readUInt16LE(p + 32);
        const local = buf.readUInt32LE(p + 42);
        const name = buf.toString('utf8', p + 46, p + 46 + nlen);
        if (method !== 0) throw new Error(`${file}: member ${name} is compressed`);
        const start = local + 30 + buf.readUInt16LE(local + 26) + buf.readUInt16LE(local + 28);
        out[name.replace(/\.npy$/, '')] = parseNpy(buf.subarray(start, start + csize), name);
        p += 46 + nlen + xlen + clen;
    }
    return out;
}

async function checkModel(ort, args, spec) {
    const model = path.join(args.models, spec.file);
    const input = makeInput(spec);
    const shape = [1, 3, spec.h, spec.w];
    const opts = {intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential'};
    const sess = await ort.InferenceSession.create(model, opts);
    const ref = await sess.run({[sess.inputNames[0]]: new ort.Tensor('float32', input, shape)});
    const inFile = path.join(args.tmp, `${spec.kind}.in.npy`);
    const outFile = path.join(args.tmp, `${spec.kind}.out.npz`);
    fs.writeFileSync(inFile, npyBytes(input, shape));
    fs.rmSync(outFile, {force: true});
    const t0 = Date.now();
    const r = spawnSync(args.qplace, ['run', model, '--input', `${sess.inputNames[0]}=${inFile}`,
                                      '--output', outFile], {encoding: 'utf8'});
    const ms = Date.now() - t0;
    if (r.status !== 0) {
        throw new Error(`qplace run failed (exit ${r.status}${r.signal ? ', ' + r.signal : ''}): ` +
                        `${(r.stderr || '').trim()}`);
    }
    const got = readNpz(outFile);
    const notes = [];
    for (const name of sess.outputNames) {
        const key = name.replace(/[\/\\\x00-\x1f\x7f]/g, '_');
        const x = got[key], y = ref[name];
        if (!x) throw new Error(`output '${name}' missing from ${outFile}`);
        if (JSON.stringify(x.dims) !== JSON.stringify(y.dims.map(Number))) {
            throw new Error(`output '${name}': shape ${x.dims} vs ORT ${y.dims}`);
        }
        let worst = 0, at = -1, bad = 0;
        for (let k = 0; k < y.data.length; k++) {
            const d = Math.abs(x.data[k] - y.data[k]);
            if (!(d <= ATOL + RTOL * Math.abs(y.data[k]))) bad++;
            if (!(d <= worst)) {
                worst = d;
                at = k;
            }
        }
        if (bad) {
            throw new Error(`output '${name}': ${bad} of ${y.data.length} elements out of ` +
                            `tolerance; worst |diff| ${worst} at ${at} (qplace ${x.data[at]}, ` +
                            `ORT ${y.data[at]})`);
        }
        notes.push(`${name} ${x.dims.join('x')} max |diff| ${worst.toExponential(2)}`);
    }
    fs.rmSync(inFile, {force: true});
    fs.rmSync(outFile, {force: true});
    return `${notes.join('; ')} [qplace run ${ms} ms]`;
}

// An If model: cond (bool scalar) -> outputs, qplace vs ORT, for both conditions.
async function checkIf(ort, args, model) {
    const sess = await ort.InferenceSession.create(model);
    const notes = [];
    for (const cond of [true, false]) {
        const ref = await sess.run({[sess.inputNames[0]]: new ort.Tensor('bool', [cond], [])});
        const inFile = path.join(args.tmp, 'if.in.npy');
        const outFile = path.join(args.tmp, 'if.out.npz');
        fs.writeFileSync(inFile, npyBytes(new Uint8Array([cond ? 1 : 0]), [], '|b1'));
        fs.rmSync(outFile, {force: true});
        const r = spawnSync(args.qplace, ['run', model, '--input', `${sess.inputNames[0]}=${inFile}`,
                                          '--output', outFile], {encoding: 'utf8'});
        if (r.status !== 0) throw new Error(`qplace run failed (exit ${r.status}): ${(r.stderr || '').trim()}`);
        const got = readNpz(outFile);
        for (const name of sess.outputNames) {
            const x = got[name], y = ref[name];
            if (!x || x.data.length !== y.data.length) throw new Error(`cond ${cond}: output '${name}' missing or mis-sized`);
            for (let k = 0; k < y.data.length; k++) {
                if (!(Math.abs(x.data[k] - y.data[k]) <= ATOL + RTOL * Math.abs(y.data[k]))) {
                    throw new Error(`cond ${cond}: output '${name}'[${k}] ${x.data[k]} vs ORT ${y.data[k]}`);
                }
            }
            notes.push(`cond ${cond}: ${name} = [${Array.from(x.data).join(', ')}]`);
        }
    }
    return notes.join('; ');
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const required = process.env.QP_REQUIRE_REAL_MODELS === '1';
    const detSize = Number(args['det-size'] || 640);
    const MODELS = models(detSize);
    const ortPath = path.join(path.resolve(args.npm), 'node_modules', 'onnxruntime-node');
    const missing = [];
    if (!fs.existsSync(path.join(ortPath, 'package.json'))) missing.push(ortPath);
    for (const m of MODELS) {
        if (!fs.existsSync(path.join(args.models, m.file))) missing.push(path.join(args.models, m.file));
    }
    if (missing.length) {
        if (!required) {
            console.log(`SKIP: missing ${missing.join(', ')} (run scripts/setup.sh)`);
            return EXIT_SKIP;
        }
        console.log(`FAIL: missing ${missing.join(', ')} (QP_REQUIRE_REAL_MODELS=1)`);
        console.log('0 passed, 1 failed');
        return 1;
    }
    const ort = require(ortPath);
    fs.mkdirSync(args.tmp, {recursive: true});
    let passed = 0, failed = 0;
    for (const spec of MODELS) {
        try {
            const note = await checkModel(ort, args, spec);
            console.log(`ok   ${spec.file} (1x3x${spec.h}x${spec.w}): ${note}`);
            passed++;
        } catch (e) {
            console.log(`FAIL ${spec.file} (1x3x${spec.h}x${spec.w}): ${e.message}`);
            failed++;
        }
    }
    if (args['if-model']) {
        try {
            const note = await checkIf(ort, args, args['if-model']);
            console.log(`ok   ${args['if-model']}: ${note}`);
            passed++;
        } catch (e) {
            console.log(`FAIL ${args['if-model']}: ${e.message}`);
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
