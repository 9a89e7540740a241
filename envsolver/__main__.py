from envsolver.cli import main

main()
