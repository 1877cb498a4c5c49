#!/usr/bin/env bash
# Build the example's wheel (its kernels precompiled by kernix), install it in a
# fresh virtual environment, then import it and call a kernel with no compiler
# on PATH and with libclang unimportable.  Fails unless the prebuilt module,
# not a JIT build, served the call.
#
# Run it with the Python of an environment where kernix and its dependencies
# are installed (CI's):  bash examples/downstream/ci_check.sh
# The fresh environment gets kernix and the example from wheels; the
# third-party packages (jax, numpy) are taken from the building environment
# through a .pth file, so the check needs no network.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PY="${PYTHON:-python}"
WORK="$(mktemp -d)"
[ -n "${KEEP_WORK:-}" ] || trap 'rm -rf "$WORK"' EXIT

echo "== building wheels in $WORK/dist"
BUILD_PATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # the setup.py hook runs this checkout's kernix
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" "$REPO"
unset PYTHONPATH
cp -r "$HERE" "$WORK/example"  # built from a copy: the checkout gets no build/ or egg-info
rm -rf "$WORK/example/build" "$WORK"/example/src/*.egg-info
PYTHONPATH="$BUILD_PATH" "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/dist" "$WORK/example"
WHEEL="$(ls "$WORK"/dist/kernix_downstream_example-*.whl)"
"$PY" - "$WHEEL" <<'PY' || { echo "the wheel holds no prebuilt module" >&2; exit 1; }
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
sys.exit(not any(n.endswith("_prebuilt/ops/kernix-prebuilt.json") for n in names))
PY

echo "== installing into a fresh venv"
"$PY" -m venv "$WORK/venv"
SITE="$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
"$WORK/venv/bin/python" -m pip install -q --no-deps --no-index --force-reinstall "$WORK"/dist/*.whl
# after the install, so pip does not take the build environment's kernix for this one
"$PY" -c 'import jax, os; print(os.path.dirname(os.path.dirname(jax.__file__)))' > "$SITE/_deps_from_build_env.pth"

echo "== importing with no compiler and no libclang"
mkdir -p "$WORK/empty-bin" "$WORK/block/clang"
echo 'raise ImportError("libclang is not installed here")' > "$WORK/block/clang/__init__.py"
cd "$WORK"
env -i HOME="$WORK" PATH="$WORK/empty-bin" PYTHONPATH="$WORK/block" JAX_PLATFORMS=cpu \
    KERNIX_CACHE_DIR="$WORK/no-cache" "$WORK/venv/bin/python" - <<'PY'
import os, sys
import jax.numpy as jnp
import kernix
import downstream_example as d

assert "/venv/" in kernix.__file__ and "/venv/" in d.__file__, (kernix.__file__, d.__file__)
assert d.LOADED_FROM == "prebuilt", d.LOADED_FROM
y = d.axpy(2.0, jnp.arange(4, dtype=jnp.float32), jnp.ones(4, jnp.float32))
assert y.tolist() == [1.0, 3.0, 5.0, 7.0], y
# (kernix.backend.arch names GPU architectures; the rest of the backend finds and runs compilers)
assert not any(m.startswith(("clang", "kernix.frontend", "kernix.backend.")) and m != "kernix.backend.arch"
               for m in sys.modules), sorted(m for m in sys.modules if m.startswith("kernix."))
assert not os.path.exists(os.environ["KERNIX_CACHE_DIR"])
print("downstream example OK:", y.tolist(), "from", d.LOADED_FROM)
PY
