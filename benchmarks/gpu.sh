#!/usr/bin/env bash
# One pass on a machine with a CUDA GPU, sized for a short lease (about 10 minutes): the CUDA
# tests, then the benchmarks that take --device, each writing its own section of
# benchmarks/RESULTS.md (depth-cuda, activations-cuda, resnet-cuda). The logs and RESULTS.md
# are copied to $OUT (default /tmp/reluexp-gpu).
#
# The GPU machines lent to this project hold torch with CUDA but not Hydra, OmegaConf or
# google-crc32c, and reach no package index: carry them as wheels. Once, in the repository's
# root on a machine with pip and an index (.whl is ignored, never committed):
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux2014_x86_64 -d .whl \
#       hydra-core==1.3.8 omegaconf==2.3.1 google-crc32c==1.9.0
#   python3 -m pip wheel --no-deps antlr4-python3-runtime==4.9.3 -w .whl  # on PyPI as an sdist
#
# Then, there, with .whl carried: bash benchmarks/gpu.sh
set -uo pipefail
out=${OUT:-/tmp/reluexp-gpu}
# Before anything is installed: on a machine without CUDA, one line and nothing changed.
python3 -c "
import sys, torch
if not torch.cuda.is_available():
    sys.exit(f'benchmarks/gpu.sh: torch {torch.__version__} sees no CUDA device here')
print(torch.__version__, torch.cuda.get_device_name())" || exit 1
mkdir -p "$out"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps .whl/*.whl || exit 1
fi
# No index there: the installed setuptools builds the editable install.
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
export PYTHONUNBUFFERED=1
python3 -m pytest -m gpu -o addopts="" -q tests/test_cuda.py 2>&1 | tee "$out/tests.log"
python3 -m benchmarks.depth --device cuda --repetitions 5 --steps 300 2>&1 | tee "$out/depth.log"
python3 -m benchmarks.activations --device cuda --repetitions 3 2>&1 | tee "$out/activations.log"
python3 -m benchmarks.resnet --device cuda --repetitions 3 --steps 20 2>&1 | tee "$out/resnet.log"
cp benchmarks/RESULTS.md "$out/"
