import sys

from specexact.cli import main

sys.exit(main())
