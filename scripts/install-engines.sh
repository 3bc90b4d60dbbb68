#!/usr/bin/env sh
# The engines whose own config parsers check trainmem's exports (tests/export), at the pinned releases.
# DeepSpeed's sdist imports torch in setup.py: without --no-build-isolation pip would build it against a
# freshly downloaded multi-GB CUDA torch. torchtitan is installed without its training-data dependencies
# (datasets, tensorboard, torchdata): only its config manager is used.
set -eu
pip install -q setuptools
DS_BUILD_OPS=0 pip install -q --no-build-isolation deepspeed==0.19.5
pip install -q accelerate==1.15.0 tyro==1.0.17
pip install -q --no-deps torchtitan==0.2.2
# The frameworks whose shipped defaults tests/frameworks/test_stacks.py reads (--stack; TRL's dataclasses also check
# the --from reader, tests/frameworks/test_readers_loaders.py): their config dataclasses,
# setup() signatures and recipe YAMLs, without their training dependencies (datasets, torchao, bitsandbytes).
pip install -q --no-deps torchtune==0.6.1 trl==1.16.0 litgpt==0.5.13
