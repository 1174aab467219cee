import sys

from aot.cli import main

sys.exit(main())
