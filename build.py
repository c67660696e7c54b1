#!/usr/bin/env python3
"""vllm-forge entry point. `python3 build.py --help` lists the commands.

    python3 build.py --target gb10 --vllm 0.27.1     build the serving image
    python3 build.py patches --vllm 0.25.0           patch status for a release
    python3 build.py apply                           patch the vLLM installed here
"""
import sys

from forge.commands.cli import main

if __name__ == "__main__":
    sys.exit(main())
