import sys

from kernels.bench.suite import main

sys.exit(main())
