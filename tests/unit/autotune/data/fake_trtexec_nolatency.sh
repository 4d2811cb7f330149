#!/bin/sh
# A stand-in for a trtexec that exits 0 without a performance summary (--skipInference).
echo "&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # trtexec $*"
echo "[12/05/2026-09:14:09] [I] Engine built in 6.871 sec."
echo "[12/05/2026-09:14:09] [I] Skipped inference phase since --skipInference is added."
echo "&&&& PASSED TensorRT.trtexec [TensorRT v100300] # trtexec $*"
