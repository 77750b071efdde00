from specexact.cli import console_main

console_main()
