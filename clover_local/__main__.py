from clover_local.cli import main

main()
