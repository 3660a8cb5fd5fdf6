import sys

from kernelsmith.cli import main

sys.exit(main())
