// calibrate_ort.js NPM_DIR MODEL INPUT.bin NAME N,C,H,W BATCH
//
// The ONNX Runtime side of calibrate_cls.py: runs MODEL (every intermediate exposed as a graph
// output) over the float32 samples in INPUT.bin (shape N,C,H,W) in batches of BATCH rows, and
// prints one JSON object {tensor: [min, max]} over all batches (finite values only) on stdout.
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, model, input, name, shapeStr, batchStr] = process.argv.slice(2);
const ort = require(path.join(path.resolve(npmDir), 'node_modules', 'onnxruntime-node'));
const shape = shapeStr.split(',').map(Number);
const batch = Number(batchStr);
const buf = fs.readFileSync(input);
const all = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
const row = shape.slice(1).reduce((a, b) => a * b, 1);

(async () => {
    const session = await ort.InferenceSession.create(model, {intraOpNumThreads: 1,
                                                              graphOptimizationLevel: 'disabled'});
    const ranges = {};
    for (let start = 0; start + batch <= shape[0]; start += batch) {
        const data = all.slice(start * row, (start + batch) * row);
        const feeds = {[name]: new ort.Tensor('float32', data, [batch, ...shape.slice(1)])};
        const out = await session.run(feeds);
        for (const [k, t] of Object.entries(out)) {
            if (t.type !== 'float32') continue;
            let lo = Infinity, hi = -Infinity;
            for (const v of t.data) {
                if (!Number.isFinite(v)) continue;
                if (v < lo) lo = v;
                if (v > hi) hi = v;
            }
            if (!(k in ranges)) ranges[k] = [lo, hi];
            else ranges[k] = [Math.min(lo, ranges[k][0]), Math.max(hi, ranges[k][1])];
        }
    }
    process.stdout.write(JSON.stringify(ranges));
})().catch((e) => {
    console.error(`calibrate_ort: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
});
