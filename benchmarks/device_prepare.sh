#!/bin/bash
# Here (the CPU machine, repo root), before a device call: what `benchmarks/device_session.sh` needs carried.
#   .whl  the wheels the device image lacks (Python 3.12, x86-64): pydantic, sqlalchemy, openai and what they need
#         that the image has not (openai >= 3 needs httpx2/httpcore2/truststore; pydantic 2.14 a newer
#         typing_extensions than torch's image pins)
#   .dev  bubblewrap 0.8.0 from Debian 12 with its libraries beside it (`.dev/bwrap.sh` sets LD_LIBRARY_PATH),
#         for the referee's sandboxes
#   .kb   KernelBench's level1-3 files, from a clone given as $KB_REPO (default: the search tool's mirror)
# Then: run(command="bash benchmarks/device_session.sh TAG 'sweep optimize'", carry=[".dev", ".whl", ".kb"]).
# Versions follow this machine's venv, so the device runs what the tests ran here.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || printf '/.dev/\n/.kb/\n' >> .git/info/exclude
PY=${PYTHON:-.venv/bin/python}
ver() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
mkdir -p .whl
rm -f .whl/*.whl
pkgs="pydantic==$(ver pydantic) pydantic-core==$(ver pydantic-core) typing-inspection annotated-types
      typing-extensions==$(ver typing-extensions) sqlalchemy==$(ver sqlalchemy) greenlet openai==$(ver openai)
      jiter distro sniffio anyio==$(ver anyio) idna h11"
if "$PY" -c "import httpx2" 2>/dev/null; then
  pkgs="$pkgs httpx2==$(ver httpx2) httpcore2==$(ver httpcore2) truststore"
fi
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl $pkgs 2>&1 | grep -v '^WARNING: Location' || true
if [ ! -x .dev/bwrap.sh ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download bubblewrap libselinux1 libpcre2-8-0 libcap2 >/dev/null 2>&1)
  for f in "$tmp"/*.deb; do dpkg -x "$f" "$tmp/x"; done
  mkdir -p .dev/lib
  cp "$tmp/x/usr/bin/bwrap" .dev/
  # copies, not links: a link travels as a link
  for f in "$tmp"/x/lib/x86_64-linux-gnu/*.so* "$tmp"/x/usr/lib/x86_64-linux-gnu/*.so*; do cp -L "$f" .dev/lib/; done
  cat > .dev/bwrap.sh <<'EOF'
#!/bin/sh
# Carried bubblewrap 0.8.0 (Debian 12) with its libraries beside it.
d=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/bwrap" "$@"
EOF
  chmod +x .dev/bwrap.sh
  rm -rf "$tmp"
fi
if [ ! -d .kb/KernelBench/level1 ]; then
  src=${KB_REPO:-/work/.mirror/ScalingIntelligence+KernelBench/repo}
  mkdir -p .kb
  git --git-dir="$src" archive HEAD KernelBench/level1 KernelBench/level2 KernelBench/level3 2>/dev/null | tar -x -C .kb \
    || git -C "$src" archive HEAD KernelBench/level1 KernelBench/level2 KernelBench/level3 | tar -x -C .kb
fi
ls .whl; .dev/bwrap.sh --version; ls .kb/KernelBench/level1 | wc -l
du -sh .whl .dev .kb
