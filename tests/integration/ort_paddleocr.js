// ort_paddleocr.js --npm DIR --models DIR --resave BIN --tmp DIR
//
// ONNX Runtime check of qplace's save path on the real PaddleOCR models: each model is re-saved
// by qplace (BIN IN OUT: load + save), then the original and the re-saved model run in ONNX
// Runtime (onnxruntime-node from DIR/node_modules) on the same deterministic, real-looking input
// (a white page with dark text-like strokes, normalised as PaddleOCR does), and every output must
// be bit-identical. Missing models or runtime: skipped (exit 77) unless QP_REQUIRE_REAL_MODELS=1,
// then failed. Closes with "N passed, N failed".
'use strict';
const fs = require('fs');
const path = require('path');
const {spawnSync} = require('child_process');

const EXIT_SKIP = 77;

function parseArgs(argv) {
    const args = {};
    for (let k = 0; k < argv.length; k += 2) {
        if (!argv[k].startsWith('--') || k + 1 >= argv.length) {
            throw new Error(`bad argument ${argv[k]}`);
        }
        args[argv[k].slice(2)] = argv[k + 1];
    }
    for (const need of ['npm', 'models', 'resave', 'tmp']) {
        if (!args[need]) throw new Error(`--${need} is required`);
    }
    return args;
}

const MODELS = [
    {file: 'ch_PP-OCRv4_det_infer.onnx', h: 640, w: 640, kind: 'det'},
    {file: 'ch_PP-OCRv4_rec_infer.onnx', h: 48, w: 320, kind: 'rec'},
    {file: 'ch_ppocr_mobile_v2.0_cls_infer.onnx', h: 48, w: 192, kind: 'cls'},
];

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

function describe(kind, out) {
    const d = out.data;
    if (kind === 'det') {
        let text = 0;
        for (let k = 0; k < d.length; k++) if (d[k] > 0.3) text++;
        return `probability map ${out.dims.join('x')}, ${(100 * text / d.length).toFixed(1)}% text pixels`;
    }
    if (kind === 'rec') {
        const [, steps, classes] = out.dims;
        let chars = 0, prev = -1;
        for (let t = 0; t < steps; t++) {
            let best = 0;
            for (let c = 1; c < classes; c++) if (d[t * classes + c] > d[t * classes + best]) best = c;
            if (best !== 0 && best !== prev) chars++;
            prev = best;
        }
        return `CTC ${out.dims.join('x')}, ${chars} characters decoded`;
    }
    return `orientation probabilities [${Array.from(d).map((v) => v.toFixed(3)).join(', ')}]`;
}

async function checkModel(ort, args, spec) {
    const src = path.join(args.models, spec.file);
    const resaved = path.join(args.tmp, spec.file.replace(/\.onnx$/, '.resaved.onnx'));
    const r = spawnSync(args.resave, [src, resaved], {encoding: 'utf8'});
    if (r.status !== 0) {
        throw new Error(`qplace re-save failed (exit ${r.status}${r.signal ? ', ' + r.signal : ''}): ` +
                        `${(r.stderr || '').trim()}`);
    }
    const opts = {intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential'};
    const a = await ort.InferenceSession.create(src, opts);
    const b = await ort.InferenceSession.create(resaved, opts);
    const same = (x, y) => JSON.stringify(x) === JSON.stringify(y);
    if (!same(a.inputNames, b.inputNames) || !same(a.outputNames, b.outputNames)) {
        throw new Error(`inputs/outputs differ: ${a.inputNames}/${a.outputNames} vs ` +
                        `${b.inputNames}/${b.outputNames}`);
    }
    const input = new ort.Tensor('float32', makeInput(spec), [1, 3, spec.h, spec.w]);
    const feeds = {[a.inputNames[0]]: input};
    const oa = await a.run(feeds);
    const ob = await b.run(feeds);
    const notes = [];
    for (const name of a.outputNames) {
        const x = oa[name], y = ob[name];
        if (x.type !== y.type || !same(x.dims, y.dims)) {
            throw new Error(`output '${name}': ${x.type}${JSON.stringify(x.dims)} vs ` +
                            `${y.type}${JSON.stringify(y.dims)}`);
        }
        const bx = Buffer.from(x.data.buffer, x.data.byteOffset, x.data.byteLength);
        const by = Buffer.from(y.data.buffer, y.data.byteOffset, y.data.byteLength);
        if (bx.length === 0) throw new Error(`output '${name}' is empty`);
        if (!bx.equals(by)) {
            let k = 0;
            while (k < bx.length && bx[k] === by[k]) k++;
            throw new Error(`output '${name}' differs from byte ${k} on`);
        }
        for (const v of x.data) {
            if (!Number.isFinite(v)) throw new Error(`output '${name}' holds ${v}`);
        }
        notes.push(describe(spec.kind, x));
    }
    fs.rmSync(resaved, {force: true});
    return notes.join('; ');
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const required = process.env.QP_REQUIRE_REAL_MODELS === '1';
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
        const t0 = Date.now();
        try {
            const note = await checkModel(ort, args, spec);
            console.log(`ok   ${spec.file} (1x3x${spec.h}x${spec.w}): bit-identical; ${note} ` +
                        `[${Date.now() - t0} ms]`);
            passed++;
        } catch (e) {
            console.log(`FAIL ${spec.file}: ${e.message}`);
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
