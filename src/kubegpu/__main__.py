"""``python -m kubegpu`` runs the same command line as the ``kubegpu`` script."""

from kubegpu.cli.app import main

if __name__ == "__main__":
    main()
