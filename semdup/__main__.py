from semdup.cli import main

main()
