import os
import sys

from .cli import main

if __name__ == "__main__":
    code = main()
    if sys.argv[1:2] == ["audit"]:  # an audited sampler's leftover thread or exit handler must not keep it running
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)
    sys.exit(code)
