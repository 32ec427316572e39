import sys

from warp_lint.cli import main

if __name__ == "__main__":
    sys.exit(main())
