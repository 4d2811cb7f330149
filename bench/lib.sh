# Shared by the bench scripts (sourced).

# generate GENERATOR OUT: runs `/usr/bin/python3 GENERATOR OUT` when OUT is missing or was made
# by a generator of other content. Generated models live in .cache, which worktrees share, so
# the check is the generator's sha256 (stamped next to OUT), not its mtime: a fresh checkout
# gives the generator a newer mtime and would otherwise regenerate a model other runs are
# reading. The generators replace OUT atomically.
generate() {
    local gen="$1" out="$2" sum
    sum=$(sha256sum "$gen" | cut -d' ' -f1)
    if [ ! -s "$out" ] || [ "$(cat "$out.gen.sha256" 2>/dev/null)" != "$sum" ]; then
        echo "bench: generating $out" >&2
        mkdir -p "$(dirname "$out")"
        /usr/bin/python3 "$gen" "$out" || return 1
        echo "$sum" >"$out.gen.sha256.tmp.$$"
        mv -f "$out.gen.sha256.tmp.$$" "$out.gen.sha256"
    fi
}
