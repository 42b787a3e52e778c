from evalkit_cli._app import main

main()
