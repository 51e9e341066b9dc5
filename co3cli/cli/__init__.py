"""The ``co3`` command line (``co3cli.cli.app:main``): one module per command group."""
