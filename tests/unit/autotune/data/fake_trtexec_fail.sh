#!/bin/sh
# A stand-in for a trtexec whose engine build fails: prints the committed failing log, exits 1.
cat "$(dirname "$0")/trtexec_build_failed.txt"
exit 1
