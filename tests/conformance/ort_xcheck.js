// Runs every case folder of ort_xcheck.py in ONNX Runtime (onnxruntime-node, 1 thread, graph
// optimizations off) and writes its outputs next to the inputs (out_N.bin, out.json).
// Usage: node ort_xcheck.js NPM_DIR CASES_DIR   (NPM_DIR holds node_modules/onnxruntime-node)
// Exits 1 when ORT fails on a case: every generated case is one ORT is expected to run.
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, root] = process.argv.slice(2);
if (!npmDir || !root) {
    console.error('usage: node ort_xcheck.js NPM_DIR CASES_DIR');
    process.exit(2);
}
const ort = require(path.join(path.resolve(npmDir), 'node_modules', 'onnxruntime-node'));
const types = {
    float32: [Float32Array, 'float32'], float64: [Float64Array, 'float64'],
    int64: [BigInt64Array, 'int64'], int32: [Int32Array, 'int32'], uint8: [Uint8Array, 'uint8'],
    int8: [Int8Array, 'int8'], bool: [Uint8Array, 'bool'],
};

(async () => {
    let failed = 0;
    for (const c of fs.readdirSync(root).sort()) {
        const dir = path.join(root, c);
        const man = JSON.parse(fs.readFileSync(path.join(dir, 'man.json')));
        try {
            const s = await ort.InferenceSession.create(
                path.join(dir, 'model.onnx'),
                {intraOpNumThreads: 1, graphOptimizationLevel: 'disabled'});
            const feeds = {};
            man.inputs.forEach((inp, k) => {
                const buf = fs.readFileSync(path.join(dir, `in_${k}.bin`));
                const [Arr, t] = types[inp.dtype];
                const ab = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length);
                feeds[inp.name] = new ort.Tensor(t, new Arr(ab), inp.shape);
            });
            const out = await s.run(feeds);
            const meta = s.outputNames.map((n, i) => {
                const o = out[n];
                fs.writeFileSync(path.join(dir, `out_${i}.bin`),
                                 Buffer.from(o.data.buffer, o.data.byteOffset, o.data.byteLength));
                return {type: o.type, dims: o.dims};
            });
            fs.writeFileSync(path.join(dir, 'out.json'), JSON.stringify(meta));
        } catch (e) {
            console.log(`${c}: ONNX Runtime failed: ${e.message.split('\n')[0]}`);
            failed++;
        }
    }
    process.exit(failed ? 1 : 0);
})();
