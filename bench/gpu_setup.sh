# Source me on a machine without a package registry (the H200 box):  . bench/gpu_setup.sh
#
# Puts bubblewrap on PATH from the .deb carried in .debs/ (fetched beforehand, on a machine that
# has apt, with `mkdir -p .debs && cd .debs && apt-get download bubblewrap`), and installs
# `cryptography` (for signed ledger rows) from .debs/wheels/ when Python lacks it
# (`pip download --only-binary=:all: --python-version 3.12 -d .debs/wheels cryptography`).
# Nothing is downloaded here. Ends with a probe that the sandbox works.

_kb_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
_kb_debs="$_kb_root/.debs"
_kb_py="${KBASE_PYTHON:-python3}"

if ! command -v bwrap >/dev/null 2>&1; then
  _kb_deb="$(ls "$_kb_debs"/bubblewrap_*.deb 2>/dev/null | head -n 1)"
  if [ -z "$_kb_deb" ]; then
    echo "gpu_setup: no bwrap on PATH and no $_kb_debs/bubblewrap_*.deb to unpack" >&2
  else
    rm -rf "$_kb_debs/root" && mkdir -p "$_kb_debs/root"
    if command -v dpkg >/dev/null 2>&1; then
      dpkg -x "$_kb_deb" "$_kb_debs/root"
    else  # a .deb is an ar archive holding data.tar.*
      (cd "$_kb_debs/root" && ar x "$_kb_deb" && tar -xf data.tar.* && rm -f data.tar.* control.tar.* debian-binary)
    fi
    export PATH="$_kb_debs/root/usr/bin:$PATH"
    if ldd "$_kb_debs/root/usr/bin/bwrap" | grep -q "not found"; then
      echo "gpu_setup: bwrap is missing shared libraries on this machine:" >&2
      ldd "$_kb_debs/root/usr/bin/bwrap" | grep "not found" >&2
    fi
  fi
fi

if ! "$_kb_py" -c "import cryptography" >/dev/null 2>&1; then
  if ls "$_kb_debs"/wheels/cryptography-*.whl >/dev/null 2>&1; then
    "$_kb_py" -m pip install -q --no-index --find-links "$_kb_debs/wheels" cryptography \
      || echo "gpu_setup: could not install cryptography from $_kb_debs/wheels" >&2
  else
    echo "gpu_setup: cryptography is missing and $_kb_debs/wheels has no wheel: rows cannot be signed" >&2
  fi
fi

if command -v bwrap >/dev/null 2>&1; then
  echo "gpu_setup: $(bwrap --version) at $(command -v bwrap)"
  # the same namespaces kbase asks for; as root without a user namespace if the kernel refuses one
  if bwrap --unshare-user --unshare-pid --unshare-net --unshare-ipc --unshare-uts --die-with-parent \
       --new-session --cap-drop ALL --ro-bind / / --proc /proc --dev /dev -- true 2>/dev/null; then
    echo "gpu_setup: sandbox probe ok (with a user namespace)"
  elif bwrap --unshare-pid --unshare-net --unshare-ipc --unshare-uts --die-with-parent \
       --new-session --cap-drop ALL --ro-bind / / --proc /proc --dev /dev -- true; then
    echo "gpu_setup: sandbox probe ok (no user namespace here; as root the other namespaces hold)"
  else
    echo "gpu_setup: bwrap cannot create namespaces on this machine" >&2
  fi
fi
unset _kb_root _kb_debs _kb_py _kb_deb
