from co3cli.cli.app import main

main()
