# Sourced, not run: cargo-lambda links through Zig, which its venv carries as the `ziglang`
# package. Unless a zig is on PATH already (or CARGO_ZIGBUILD_ZIG_PATH is set), point
# cargo-zigbuild at that binary. Used by .ci/check-templates.sh and `make bench`.
if ! command -v zig >/dev/null && [ -z "${CARGO_ZIGBUILD_ZIG_PATH:-}" ]; then
  zig_venv_python=$(dirname "$(readlink -f "$(command -v cargo-lambda)")")/python3
  CARGO_ZIGBUILD_ZIG_PATH=$("$zig_venv_python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
  if [ ! -x "$CARGO_ZIGBUILD_ZIG_PATH" ]; then
    echo "no zig: expected it at $CARGO_ZIGBUILD_ZIG_PATH (the cargo-lambda venv); run .ci/tools.sh" >&2
    return 1
  fi
  export CARGO_ZIGBUILD_ZIG_PATH
fi
