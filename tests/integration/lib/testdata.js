// Shared by the integration tests that run onnxruntime-node: the deterministic, real-looking
// PaddleOCR inputs (a grey page with text-like strokes, normalised as PaddleOCR does) and
// minimal .npy/.npz readers and writers for exchanging tensors with `qplace run`.
'use strict';
const fs = require('fs');

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


module.exports = {rng, textPage, makeInput, npyBytes, parseNpy, readNpz};
