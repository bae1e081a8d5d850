from graphtool.cli import main

main()
