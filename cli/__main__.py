import sys

from rocegen.cli.main import main

sys.exit(main())
