import sys

from .cli import main

if __name__ == "__main__":
    code = main()
    if sys.argv[1:2] == ["audit"]:  # an audited sampler's leftover thread or exit handler must not keep it running
        from .audit.isolate import hard_exit

        hard_exit(code)
    sys.exit(code)
