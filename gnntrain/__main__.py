import sys

from gnntrain.cli import main

sys.exit(main())
